"""Profiling: tensor roles, precision per group and layer, labels, claims (pure; over gguf, fit)."""
