"""Benchmarks: speed and memory targets live here, not in timed tests. Run: python -m bench."""
