"""Bulk loading into empty catalog tables, inside the import's one transaction.

Indexes (and PostgreSQL's foreign keys) are rebuilt once: row by row was half of an import.
Details: docs/internals/snapshot.md#bulk
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, text

__all__ = ["drop_for_load", "empty_tables", "load_settings", "rebuild"]

#: PostgreSQL ``maintenance_work_mem`` for the index builds and key checks after the load.
PG_MAINTENANCE_WORK_MEM = "256MB"


def empty_tables(conn: Connection, tables: Iterable[str]) -> set[str]:
    """Which of ``tables`` hold no row (read in the caller's transaction)."""
    quote = conn.dialect.identifier_preparer.quote
    return {
        name
        for name in tables
        if conn.exec_driver_sql(f"SELECT 1 FROM {quote(name)} LIMIT 1").first() is None
    }


def _sqlite_indexes(conn: Connection, table: str) -> list[tuple[str, str]]:
    unique = {
        row[1]
        for row in conn.exec_driver_sql(f"PRAGMA index_list({_sqlite_literal(table)})")
        if row[2]
    }
    rows = conn.execute(
        text(
            "SELECT name, sql FROM sqlite_master "
            "WHERE type = 'index' AND tbl_name = :t AND sql IS NOT NULL ORDER BY name"
        ),
        {"t": table},
    )
    return [(name, sql) for name, sql in rows if name not in unique]


def _sqlite_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _pg_indexes(conn: Connection, table: str) -> list[tuple[str, str]]:
    rows = conn.execute(
        text(
            "SELECT ic.relname, pg_get_indexdef(i.indexrelid) "
            "FROM pg_index i "
            "JOIN pg_class ic ON ic.oid = i.indexrelid "
            "JOIN pg_class tc ON tc.oid = i.indrelid "
            "WHERE tc.oid = to_regclass(:t) AND NOT i.indisunique AND NOT i.indisprimary "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid) "
            "ORDER BY ic.relname"
        ),
        {"t": conn.dialect.identifier_preparer.quote(table)},
    )
    return [(name, sql) for name, sql in rows]


def _pg_foreign_keys(conn: Connection, table: str) -> list[tuple[str, str]]:
    quote = conn.dialect.identifier_preparer.quote
    rows = conn.execute(
        text(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid = to_regclass(:t) AND contype = 'f' ORDER BY conname"
        ),
        {"t": quote(table)},
    )
    return [
        (name, f"ALTER TABLE {quote(table)} ADD CONSTRAINT {quote(name)} {definition}")
        for name, definition in rows
    ]


def drop_for_load(conn: Connection, tables: Iterable[str]) -> list[str]:
    """Drop the plain indexes (and PostgreSQL foreign keys) of ``tables``; return the statements
    that make them again, indexes first."""
    quote = conn.dialect.identifier_preparer.quote
    postgres = conn.dialect.name == "postgresql"
    indexes: list[str] = []
    keys: list[str] = []
    for table in sorted(tables):
        for name, sql in (_pg_indexes if postgres else _sqlite_indexes)(conn, table):
            conn.exec_driver_sql(f"DROP INDEX {quote(name)}")
            indexes.append(sql)
        if postgres:
            for name, sql in _pg_foreign_keys(conn, table):
                conn.exec_driver_sql(f"ALTER TABLE {quote(table)} DROP CONSTRAINT {quote(name)}")
                keys.append(sql)
    return indexes + keys


def rebuild(conn: Connection, statements: Iterable[str]) -> None:
    """Make again what drop_for_load dropped."""
    for sql in statements:
        conn.exec_driver_sql(sql)


@contextmanager
def load_settings(conn: Connection) -> Iterator[None]:
    """More memory for the load on conn, for the transaction (docs/internals/snapshot.md#bulk)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SET LOCAL maintenance_work_mem = '{PG_MAINTENANCE_WORK_MEM}'")
    yield
