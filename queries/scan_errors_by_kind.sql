-- purpose: Errors of the latest scan (or :scan_id) grouped by kind, with one example each.
-- param: scan_id = 0  (scan id; 0 means the latest scan)
SELECT e.kind, COUNT(*) AS errors, MIN(e.repo_id) AS example_repo, MIN(e.message) AS example
FROM scan_errors e
WHERE e.scan_id = CASE WHEN :scan_id = 0 THEN (SELECT MAX(id) FROM scans) ELSE :scan_id END
GROUP BY e.kind
ORDER BY errors DESC, e.kind
