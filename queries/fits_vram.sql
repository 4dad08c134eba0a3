-- purpose: Quick prefilter: quants whose device weights + f16 KV cache at :ctx tokens fit :vram_gib GiB (compute buffers not included; `quants search` gives the exact answer).
-- param: vram_gib = 24  (GPU memory in GiB)
-- param: ctx = 32768  (context length in tokens)
SELECT r.repo_id, q.path, q.quant_label, m.weights_bytes,
       m.kv_bytes_per_token_f16 * :ctx + m.fixed_bytes_f16 AS kv_bytes,
       m.weights_bytes + m.kv_bytes_per_token_f16 * :ctx + m.fixed_bytes_f16 AS total_bytes
FROM quants q
JOIN repos r ON r.id = q.repo_pk
JOIN memory_models m ON m.quant_id = q.id
WHERE q.vanished_at IS NULL AND r.vanished_at IS NULL AND m.status = 'ok'
  AND m.weights_bytes + m.kv_bytes_per_token_f16 * :ctx + m.fixed_bytes_f16
      <= :vram_gib * 1073741824.0
ORDER BY total_bytes DESC
