"""quants: find, verify and rank GGUF quantizations on the Hugging Face Hub.

The package is named crawler; the public API is imported lazily, so import crawler stays fast.
Details: docs/internals/base.md#crawler
"""

from __future__ import annotations

import importlib

# Not typing.TYPE_CHECKING: `import crawler` stays free of typing (~5 ms of `quants --help`).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

# name -> module that defines it
_EXPORTS = {
    "Catalog": "crawler.catalog",
    "GGUFHeader": "crawler.gguf.parse",
    "RunConfig": "crawler.fit",
    "Settings": "crawler.base.config",
    "build_profile": "crawler.profile.build",
    "coefficients": "crawler.fit",
    "estimate": "crawler.fit",
    "max_ctx": "crawler.fit",
    "read_header": "crawler.gguf.parse",
    "run_once": "crawler.crawl.scan",
}

__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'crawler' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
