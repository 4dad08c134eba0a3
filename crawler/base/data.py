"""The tables shipped in crawler/data/ (GPUs, sensitivities, held-out KLD), read as text.
Details: docs/internals/base.md#data
"""

from __future__ import annotations

import pkgutil

__all__ = ["data_text"]


def data_text(name: str) -> str:
    """crawler/data/NAME as UTF-8 text, through the package's loader (pkgutil.get_data, which
    reads a zip-imported package too; importlib.resources would cost a CLI start ~5 ms)."""
    data = pkgutil.get_data("crawler", f"data/{name}")
    if data is None:  # a loader that cannot read package data
        raise FileNotFoundError(f"crawler/data/{name}")
    return data.decode("utf-8")
