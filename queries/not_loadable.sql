-- purpose: Quants mainline llama.cpp cannot load (fork or ik_llama.cpp tensor types).
SELECT repo_id, path, quant_label, architecture, size_bytes
FROM v_quants
WHERE NOT loadable_by_mainline
ORDER BY repo_id, path
