"""A read connection to the catalog through the DBAPI driver itself (sqlite3, psycopg).

The search must answer well under a second, and importing SQLAlchemy alone costs ~0.2 s of it.
Details: docs/internals/catalog.md#reader
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from crawler.base.closing import Closing
from crawler.base.errors import CatalogError, SchemaOutOfDate

__all__ = ["SCHEMA_HEAD", "Reader", "as_bool", "as_datetime", "placeholders"]

#: The Alembic revision this version of quants reads and writes (a test checks it is the head).
SCHEMA_HEAD = "0018_copy_classes"

# The busy timeout the SQLAlchemy engine uses too (crawler.catalog.database).
_SQLITE_TIMEOUT_S = 30.0
#: The memory map a read connection asks for (SQLite caps it at SQLITE_MAX_MMAP_SIZE).
_SQLITE_MMAP_BYTES = 1 << 40
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


class Reader(Closing):
    """One DBAPI connection used only to read. Use as a context manager or call close."""

    def __init__(self, conn: Any, dialect: str, *, owned: bool = True) -> None:
        self.conn = conn
        self.dialect = dialect  # "sqlite" or "postgresql"
        self._owned = owned
        self._sql: dict[str, tuple[str, tuple[str, ...]]] = {}
        self._cursors = 0

    @classmethod
    def open(cls, url: str) -> Reader:
        """Open the catalog at ``url`` for reading; CatalogError when this path cannot serve it
        (missing SQLite file, other database, unreachable server) and SchemaOutOfDate when the
        schema is not SCHEMA_HEAD: the caller then opens it the full way."""
        scheme, _, rest = url.partition("://")
        backend = scheme.split("+", 1)[0]
        try:
            if backend == "sqlite":
                reader = cls(_connect_sqlite(rest), "sqlite")
            elif backend in ("postgresql", "postgres") and scheme in (
                "postgresql",
                "postgres",
                "postgresql+psycopg",
            ):
                import psycopg

                conn = psycopg.connect("postgresql://" + rest)
                # One snapshot for all of a search's statements (pages, details, siblings).
                conn.execute(
                    "SET SESSION CHARACTERISTICS AS TRANSACTION"
                    " ISOLATION LEVEL REPEATABLE READ, READ ONLY"
                )
                conn.commit()
                reader = cls(conn, "postgresql")
            else:
                raise CatalogError(f"no direct reader for {backend or 'this'} URLs")
        except CatalogError:
            raise
        except Exception as exc:  # sqlite3.Error, psycopg.Error, ImportError, ValueError
            raise CatalogError(f"cannot open catalog: {_first_line(exc)}") from None
        try:
            revision = reader.revision()
        except CatalogError:
            reader.close()
            raise
        if revision != SCHEMA_HEAD:
            reader.close()
            raise SchemaOutOfDate(
                f"catalog schema is at {revision or 'nothing'}, not {SCHEMA_HEAD}"
            )
        return reader

    def close(self) -> None:
        """End the read transaction; close the connection if this reader opened it."""
        try:
            self.conn.rollback()
        finally:
            if self._owned:
                self.conn.close()

    def revision(self) -> str | None:
        """The Alembic revision the database is at (None when it has none)."""
        try:
            rows = self.rows("SELECT version_num FROM alembic_version")
        except CatalogError:
            return None
        return str(rows[0][0]) if rows else None

    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """All rows of one SELECT."""
        native, args = self._native(sql, params)
        cur = self._cursor()
        try:
            cur.execute(native, args)
            return [tuple(row) for row in cur.fetchall()]
        except Exception as exc:
            raise _database_error(exc) from None
        finally:
            cur.close()

    def stream(
        self, sql: str, params: Mapping[str, Any] | None = None, *, chunk: int = 256
    ) -> Iterator[tuple[Any, ...]]:
        """The rows of one SELECT, fetched ``chunk`` at a time, so a reader that stops early
        leaves the rest unread (a server-side cursor on PostgreSQL). Close it when done."""
        native, args = self._native(sql, params)
        if self.dialect == "postgresql":
            from psycopg import RawServerCursor

            self._cursors += 1
            cur = RawServerCursor(self.conn, f"quants_stream_{self._cursors}")
        else:
            cur = self.conn.cursor()
        try:
            try:
                cur.execute(native, args)
            except Exception as exc:
                raise _database_error(exc) from None
            while True:
                try:
                    batch = cur.fetchmany(chunk)
                except Exception as exc:
                    raise _database_error(exc) from None
                if not batch:
                    return
                for row in batch:
                    yield tuple(row)
        finally:
            cur.close()

    def without_jit(self) -> None:
        """PostgreSQL: no JIT in this read transaction. The planner prices a whole streamed
        result (~10^5 rows) and JIT-compiles the memory bound (~0.1-0.3 s) where a stream reads a
        page or two. Nothing on SQLite."""
        if self.dialect == "postgresql":
            self.rows("SELECT set_config('jit', 'off', true)")

    def for_short_reads(self) -> None:
        """PostgreSQL, for the rest of this read transaction: no parallel workers (starting one
        costs more, ~3 ms, than a read of a few hundred rows takes; a cursor never starts any).
        The server's own plan choice stays: planning a run's read took ~1 ms, 7x its run on a
        test catalog, and forcing a plan per call made the 200k-quant benchmarks 8-12 % slower
        (docs/internals/catalog.md). Nothing on SQLite."""
        if self.dialect == "postgresql":
            self.rows("SELECT set_config('max_parallel_workers_per_gather', '0', true)")

    def _cursor(self) -> Any:
        """A client-side cursor: on PostgreSQL one that sends ``$n`` statements as they are."""
        if self.dialect == "postgresql":
            from psycopg import RawCursor

            return RawCursor(self.conn)
        return self.conn.cursor()

    def _native(self, sql: str, params: Mapping[str, Any] | None) -> tuple[str, Any]:
        """The statement and its arguments in the driver's style. SQLite takes ``:name`` and a
        mapping. PostgreSQL gets ``$n`` and a list (each name's first use numbered, the statement
        rewritten once): psycopg's named style parses every statement over 4096 characters again
        on each execution, and a search's reads are mostly that long."""
        if self.dialect != "postgresql":
            return sql, dict(params or {})
        cached = self._sql.get(sql)
        if cached is None:
            names: dict[str, int] = {}

            def number(m: re.Match[str]) -> str:
                return f"${names.setdefault(m.group(1), len(names) + 1)}"

            cached = self._sql[sql] = (_PARAM.sub(number, sql), tuple(names))
        native, names_in_order = cached
        given = params or {}
        try:
            return native, [given[name] for name in names_in_order]
        except KeyError as exc:
            raise CatalogError(f"query failed: no value for parameter {exc.args[0]}") from None


