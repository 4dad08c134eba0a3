-- purpose: Files re-uploaded under the same name (more than one analysed content), newest first.
SELECT r.repo_id, q.path, COUNT(v.id) AS versions, MAX(v.analysed_at) AS last_analysed
FROM quant_versions v
JOIN quants q ON q.id = v.quant_id
JOIN repos r ON r.id = q.repo_pk
GROUP BY r.repo_id, q.path
HAVING COUNT(DISTINCT v.content_key) > 1
ORDER BY last_analysed DESC, r.repo_id, q.path
