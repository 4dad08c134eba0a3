"""Byte units: llama.cpp prints MiB, quants shows GiB (both binary), in one place."""

from __future__ import annotations

__all__ = ["GIB", "MIB"]

MIB = 1024**2
GIB = 1024**3
