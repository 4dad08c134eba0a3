-- purpose: Quants whose names claim something their tensors contradict (UD, MTP, a quant label), with the claims.
SELECT r.repo_id, q.path, q.quant_label, CAST(q.claims AS TEXT) AS claims
FROM quants q
JOIN repos r ON r.id = q.repo_pk
WHERE q.vanished_at IS NULL AND q.claims IS NOT NULL AND CAST(q.claims AS TEXT) NOT IN ('[]', 'null')
ORDER BY r.repo_id, q.path
