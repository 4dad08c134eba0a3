"""The catalog: the ONLY API the rest of quants uses to reach the database.

database holds Catalog (SQLAlchemy engine, Alembic migrations,
sessions, read-only user SQL); reader a plain DBAPI read connection for
the latency-bound search path; sibling modules (store, candidates, ordered, history, ...) the
read/write helpers. The names below are resolved lazily so that the search path, which needs
only the reader, starts without importing SQLAlchemy (~0.2 s of a ``quants search`` run).
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
