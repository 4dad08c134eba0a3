-- purpose: Quants that carry an MTP head but keep it below :min_bits (speculative decoding loses acceptance).
-- param: min_bits = 6  (nominal bits below which the MTP head counts as downgraded)
SELECT repo_id, path, quant_label, mtp_min_bits, attn_min_bits, size_bytes
FROM v_quants
WHERE mtp_present AND mtp_min_bits < :min_bits
ORDER BY repo_id, size_bytes
