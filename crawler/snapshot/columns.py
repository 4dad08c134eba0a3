"""Arrow types of the snapshot's column kinds, and the catalog columns each snapshot file reads.

A snapshot copies whole tables, so this package alone outside the catalog reads its tables.
Details: docs/internals/snapshot.md#columns
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from sqlalchemy import JSON, Column, MetaData, Table, Text, cast

from crawler.catalog.orm import StoredJSON
from crawler.catalog.tables import (
    File,
    MemoryModel,
    Quant,
    QuantVersion,
    Repo,
    TensorGroup,
    TensorTable,
)
from crawler.snapshot.manifest import FILES, OPTIONAL_FILES
from crawler.snapshot.manifest import Column as SnapshotColumn

__all__ = ["TABLES", "WRITE_TABLES", "arrow_schema", "as_utc", "columns_of", "read_expr"]

#: snapshot file -> the catalog table its non-key columns come from.
TABLES: dict[str, Table] = {
    "repos.parquet": Repo.__table__,  # type: ignore[dict-item]
    "quants.parquet": Quant.__table__,  # type: ignore[dict-item]
    "files.parquet": File.__table__,  # type: ignore[dict-item]
    "tensor_groups.parquet": TensorGroup.__table__,  # type: ignore[dict-item]
    "memory_models.parquet": MemoryModel.__table__,  # type: ignore[dict-item]
    "quant_versions.parquet": QuantVersion.__table__,  # type: ignore[dict-item]
    "tensor_tables.parquet": TensorTable.__table__,  # type: ignore[dict-item]
}


def _write_table(table: Table) -> Table:
    # The same table for INSERT/UPDATE, except that Python None in a JSON column is SQL NULL
    # (what the crawl stores when it sets nothing), not the JSON text 'null'.
    cols = [
        Column(
            c.name,
            JSON(none_as_null=True) if isinstance(c.type, JSON | StoredJSON) else c.type,
            primary_key=c.primary_key,
        )
        for c in table.columns
    ]
    return Table(table.name, MetaData(), *cols)


#: What the import writes through (see _write_table).
WRITE_TABLES: dict[str, Table] = {name: _write_table(t) for name, t in TABLES.items()}

_ARROW = {
    "int": pa.int64(),
    "float": pa.float64(),
    "bool": pa.bool_(),
    "str": pa.string(),
    # Microseconds in UTC: what both SQLite (ISO text) and PostgreSQL (timestamptz) keep.
    "ts": pa.timestamp("us", tz="UTC"),
    "json": pa.string(),
    "bytes": pa.binary(),
}


def columns_of(name: str) -> tuple[SnapshotColumn, ...]:
    """The columns of snapshot file ``name``."""
    return FILES.get(name) or OPTIONAL_FILES[name]


def arrow_schema(name: str) -> pa.Schema:
    """The Arrow schema of snapshot file ``name``."""
    return pa.schema([pa.field(c.name, _ARROW[c.kind]) for c in columns_of(name)])


def read_expr(table: Table, column: SnapshotColumn) -> Any:
    """The SELECT expression of a catalog column: JSON is read as its text (no decode/encode)."""
    col = table.c[column.name]
    return cast(col, Text) if column.kind == "json" else col


def as_utc(value: datetime | None) -> datetime | None:
    """SQLite hands timestamps back naive (they were stored in UTC); make every one aware."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
