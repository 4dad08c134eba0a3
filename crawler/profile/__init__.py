"""Profiling: tensor roles, precision per group and layer, labels, claims (pure; over gguf, fit).

May import: base, gguf, fit.
Details: docs/internals/profile.md
"""
