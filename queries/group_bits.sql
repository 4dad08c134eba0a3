-- purpose: Bits of every tensor group of one repo's quants (LIKE pattern), to compare uploaders at a glance.
-- param: repo = %  (repo id or SQL LIKE pattern, e.g. unsloth/%)
SELECT repo_id, path, group_name, n_tensors, bpw, min_bits, max_bits, n_bytes
FROM v_tensor_groups
WHERE lower(repo_id) LIKE lower(:repo)
ORDER BY repo_id, path, group_name
