"""The crawl: one pass (lock, scan, watches), its scheduler and on-demand look-ups (I/O).

May import: base, gguf, profile, ranking, hub, catalog, library.
Details: docs/internals/crawl.md
"""
