"""The catalog: the ONLY API the rest of quants uses to reach the database.

May import: base, gguf, fit, profile (part), ranking (part).
Details: docs/internals/catalog.md#overview
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crawler.catalog.database import Catalog, params_from_pairs, redact_url, resource_dir

__all__ = ["Catalog", "params_from_pairs", "redact_url", "resource_dir"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from crawler.catalog import database

        return getattr(database, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
