-- purpose: Quants whose MTP head is present and every MTP weight is at >= 6 bits, smallest first.
SELECT repo_id, path, quant_label, architecture, mtp_min_bits, attn_min_bits, size_bytes
FROM v_quants
WHERE mtp_present AND mtp_preserved
ORDER BY size_bytes, repo_id, path
