"""The GGUF reader: header parsing, the fetch policy, sibling reads (pure; imports errors only)."""
