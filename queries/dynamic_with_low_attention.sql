-- purpose: Quants labelled UD/Dynamic (or measured dynamic) whose attention drops below :min_bits.
-- param: min_bits = 6  (nominal bits attention should keep)
SELECT repo_id, path, quant_label, attn_min_bits, dynamic, size_bytes
FROM v_quants
WHERE (lower(path) LIKE '%ud-%' OR lower(path) LIKE '%dynamic%' OR dynamic)
  AND attn_min_bits < :min_bits
ORDER BY attn_min_bits, repo_id, path
