"""quants export: the catalog as a snapshot directory (Parquet files + manifest.json).

Bounded memory, byte-identical files for an unchanged catalog; rows an import refuses left out.
Details: docs/internals/snapshot.md#export
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sqlalchemy import Connection, Select, and_, func, or_, select

from crawler import __version__
from crawler.base.errors import UsageError
from crawler.catalog import Catalog
from crawler.catalog.tables import (
    File,
    MemoryModel,
    Quant,
    QuantVersion,
    Repo,
    Scan,
    TensorGroup,
    TensorTable,
)
from crawler.snapshot.columns import TABLES, arrow_schema, as_utc, columns_of, read_expr
from crawler.snapshot.manifest import (
    FILES,
    MANIFEST_NAME,
    QUANT_LEFT_OUT,
    REPO_LEFT_OUT,
    SCHEMA_VERSION,
    FileEntry,
    Manifest,
)
from crawler.snapshot.validate import refused_rows

__all__ = ["ExportResult", "export_snapshot", "parse_since"]

#: Rows per Parquet row group / per Arrow batch built in memory.
BATCH_ROWS = 50_000


@dataclass(frozen=True, slots=True)
class ExportResult:
    """What ``export_snapshot`` wrote."""

    path: Path
    manifest: Manifest
    #: (file, reason) -> why the first row left out for that reason was refused (for the CLI).
    examples: Mapping[tuple[str, str], str] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        """Bytes of the Parquet files (the manifest is a few hundred bytes more)."""
        return sum(e.bytes for e in self.manifest.files.values())


def parse_since(catalog: Catalog, since: str | None) -> datetime | None:
    """``--since``: a scan id (that scan's start) or an ISO date/time (UTC when naive)."""
    if since is None:
        return None
    if since.isdigit():
        with catalog.engine.connect() as conn:
            started = conn.scalar(select(Scan.started_at).where(Scan.id == int(since)))
        if started is None:
            raise UsageError(f"--since {since}: no scan with that id (see `quants scans`)")
        return as_utc(started)
    try:
        return as_utc(datetime.fromisoformat(since))
    except ValueError:
        raise UsageError(f"--since {since!r}: give a scan id or an ISO date (2026-12-01)") from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _repo_filter(cutoff: datetime | None) -> Any:
    if cutoff is None:
        return True
    changed_quant = (
        select(Quant.id)
        .where(
            Quant.repo_pk == Repo.id,
            or_(
                Quant.analysed_at >= cutoff,
                Quant.first_seen_at >= cutoff,
                Quant.vanished_at >= cutoff,
            ),
        )
        .exists()
    )
    return or_(Repo.scanned_at >= cutoff, Repo.vanished_at >= cutoff, changed_quant)


def _quant_filter(cutoff: datetime | None) -> Any:
    if cutoff is None:
        return True
    return or_(
        Quant.analysed_at >= cutoff, Quant.first_seen_at >= cutoff, Quant.vanished_at >= cutoff
    )


def _select(name: str, cutoff: datetime | None) -> Select[Any]:
    """The query for one snapshot file, in a stable order (key columns)."""
    table = TABLES[name]
    cols = columns_of(name)
    if name == "repos.parquet":
        return (
            select(*(read_expr(table, c) for c in cols))
            .where(_repo_filter(cutoff))
            .order_by(Repo.repo_id)
        )
    if name == "files.parquet":
        exprs = [
            Repo.repo_id,
            File.path,
            Quant.path.label("quant_path"),
            *(read_expr(table, c) for c in cols[3:]),
        ]
        return (
            select(*exprs)
            .select_from(File)
            .join(Repo, Repo.id == File.repo_pk)
            .outerjoin(Quant, Quant.id == File.quant_id)
            .where(_repo_filter(cutoff))
            .order_by(Repo.repo_id, File.path)
        )
    exprs = [Repo.repo_id, Quant.path, *(read_expr(table, c) for c in cols[2:])]
    if name == "quants.parquet":
        return (
            select(*exprs)
            .select_from(Quant)
            .join(Repo, Repo.id == Quant.repo_pk)
            .where(_quant_filter(cutoff))
            .order_by(Repo.repo_id, Quant.path)
        )
    child: Any = {
        "tensor_groups.parquet": TensorGroup,
        "memory_models.parquet": MemoryModel,
        "quant_versions.parquet": QuantVersion,
        "tensor_tables.parquet": TensorTable,
    }[name]
    query = (
        select(*exprs)
        .select_from(child)
        .join(Quant, Quant.id == child.quant_id)
        .join(Repo, Repo.id == Quant.repo_pk)
        .where(_quant_filter(cutoff))
    )
    order: list[Any] = [Repo.repo_id, Quant.path]
    if child is TensorGroup:
        order.append(TensorGroup.group_name)
    elif child is QuantVersion:
        order.append(QuantVersion.id)
    return query.order_by(*order)


def _batches(conn: Connection, query: Select[Any], name: str) -> Iterator[pa.RecordBatch]:
    schema = arrow_schema(name)
    ts = [i for i, c in enumerate(columns_of(name)) if c.kind == "ts"]
    result = conn.execution_options(stream_results=True, yield_per=BATCH_ROWS).execute(query)
    for part in result.partitions(BATCH_ROWS):
        columns: list[list[Any]] = [list(col) for col in zip(*part, strict=True)]
        for i in ts:
            columns[i] = [as_utc(v) for v in columns[i]]
        yield pa.RecordBatch.from_arrays(
            [pa.array(col, type=field.type) for col, field in zip(columns, schema, strict=True)],
            schema=schema,
        )


def create_new(path: Path) -> BinaryIO:
    """``path`` opened for writing as a NEW regular file.

    Whatever is there already (a stale temporary file, or one planted as a symlink to a file
    elsewhere) is removed, never followed: ``O_EXCL | O_NOFOLLOW`` then fail rather than write
    through a link that appears in between.
    """
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise UsageError(f"cannot replace {path}: {exc.strerror or exc}") from None
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        raise UsageError(f"cannot create {path}: {exc.strerror or exc}") from None
    return os.fdopen(fd, "wb")


class _LeftOut:
    """The rows one export leaves out and what depends on them (internals/snapshot.md#export)."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.repos: set[str] = set()
        self.quants: set[tuple[str, str]] = set()
        #: Kept repos some of whose rows were left out: exported with ``scanned_sha`` empty.
        self.incomplete: set[str] = set()
        self.counts: dict[str, Counter[str]] = {}
        self.examples: dict[tuple[str, str], str] = {}

    def find_repos(self, conn: Connection, cutoff: datetime | None) -> None:
        """The repo rows an import refuses (before the files whose rows depend on them)."""
        name = "repos.parquet"
        for batch in _batches(conn, _select(name, cutoff), name):
            if refused := refused_rows(name, batch, now=self.now):
                ids = batch.column("repo_id")
                self.repos.update(ids[i].as_py() for i in refused)

    def filter(self, name: str, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` without the rows left out, counted; the repos' ``scanned_sha`` patched."""
        # Each row counted once: its own refused column, else its repo, else its quant.
        reasons: dict[int, str] = {}
        for i, (column, why) in refused_rows(name, batch, now=self.now).items():
            reasons[i] = column
            self.examples.setdefault((name, column), why)
        depends = name != "repos.parquet" and bool(self.repos or self.quants)
        if not (reasons or depends or (name == "repos.parquet" and self.incomplete)):
            return batch
        repo_ids: list[str] = batch.column("repo_id").to_pylist()
        if depends:
            quant_col = "quant_path" if name == "files.parquet" else "path"
            quant_paths = batch.column(quant_col).to_pylist()
            for i, (repo_id, quant_path) in enumerate(zip(repo_ids, quant_paths, strict=True)):
                if i in reasons:
                    continue
                if repo_id in self.repos:
                    reasons[i] = REPO_LEFT_OUT
                elif name != "quants.parquet" and (repo_id, quant_path) in self.quants:
                    reasons[i] = QUANT_LEFT_OUT
        if reasons:
            counts = self.counts.setdefault(name, Counter())
            counts.update(reasons.values())
            paths = batch.column("path").to_pylist() if name == "quants.parquet" else None
            for i in reasons:
                if paths is not None:
                    self.quants.add((repo_ids[i], paths[i]))
                if name != "repos.parquet":
                    self.incomplete.add(repo_ids[i])
            batch = batch.filter(pa.array([i not in reasons for i in range(batch.num_rows)]))
        if name == "repos.parquet" and self.incomplete and batch.num_rows:
            at = batch.schema.get_field_index("scanned_sha")
            lost = pc.is_in(batch.column("repo_id"), pa.array(sorted(self.incomplete)))
            patched = pc.if_else(lost, pa.scalar(None, pa.string()), batch.column(at))
            batch = batch.set_column(at, batch.schema.field(at), patched)
        return batch

    def manifest_counts(self) -> dict[str, dict[str, int]]:
        return {name: dict(sorted(c.items())) for name, c in sorted(self.counts.items())}


def _write_file(
    conn: Connection, out: Path, name: str, cutoff: datetime | None, left: _LeftOut
) -> FileEntry:
    path = out / name
    tmp = path.with_suffix(".parquet.tmp")
    rows = 0
    # zstd: the best size/speed of pyarrow's codecs for these text-heavy columns; no write
    # statistics timestamp or random metadata, so equal rows give equal bytes.
    with (
        create_new(tmp) as fh,
        pq.ParquetWriter(fh, arrow_schema(name), compression="zstd") as writer,
    ):
        for batch in _batches(conn, _select(name, cutoff), name):
            kept = left.filter(name, batch)
            if kept.num_rows:
                writer.write_batch(kept, row_group_size=BATCH_ROWS)
            rows += kept.num_rows
    os.replace(tmp, path)  # replaces a symlink at ``path`` itself, never its target
    return FileEntry(rows=rows, bytes=path.stat().st_size, sha256=_sha256(path))


def _scan_range(conn: Connection, cutoff: datetime | None) -> tuple[list[int], Any, Any]:
    where: list[Any] = [Scan.status.in_(("ok", "interrupted"))]
    if cutoff is not None:
        where.append(Scan.started_at >= cutoff)
    ids = list(conn.scalars(select(Scan.id).where(and_(*where)).order_by(Scan.id)))
    first, last = conn.execute(
        select(func.min(Scan.started_at), func.max(Scan.finished_at)).where(and_(*where))
    ).one()
    # Without scans (a catalog built by import only), the newest analysis stands for the scan.
    if last is None:
        last = conn.scalar(select(func.max(Quant.analysed_at)))
    return ids, as_utc(first), as_utc(last)


def export_snapshot(
    catalog: Catalog,
    out: Path,
    *,
    since: datetime | None = None,
    with_tensors: bool = False,
) -> ExportResult:
    """Write the catalog (or what changed since ``since``) as a snapshot into directory ``out``."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    names: Sequence[str] = [*FILES, *(["tensor_tables.parquet"] if with_tensors else [])]
    stale = out / "tensor_tables.parquet"
    if not with_tensors and stale.exists():
        stale.unlink()  # a previous --with-tensors export must not be published as current
    left = _LeftOut(datetime.now(UTC))
    # One read transaction: every file sees the same catalog state (PostgreSQL snapshot;
    # SQLite WAL readers see one consistent version for the whole transaction). The repos
    # file is written last: it needs to know which repos lost rows in the others.
    with catalog.engine.connect() as conn, conn.begin():
        left.find_repos(conn, since)
        later = [n for n in names if n != "repos.parquet"]
        entries = {name: _write_file(conn, out, name, since, left) for name in later}
        entries["repos.parquet"] = _write_file(conn, out, "repos.parquet", since, left)
        ids, first, last = _scan_range(conn, since)
    manifest = Manifest(
        schema_version=SCHEMA_VERSION,
        quants_version=__version__,
        created_at=last.isoformat() if last else "",
        scan_ids=tuple(ids),
        scans_from=first.isoformat() if first else None,
        scans_to=last.isoformat() if last else None,
        since=since.isoformat() if since else None,
        files=entries,
        left_out=left.manifest_counts(),
    )
    tmp = out / (MANIFEST_NAME + ".tmp")
    with create_new(tmp) as fh:
        fh.write(manifest.dumps().encode("utf-8"))
    os.replace(tmp, out / MANIFEST_NAME)  # last: a reader never sees a manifest for half a write
    return ExportResult(out, manifest, left.examples)
