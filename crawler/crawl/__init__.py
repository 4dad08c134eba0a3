"""The crawl: one pass (lock, scan, watches), its scheduler and on-demand look-ups (I/O)."""
