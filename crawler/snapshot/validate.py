"""Every row of a snapshot checked before anything is written: a snapshot is untrusted input.

The first value the crawl could not have written refuses it all; export leaves such rows out.
Details: docs/internals/snapshot.md#validate
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from crawler.base.errors import SnapshotError
from crawler.catalog.tensor_tables import TENSOR_TABLE_ENCODING, TensorTableError
from crawler.catalog.tensor_tables import decode_tensor_table as _decode_table
from crawler.snapshot.columns import TABLES, columns_of
from crawler.snapshot.json_shapes import JSON_SHAPES, MAX_JSON_BYTES, MAX_TEXT, load_json

__all__ = [
    "BATCH_ROWS",
    "MAX_BATCH_BYTES",
    "MAX_FILE_BYTES",
    "MAX_ROWS",
    "RowProblem",
    "check_hub_path",
    "check_repo_id",
    "refused_rows",
    "validate_file",
]

#: Rows per record batch; the merge reads the same batches (crawler/snapshot/rows.py).
BATCH_ROWS = 20_000
#: Rows in one snapshot file (a whole-Hub catalog holds a few hundred thousand quants).
MAX_ROWS = 10_000_000
#: Decoded bytes of one file's variable-width values, and of one batch's.
MAX_FILE_BYTES = 8 * 1024**3
MAX_BATCH_BYTES = 512 * 1024**2
#: A column chunk the Parquet footer says decodes to more than this is refused before reading.
MAX_CHUNK_BYTES = 2 * 1024**3
#: Compressed bytes of one stored tensor table.
MAX_BLOB_BYTES = 16 * 1024**2
#: How far past the import time a timestamp may be (clocks differ a little).
CLOCK_SKEW = timedelta(minutes=10)
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)

_INT_MAX = {"Integer": (1 << 31) - 1, "BigInteger": (1 << 63) - 1}
_BITS = (0.0, 64.0)
_FLOAT_RANGES: dict[str, tuple[float, float]] = {
    "bpw": _BITS,
    "min_bits": _BITS,
    "max_bits": _BITS,
    "mtp_min_bits": _BITS,
    "attn_min_bits": _BITS,
    "quality_score": (0.0, 100.0),
    "fit_verify_experts": (0.0, 1e12),
}
_ENUMS: dict[tuple[str, str], frozenset[str]] = {
    ("files.parquet", "kind"): frozenset(
        {"gguf", "shard", "part", "mmproj", "mtp_sidecar", "other"}
    ),
    ("memory_models.parquet", "status"): frozenset({"ok", "unknown"}),
    ("repos.parquet", "gated"): frozenset({"auto", "manual"}),
    ("tensor_tables.parquet", "encoding"): frozenset({TENSOR_TABLE_ENCODING}),
}
_HEX = re.compile(r"[0-9a-fA-F]{1,64}")
_HEX_COLUMNS = frozenset({"sha", "scanned_sha", "revision", "lfs_oid", "blob_id", "analysed_oid"})
_PATH_COLUMNS = frozenset({"path", "quant_path"})
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_FORBIDDEN_FOLDERS = (".git", ".cache")  # huggingface_hub constants.FORBIDDEN_FOLDERS
_KEYS: dict[str, tuple[str, ...]] = {
    "repos.parquet": ("repo_id",),
    "quants.parquet": ("repo_id", "path"),
    "files.parquet": ("repo_id", "path"),
    "tensor_groups.parquet": ("repo_id", "path", "group_name"),
    "memory_models.parquet": ("repo_id", "path"),
    "tensor_tables.parquet": ("repo_id", "path"),
}


class RowProblem(SnapshotError):
    """One value of a snapshot row is not one the crawl could have written."""

    def __init__(self, name: str, row: int | None, column: str | None, problem: str) -> None:
        where = name + (f", row {row + 1}" if row is not None else "")
        where += f", column {column}" if column else ""
        super().__init__(f"{where}: {problem}; the snapshot was refused, nothing was imported")
        self.file = name
        self.row = row
        self.column = column


# -- names -----------------------------------------------------------------------------------


def check_repo_id(value: str) -> str | None:
    """Why ``value`` is not a Hub repo id (None when it is)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils._validators import validate_repo_id

    try:
        validate_repo_id(value)
    except HFValidationError:
        return f"{value[:120]!r} is not a Hub repo id"
    return None


def check_hub_path(value: str) -> str | None:
    """Why ``value`` is not a file path a Hub repo can hold (None when it is)."""
    if not value or len(value) > 1024:
        return "a file path must be 1 to 1024 characters"
    if _CONTROL.search(value):
        return f"file path {value[:120]!r} holds a control character"
    parts = value.split("/")
    if value.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return f"file path {value[:120]!r} is not relative and normal"
    if any(p in _FORBIDDEN_FOLDERS for p in parts[:-1]):
        return f"file path {value[:120]!r} is under a folder the Hub forbids"
    return None


# -- per column ------------------------------------------------------------------------------