def placeholders(prefix: str, values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """``(":p0, :p1, ...", {"p0": v0, ...})`` for an ``IN (...)`` list."""
    names = [f"{prefix}{i}" for i in range(len(values))]
    return ", ".join(f":{n}" for n in names), dict(zip(names, values, strict=True))


def as_bool(value: Any) -> bool | None:
    """A boolean column's value (SQLite gives 0/1)."""
    return None if value is None else bool(value)


def as_datetime(value: Any) -> datetime | None:
    """A ``DateTime(timezone=True)`` column's value, aware. SQLite holds the ISO text SQLAlchemy
    wrote (UTC, no offset); PostgreSQL gives an aware datetime."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value if isinstance(value, datetime) else None


def _connect_sqlite(rest: str) -> sqlite3.Connection:
    # SQLAlchemy's form: sqlite:///relative/path or sqlite:////absolute/path (rest = "/" + path).
    path = unquote(rest[1:]) if rest.startswith("/") else ""
    if not path or path == ":memory:" or "?" in rest:
        raise CatalogError("no direct reader for this SQLite URL")
    file = Path(path)
    if not file.is_file():
        raise CatalogError(f"no catalog at {file}")
    uri = f"file:{quote(str(file.resolve()))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=_SQLITE_TIMEOUT_S)
    conn.execute("PRAGMA query_only=ON")
    # Pages read through a memory map (up to the build's limit, 2 GiB by default), not a read
    # call and a copy each: a search touches thousands of scattered rows (the memory models of
    # a shape's 8,642 copies at 1M quants: 14 ms instead of 40).
    conn.execute(f"PRAGMA mmap_size={_SQLITE_MMAP_BYTES}")
    # One read transaction, so all of a search's statements see one snapshot while a crawl
    # commits (WAL readers do not block it).
    conn.execute("BEGIN")
    return conn


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _database_error(exc: Exception) -> CatalogError:
    return CatalogError(f"database error: {_first_line(exc)}")
