"""Benchmarks: speed and memory targets live here, not in timed tests; `python -m bench` runs all."""