def _column_limits(name: str) -> dict[str, tuple[str, int | None]]:
    """column -> (SQL type name, declared length) from the catalog table the file fills."""
    table = TABLES[name]
    out: dict[str, tuple[str, int | None]] = {}
    for c in table.columns:
        out[c.name] = (type(c.type).__name__, getattr(c.type, "length", None))
    return out


def _first(mask: pa.Array) -> int | None:
    hits = pc.indices_nonzero(pc.fill_null(mask, False))
    return int(hits[0].as_py()) if len(hits) else None


def _dense(array: pa.Array) -> pa.Array:
    return array.dictionary_decode() if pa.types.is_dictionary(array.type) else array


#: A check over one column: the mask of the rows it refuses (null: accepted), and why row i is.
Check = tuple[pa.Array, Callable[[int], str]]


def _python_mask(array: pa.Array, check: Callable[[Any], str | None]) -> Check | None:
    """The rows whose value ``check`` refuses (None: none), checking each distinct value once
    (the import reads text columns dictionary-encoded; the export's are encoded here)."""
    if not pa.types.is_dictionary(array.type):
        array = array.dictionary_encode()
    problems = {}
    for i, v in enumerate(array.dictionary.to_pylist()):
        if v is not None:
            p = check(v)
            if p:
                problems[i] = p
    if not problems:
        return None
    mask = pc.is_in(array.indices, pa.array(list(problems), array.indices.type))
    return mask, lambda row: problems[array.indices[row].as_py()]


def _value_bytes(array: pa.Array) -> int:
    """Decoded bytes of a string/binary column, a dictionary value counted at every use."""
    if pa.types.is_dictionary(array.type):
        lengths = pc.binary_length(array.dictionary)
        return int(pc.sum(pc.take(lengths, array.indices)).as_py() or 0)
    return int(pc.sum(pc.binary_length(array)).as_py() or 0)


class _Checker:
    """The checks of one snapshot file."""

    def __init__(self, name: str, now: datetime) -> None:
        self.name = name
        self.limits = _column_limits(name)
        self.kinds = {c.name: c.kind for c in columns_of(name)}
        self.latest = now + CLOCK_SKEW
        self.keys: set[tuple[Any, ...]] = set()
        self.total = 0

    def fail(self, row: int | None, column: str | None, problem: str) -> RowProblem:
        return RowProblem(self.name, row, column, problem)

    def column(self, col: str, array: pa.Array, offset: int) -> None:
        """Raise RowProblem at the first row a check of column ``col`` refuses."""
        for mask, why in self.checks(col, array):
            bad = _first(mask)
            if bad is not None:
                raise self.fail(offset + bad, col, why(bad))

    def checks(self, col: str, array: pa.Array) -> Iterator[Check]:
        """Every check of column ``col`` over ``array``, in order, computed when reached."""
        kind = self.kinds[col]
        sql_type, length = self.limits.get(col, ("", None))
        mask: pa.Array | None = None
        problem = ""
        if kind == "int":
            top = _INT_MAX.get(sql_type, (1 << 63) - 1)
            mask = pc.or_(pc.less(array, 0), pc.greater(array, top))
            problem = f"not an integer from 0 to {top}"
        elif kind == "float":
            lo, hi = _FLOAT_RANGES.get(col, (0.0, 1e30))
            finite = pc.is_finite(array)
            mask = pc.or_(pc.invert(finite), pc.or_(pc.less(array, lo), pc.greater(array, hi)))
            problem = f"not a finite number from {lo:g} to {hi:g}"
        elif kind == "ts":
            lo = pa.scalar(EARLIEST, pa.timestamp("us", tz="UTC"))
            hi = pa.scalar(self.latest, pa.timestamp("us", tz="UTC"))
            mask = pc.or_(pc.less(array, lo), pc.greater(array, hi))
            problem = f"a time outside {EARLIEST:%Y-%m-%d} .. the import time"
        if mask is not None:

            def why(row: int) -> str:
                value = array[row].as_py()
                shown = value.isoformat() if isinstance(value, datetime) else repr(value)
                return f"{shown} is {problem}"

            yield mask, why
        if kind in ("str", "json", "bytes"):
            yield from self.text(col, kind, array, length)

    def text(self, col: str, kind: str, array: pa.Array, length: int | None) -> Iterator[Check]:
        values = array.dictionary if pa.types.is_dictionary(array.type) else array
        cap = MAX_BLOB_BYTES if kind == "bytes" else MAX_JSON_BYTES if kind == "json" else None
        if kind == "str":
            cap = length or MAX_TEXT
        if cap is not None and len(values):
            measure = pc.binary_length(values) if kind == "bytes" else pc.utf8_length(values)
            if (pc.max(measure).as_py() or 0) > cap:
                too_long = pc.greater(measure, cap)
                if pa.types.is_dictionary(array.type):
                    too_long = pc.take(too_long, array.indices)
                yield too_long, lambda row: f"{len(array[row].as_py())} long, at most {cap}"
        check = self.value_check(col, kind)
        if check is not None:
            found = _python_mask(array, check)
            if found:
                yield found

    def value_check(self, col: str, kind: str) -> Callable[[Any], str | None] | None:
        enum = _ENUMS.get((self.name, col))
        if enum is not None:
            return lambda v: None if v in enum else f"{str(v)[:60]!r} is not one of {sorted(enum)}"
        if col == "repo_id":
            return check_repo_id
        if col in _PATH_COLUMNS:
            return check_hub_path
        if col in _HEX_COLUMNS:
            return lambda v: None if _HEX.fullmatch(v) else f"{v[:80]!r} is not a hex id"
        if kind == "json":
            shape = JSON_SHAPES.get(col, lambda _v: None)

            def check_json(text: str) -> str | None:
                try:
                    value = load_json(text)
                except ValueError as exc:
                    return f"bad JSON ({str(exc)[:120]})"
                return None if value is None else shape(value)

            return check_json
        if kind == "bytes":

            def check_table(blob: bytes) -> str | None:
                try:
                    _decode_table(blob)
                except TensorTableError as exc:
                    return f"tensor table: {exc}"
                return None

            return check_table
        return None

    def batch(self, batch: pa.RecordBatch, offset: int) -> None:
        size = sum(
            _value_bytes(batch.column(i))
            for i, f in enumerate(batch.schema)
            if pa.types.is_dictionary(f.type)
            or pa.types.is_string(f.type)
            or pa.types.is_binary(f.type)
        )
        if size > MAX_BATCH_BYTES:
            raise self.fail(
                offset, None, f"rows decode to {size} bytes (at most {MAX_BATCH_BYTES})"
            )
        self.total += size
        if self.total > MAX_FILE_BYTES:
            raise self.fail(offset, None, f"decodes to more than {MAX_FILE_BYTES} bytes")
        for i, col in enumerate(batch.schema.names):
            self.column(col, batch.column(i), offset)
        key_cols = _KEYS.get(self.name)
        if key_cols:
            keys = zip(*(_dense(batch.column(c)).to_pylist() for c in key_cols), strict=True)
            for i, key in enumerate(keys):
                if key in self.keys:
                    raise self.fail(offset + i, ",".join(key_cols), f"duplicate key {key!r}")
                self.keys.add(key)


