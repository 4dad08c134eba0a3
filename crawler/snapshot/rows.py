"""Snapshot record batches to the database driver's rows, column by column.

A dict per row cost more than the inserts, so batches stay columns, in the catalog's stored forms.
Details: docs/internals/snapshot.md#rows
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sqlalchemy import Connection, bindparam

from crawler.base.errors import SnapshotError
from crawler.snapshot.columns import WRITE_TABLES as TABLES
from crawler.snapshot.validate import BATCH_ROWS

__all__ = ["Batch", "Insert", "batches"]

#: SQLAlchemy's SQLite DATETIME storage format (sqlalchemy.dialects.sqlite.DATETIME); Arrow's
#: ``%S`` prints the seconds with the unit's fraction (6 digits for microseconds).
_SQLITE_TS = "%Y-%m-%d %H:%M:%S"
_NUL = "\x00"
_NUL_REPLACEMENT = "\ufffd"


class Batch:
    """One record batch of a snapshot file, its columns converted once, on first use."""

    def __init__(self, batch: pa.RecordBatch, dialect: str) -> None:
        self.batch = batch
        self.dialect = dialect
        self.names: list[str] = batch.schema.names
        self.size: int = batch.num_rows
        self._py: dict[str, list[Any]] = {}
        self._sql: dict[str, list[Any]] = {}

    def col(self, name: str) -> list[Any]:
        """The column's Python values (timestamps aware, UTC; JSON as its text)."""
        values = self._py.get(name)
        if values is None:
            values = self._py[name] = self.batch.column(name).to_pylist()
        return values

    def row(self, i: int) -> dict[str, Any]:
        """Row ``i`` as a dict (for an UPDATE through SQLAlchemy)."""
        return {n: self.col(n)[i] for n in self.names}

    def sql(self, name: str) -> list[Any]:
        """The column's values as the driver takes them (docs/internals/snapshot.md#rows)."""
        values = self._sql.get(name)
        if values is not None:
            return values
        array = self.batch.column(name)
        if pa.types.is_timestamp(array.type) and self.dialect == "sqlite":
            values = pc.strftime(array, format=_SQLITE_TS).to_pylist()
        elif (
            pa.types.is_string(array.type)
            and self.dialect == "postgresql"
            and pc.any(pc.match_substring(array, _NUL)).as_py()
        ):
            values = pc.replace_substring(array, _NUL, _NUL_REPLACEMENT).to_pylist()
        else:
            values = self.col(name)
        self._sql[name] = values
        return values


def batches(path: Path, name: str, dialect: str) -> Iterator[Batch]:
    """The snapshot file's record batches (none if the optional file is absent)."""
    file = path / name
    if not file.exists():
        return
    try:
        for batch in pq.ParquetFile(file).iter_batches(batch_size=BATCH_ROWS):
            yield Batch(batch, dialect)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise SnapshotError(f"{name}: unreadable ({exc}); nothing was imported") from None


class Insert:
    """A bulk INSERT of some of a batch's rows into one table's columns.

    SQLite: the driver's ``executemany`` of a statement SQLAlchemy compiled once (about 3x faster
    than ``conn.execute(insert, rows)``, whose per-row parameter processing dominated a 200k-quant
    import). PostgreSQL: ``COPY FROM STDIN``, ~10x faster than psycopg's pipelined executemany;
    psycopg adapts each value, the server parses JSON text into json columns.
    """

    def __init__(self, conn: Connection, name: str, names: list[str]) -> None:
        table = TABLES[name]
        dialect = conn.dialect
        self.conn = conn
        self.names = names
        self.copy_sql: str | None = None
        self.sql = ""
        self.order: list[str] | None = None
        if dialect.name == "postgresql":
            quote = dialect.identifier_preparer.quote
            self.copy_sql = (
                f"COPY {quote(table.name)} ({', '.join(quote(n) for n in names)}) FROM STDIN"
            )
            return
        compiled = table.insert().values({n: bindparam(n) for n in names}).compile(dialect=dialect)
        self.sql = compiled.string
        self.order = list(compiled.positiontup) if compiled.positiontup else None

    def __call__(
        self,
        batch: Batch,
        take: Sequence[int] | None = None,
        extra: dict[str, list[Any]] | None = None,
    ) -> int:
        """Insert the rows ``take`` (indices; ``None``: all) of ``batch``; return how many.

        ``extra`` holds whole columns the batch lacks (e.g. ``repo_pk``), one value a row.
        """
        if take is not None and len(take) == batch.size:
            take = None
        count = batch.size if take is None else len(take)
        if count == 0:
            return 0
        extra = extra or {}
        columns: dict[str, list[Any]] = {}
        for n in self.names:
            values = extra[n] if n in extra else batch.sql(n)
            columns[n] = values if take is None else [values[i] for i in take]
        if self.copy_sql is not None:
            cursor = self.conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            try:
                with cursor.copy(self.copy_sql) as copy:
                    for row in zip(*(columns[n] for n in self.names), strict=True):
                        copy.write_row(row)
            finally:
                cursor.close()
        elif self.order is not None:
            self.conn.exec_driver_sql(
                self.sql, list(zip(*(columns[n] for n in self.order), strict=True))
            )
        else:
            self.conn.exec_driver_sql(
                self.sql,
                [
                    dict(zip(self.names, v, strict=True))
                    for v in zip(*columns.values(), strict=True)
                ],
            )
        return count
