"""The GGUF reader: header parsing, the fetch policy, sibling reads (pure; imports errors only).

May import: base.
Details: docs/internals/gguf.md
"""
