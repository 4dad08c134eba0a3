"""The library calls behind commands: search, its JSON, estimate, check-log, header targets.

May import: base, gguf, fit, profile, ranking, hub, catalog.
Details: docs/internals/base.md#search
"""
