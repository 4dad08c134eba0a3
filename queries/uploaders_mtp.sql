-- purpose: Per uploader: quants with an MTP head, how many keep it at >= 6 bits, and how many downgrade it.
SELECT r.author,
       COUNT(*) AS quants_with_mtp,
       SUM(CASE WHEN q.mtp_preserved THEN 1 ELSE 0 END) AS preserved,
       SUM(CASE WHEN q.mtp_preserved THEN 0 ELSE 1 END) AS downgraded
FROM quants q
JOIN repos r ON r.id = q.repo_pk
WHERE q.vanished_at IS NULL AND r.vanished_at IS NULL AND q.mtp_present
GROUP BY r.author
ORDER BY preserved DESC, r.author
