"""What the catalog's tables are declared with: the declarative base, its constraint names, a
JSON type that reads bad stored text as NULL, the raw-DDL objects Alembic leaves alone, and the
dialect's INSERT .. ON CONFLICT for rows concurrent crawls write.
Details: docs/internals/catalog.md#orm
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from sqlalchemy import JSON, MetaData, TypeDecorator
from sqlalchemy.orm import DeclarativeBase

__all__ = [
    "NAME_INDEX_OBJECTS",
    "NAMING_CONVENTION",
    "Base",
    "StoredJSON",
    "conflict_insert",
    "in_metadata",
]

logger = logging.getLogger(__name__)

# Named constraints so Alembic batch mode (SQLite) can drop and recreate them.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class StoredJSON(TypeDecorator[Any]):
    """JSON whose stored text, when it is not JSON (old data, a bug, a row written around the
    import's checks), reads as NULL with a warning instead of failing the whole query: one bad
    row must never take search, the web app or a report down. Same DDL as JSON; PostgreSQL's
    json type cannot hold malformed text, so this only ever triggers on SQLite."""

    impl = JSON
    cache_ok = True

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        inner = self._unwrapped_dialect_impl(dialect).result_processor(dialect, coltype)
        if inner is None:
            return None

        def process(value: Any) -> Any:
            try:
                return inner(value)
            except (ValueError, RecursionError) as exc:
                logger.warning("a stored JSON value is unreadable and was skipped (%s)", exc)
                return None

        return process


class Base(DeclarativeBase):
    """Declarative base with the naming convention."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: StoredJSON,
        list[Any]: StoredJSON,
    }


#: Schema objects made by raw DDL in migration 0011: the SQLite FTS5 table and the shadow tables
#: FTS5 keeps (https://sqlite.org/fts5.html#fts5_shadow_tables), the PostgreSQL GIN index; and
#: in migration 0015, the shapes' name pieces that triggers keep (crawler.catalog.name_shapes).
NAME_INDEX_OBJECTS = frozenset(
    {
        "quants_search",
        *(f"quants_search_{part}" for part in ("data", "idx", "content", "docsize", "config")),
        "ix_quants_search_trgm",
        "search_shape_grams",
        "search_gram_starts",
    }
)


def in_metadata(name: str | None, type_: str, parent_names: Any) -> bool:
    """Alembic's ``include_name`` hook: False for NAME_INDEX_OBJECTS (not declared here)."""
    return name not in NAME_INDEX_OBJECTS


def conflict_insert(dialect: str, table: Any) -> Any:
    """The dialect's INSERT for ``table``, which has ``on_conflict_do_nothing/do_update``.

    Concurrent writers (two crawls on one catalog) need the conflict handled in the statement:
    a read-then-insert loses the race with a unique violation.
    """
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)
    from sqlalchemy.dialects import sqlite

    return sqlite.insert(table)
