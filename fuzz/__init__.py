"""Fuzzing harnesses for the code that reads untrusted bytes (not part of the installed package).

``python -m fuzz.header --runs 1000000`` fuzzes the GGUF header parser and what the crawl does
with a parsed header; see fuzz/header.py and docs/reliability.md.
"""