def refused_rows(
    name: str, batch: pa.RecordBatch, *, now: datetime | None = None
) -> dict[int, tuple[str, str]]:
    """The rows of ``batch`` (of snapshot file ``name``) that an import refuses.

    Row index -> (the first column refusing it, why), by the very checks validate_file applies
    to each row (``now``: the import time; an import later than ``now`` accepts what is not here).
    What validate_file checks beyond single rows (sizes of a batch and a file, rows a file, keys
    unique) is not a property of one row and is not reported.
    """
    checker = _Checker(name, now or datetime.now(UTC))
    found: dict[int, tuple[str, str]] = {}
    for i, col in enumerate(batch.schema.names):
        for mask, why in checker.checks(col, batch.column(i)):
            for row in pc.indices_nonzero(pc.fill_null(mask, False)).to_pylist():
                if row not in found:
                    found[row] = (col, why(row))
    return found


def _reader(file: Path) -> pq.ParquetFile:
    meta = pq.ParquetFile(file)
    dict_cols = [
        f.name
        for f in meta.schema_arrow
        if pa.types.is_string(f.type) or pa.types.is_binary(f.type)
    ]
    return pq.ParquetFile(file, read_dictionary=dict_cols)


def _footer_bounds(name: str, meta: pq.FileMetaData) -> None:
    if meta.num_rows > MAX_ROWS:
        raise RowProblem(name, None, None, f"{meta.num_rows} rows (at most {MAX_ROWS})")
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            if chunk.total_uncompressed_size > MAX_CHUNK_BYTES:
                raise RowProblem(
                    name,
                    None,
                    chunk.path_in_schema,
                    f"a column chunk declares {chunk.total_uncompressed_size} decoded bytes "
                    f"(at most {MAX_CHUNK_BYTES})",
                )


def validate_file(path: Path, name: str, *, now: datetime | None = None) -> int:
    """Check every row of snapshot file ``name`` under ``path``; return its row count.

    Raises RowProblem naming the first bad value, SnapshotError for an unreadable file.
    """
    file = path / name
    checker = _Checker(name, now or datetime.now(UTC))
    offset = 0
    try:
        reader = _reader(file)
        _footer_bounds(name, reader.metadata)
        for batch in _batches(reader):
            checker.batch(batch, offset)
            offset += batch.num_rows
    except (pa.ArrowException, OSError) as exc:
        raise SnapshotError(f"{name}: unreadable ({exc}); nothing was imported") from None
    return offset


def _batches(reader: pq.ParquetFile) -> Iterator[pa.RecordBatch]:
    yield from reader.iter_batches(batch_size=BATCH_ROWS)
