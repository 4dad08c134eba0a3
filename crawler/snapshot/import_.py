"""quants import: merge a snapshot into any catalog, idempotently, in ONE transaction.

Checked whole before anything is written; a local crawl's own read is always kept.
Details: docs/internals/snapshot.md#import_
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import Connection, bindparam, delete, select, update

from crawler.base.errors import SnapshotError
from crawler.catalog import Catalog
from crawler.catalog.search_index import live_values
from crawler.catalog.tables import (
    File,
    MemoryModel,
    Quant,
    QuantVersion,
    Repo,
    TensorGroup,
    TensorTable,
)
from crawler.snapshot.bulk import drop_for_load, empty_tables, load_settings, rebuild
from crawler.snapshot.columns import WRITE_TABLES as TABLES
from crawler.snapshot.columns import arrow_schema, as_utc, columns_of
from crawler.snapshot.manifest import MANIFEST_NAME, Manifest, ManifestError, parse_manifest
from crawler.snapshot.rows import Batch, Insert, batches
from crawler.snapshot.validate import MAX_ROWS, validate_file

__all__ = ["ImportSummary", "import_snapshot", "verify_snapshot"]

_CHUNK = 5_000  # ids per IN (...) list
#: Bytes of one snapshot file (compressed Parquet) the importer reads at all.
MAX_SNAPSHOT_FILE = 16 * 1024**3


@dataclass
class ImportSummary:
    """Counts of what one import did (``quants import --json``)."""

    repos_added: int = 0
    repos_updated: int = 0
    quants_added: int = 0
    quants_updated: int = 0
    quants_kept: int = 0
    versions_added: int = 0
    files_written: int = 0
    #: Files whose recorded kind is not what this version's naming rules say
    #: (crawler.profile.quant_files): a snapshot made by another version; a full crawl regroups
    #: them.
    kinds_differ: int = 0
    manifest: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Stable JSON shape."""
        return {
            "repos_added": self.repos_added,
            "repos_updated": self.repos_updated,
            "quants_added": self.quants_added,
            "quants_updated": self.quants_updated,
            "quants_kept": self.quants_kept,
            "versions_added": self.versions_added,
            "files_written": self.files_written,
            "kinds_differ": self.kinds_differ,
            "schema_version": self.manifest.get("schema_version"),
            "scans": self.manifest.get("scans"),
            # Rows the snapshot's export left out because an import refuses them.
            "left_out": self.manifest.get("left_out") or {},
        }


# -- checking ------------------------------------------------------------------------------


def _kind_today(path: str) -> str:
    """The kind this version's naming rules give a file (crawler.profile.quant_files)."""
    from crawler.profile.quant_files import FileKind, classify

    kinds = classify(path)
    return (kinds[0] if kinds is not None else FileKind.OTHER).value


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_snapshot(path: Path) -> Manifest:
    """Check the snapshot at ``path`` whole; raise SnapshotError naming the first problem."""
    if not path.is_dir():
        raise SnapshotError(f"{path}: not a snapshot directory")
    manifest_path = path / MANIFEST_NAME
    if not manifest_path.is_file():
        raise SnapshotError(f"{path}: no {MANIFEST_NAME} (not a quants snapshot)")
    try:
        manifest = parse_manifest(manifest_path.read_text("utf-8", errors="replace"))
    except ManifestError as exc:
        raise SnapshotError(f"{path}: {exc}") from None
    for name, entry in sorted(manifest.files.items()):
        file = path / name
        if entry.rows > MAX_ROWS or entry.bytes > MAX_SNAPSHOT_FILE:
            raise SnapshotError(
                f"{name}: the manifest declares {entry.rows} rows and {entry.bytes} bytes "
                f"(at most {MAX_ROWS} rows, {MAX_SNAPSHOT_FILE} bytes)"
            )
        if file.exists() and not file.is_file():
            # (A symlink to a regular file is read: the Hub cache holds its files that way.)
            raise SnapshotError(f"{name}: not a regular file")
        if not file.is_file():
            raise SnapshotError(f"{name}: missing from the snapshot")
        size = file.stat().st_size
        if size != entry.bytes:
            raise SnapshotError(f"{name}: {size} bytes, the manifest says {entry.bytes} (damaged)")
        if _sha256(file) != entry.sha256:
            raise SnapshotError(f"{name}: sha256 does not match the manifest (damaged)")
        try:
            meta = pq.ParquetFile(file)
            schema = meta.schema_arrow
            rows = meta.metadata.num_rows
        except (pa.ArrowException, OSError) as exc:
            raise SnapshotError(f"{name}: not a readable Parquet file ({exc})") from None
        want = arrow_schema(name)
        if not schema.equals(want):
            raise SnapshotError(f"{name}: columns differ from schema {manifest.schema_version}")
        if rows != entry.rows:
            raise SnapshotError(f"{name}: {rows} rows, the manifest says {entry.rows}")
    # Every value, before anything is written (crawler/snapshot/validate.py).
    now = datetime.now(UTC)
    for name in sorted(manifest.files):
        validate_file(path, name, now=now)
    return manifest


# -- merging -------------------------------------------------------------------------------


def _newer(theirs: datetime | None, ours: datetime | None) -> bool:
    theirs, ours = as_utc(theirs), as_utc(ours)
    if theirs is None:
        return False
    return ours is None or theirs > ours


def _names(name: str, skip: tuple[str, ...], extra: tuple[str, ...] = ()) -> list[str]:
    """Snapshot columns of ``name`` written to its table (minus ``skip``), plus ``extra``."""
    table = TABLES[name]
    return [c.name for c in columns_of(name) if c.name not in skip and c.name in table.c] + list(
        extra
    )


def _decoded(name: str, row: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The row's values for an UPDATE through SQLAlchemy (JSON text decoded: it encodes)."""
    json_cols = {c.name for c in columns_of(name) if c.kind == "json"}
    return {
        n: (json.loads(row[n]) if n in json_cols and row[n] is not None else row[n]) for n in names
    }


def _chunks(ids: list[int]) -> Iterator[list[int]]:
    for i in range(0, len(ids), _CHUNK):
        yield ids[i : i + _CHUNK]


class _Merge:
    """One import's state inside its transaction.

    Each snapshot file is read batch by batch as columns (crawler/snapshot/rows.py): the loops
    below read only the key columns they decide on, collect the indices of the rows to insert,
    and make a row dict only for an UPDATE (a local row the snapshot's newer one replaces).
    """

    def __init__(
        self,
        conn: Connection,
        path: Path,
        summary: ImportSummary,
        source: str,
        source_revision: str | None,
    ) -> None:
        self.conn = conn
        self.source = source
        self.source_revision = source_revision
        # Repos where the snapshot saw newer content than a kept local read: re-crawl them.
        self.recheck: set[int] = set()
        self.path = path
        self.summary = summary
        self.dialect = conn.dialect.name
        self.repo_pk: dict[str, int] = {}
        self.repos_taken: set[str] = set()
        self.touched_repos: set[int] = set()
        # (repo_id, path) of the quants whose snapshot row won: their children come along.
        self.quants_taken: set[tuple[str, str]] = set()
        self.quant_id: dict[tuple[str, str], int] = {}
        self.content_changed: set[int] = set()

    def _batches(self, name: str) -> Iterator[Batch]:
        return batches(self.path, name, self.dialect)

    def repos(self) -> None:
        name = "repos.parquet"
        table = TABLES[name]
        local = {
            r.repo_id: r
            for r in self.conn.execute(
                select(Repo.id, Repo.repo_id, Repo.scanned_at, Repo.first_seen_at)
            )
        }
        names = _names(name, ())
        changed = [n for n in names if n not in ("repo_id", "first_seen_at")]
        insert = Insert(self.conn, name, names)
        for batch in self._batches(name):
            take: list[int] = []
            for i, repo_id in enumerate(batch.col("repo_id")):
                mine = local.get(repo_id)
                if mine is None:
                    take.append(i)
                    self.repos_taken.add(repo_id)
                elif _newer(batch.col("scanned_at")[i], mine.scanned_at):
                    row = batch.row(i)
                    values = _decoded(name, row, changed)
                    first = as_utc(mine.first_seen_at)
                    theirs = as_utc(row["first_seen_at"])
                    if first is None or (theirs is not None and theirs < first):
                        values["first_seen_at"] = theirs
                    self.conn.execute(update(table).where(table.c.id == mine.id).values(**values))
                    self.summary.repos_updated += 1
                    self.repos_taken.add(repo_id)
                    self.touched_repos.add(mine.id)
            self.summary.repos_added += insert(batch, take)
        # (Not dict(result): a Result has keys(), so dict() would treat it as a mapping.)
        self.repo_pk = {rid: pk for rid, pk in self.conn.execute(select(Repo.repo_id, Repo.id))}  # noqa: C416
        self.touched_repos |= {self.repo_pk[r] for r in self.repos_taken}

    def _repo(self, repo_id: str, name: str) -> int:
        pk = self.repo_pk.get(repo_id)
        if pk is None:
            raise SnapshotError(f"{name}: row of repo {repo_id!r} that repos.parquet lacks")
        return pk

    def quants(self) -> None:
        name = "quants.parquet"
        table = TABLES[name]
        local = {
            (r.repo_pk, r.path): r
            for r in self.conn.execute(
                select(
                    Quant.id,
                    Quant.repo_pk,
                    Quant.path,
                    Quant.analysed_at,
                    Quant.content_key,
                    Quant.source,
                )
            )
        }
        names = _names(name, ("repo_id",), ("repo_pk", "source", "source_revision"))
        changed = [n for n in names if n not in ("first_seen_at", "repo_pk", "path")]
        insert = Insert(self.conn, name, names)
        replaced: list[int] = []
        provenance = {"source": self.source, "source_revision": self.source_revision}
        for batch in self._batches(name):
            repo_ids, paths = batch.col("repo_id"), batch.col("path")
            pks = [self._repo(repo_id, name) for repo_id in repo_ids]
            take: list[int] = []
            for i, (repo_id, path, pk) in enumerate(zip(repo_ids, paths, pks, strict=True)):
                mine = local.get((pk, path))
                if mine is None:
                    take.append(i)
                elif mine.source is None and mine.analysed_at is not None:
                    # This catalog's crawl read the file itself: that outranks any import.
                    # A snapshot that saw other content marks the repo for the next crawl.
                    if mine.content_key != batch.col("content_key")[i] and _newer(
                        batch.col("analysed_at")[i], mine.analysed_at
                    ):
                        self.recheck.add(pk)
                    self.summary.quants_kept += 1
                    continue
                elif _newer(batch.col("analysed_at")[i], mine.analysed_at):
                    row = {**batch.row(i), "repo_pk": pk, **provenance}
                    values = _decoded(name, row, changed)
                    self.conn.execute(update(table).where(table.c.id == mine.id).values(**values))
                    replaced.append(mine.id)
                    if mine.content_key != batch.col("content_key")[i]:
                        self.content_changed.add(mine.id)
                    self.summary.quants_updated += 1
                else:
                    self.summary.quants_kept += 1
                    continue
                self.quants_taken.add((repo_id, path))
                self.touched_repos.add(pk)
            n = batch.size
            extra: dict[str, list[Any]] = {
                "repo_pk": pks,
                "source": [self.source] * n,
                "source_revision": [self.source_revision] * n,
            }
            self.summary.quants_added += insert(batch, take, extra)
        # The snapshot's children replace the old ones of the quants it won.
        for ids in _chunks(replaced):
            for model in (TensorGroup, MemoryModel):
                self.conn.execute(delete(model).where(model.quant_id.in_(ids)))
        stale = sorted(self.content_changed)
        for ids in _chunks(stale):
            self.conn.execute(delete(TensorTable).where(TensorTable.quant_id.in_(ids)))
        for ids in _chunks(sorted(self.recheck)):
            self.conn.execute(update(Repo).where(Repo.id.in_(ids)).values(scanned_sha=None))
        by_pk = {pk: rid for rid, pk in self.repo_pk.items()}
        self.quant_id = {
            (by_pk[repo_pk], path): qid
            for qid, repo_pk, path in self.conn.execute(select(Quant.id, Quant.repo_pk, Quant.path))
        }

    def children(self, name: str, *, replace_existing: bool = False) -> None:
        table = TABLES[name]
        insert = Insert(self.conn, name, _names(name, ("repo_id", "path"), ("quant_id",)))
        taken, quant_id = self.quants_taken, self.quant_id
        for batch in self._batches(name):
            keys = list(zip(batch.col("repo_id"), batch.col("path"), strict=True))
            take = [i for i, key in enumerate(keys) if key in taken]
            qids = [quant_id.get(key, 0) for key in keys]
            if replace_existing and take:
                ids = sorted({qids[i] for i in take})
                for chunk in _chunks(ids):
                    self.conn.execute(delete(table).where(table.c.quant_id.in_(chunk)))
            insert(batch, take, {"quant_id": qids})

    def versions(self) -> None:
        name = "quant_versions.parquet"
        have = {
            (qid, key, as_utc(at))
            for qid, key, at in self.conn.execute(
                select(QuantVersion.quant_id, QuantVersion.content_key, QuantVersion.analysed_at)
            )
        }
        insert = Insert(self.conn, name, _names(name, ("repo_id", "path"), ("quant_id",)))
        for batch in self._batches(name):
            take: list[int] = []
            qids: list[int] = []
            for i, (repo_id, path, key, at) in enumerate(
                zip(
                    batch.col("repo_id"),
                    batch.col("path"),
                    batch.col("content_key"),
                    batch.col("analysed_at"),
                    strict=True,
                )
            ):
                qid = self.quant_id.get((repo_id, path))
                if qid is None:
                    raise SnapshotError(
                        f"{name}: version of {repo_id}/{path} that quants.parquet lacks"
                    )
                qids.append(qid)
                mark = (qid, key, as_utc(at))
                if mark in have:
                    continue
                have.add(mark)
                take.append(i)
            self.summary.versions_added += insert(batch, take, {"quant_id": qids})

    def files(self) -> None:
        name = "files.parquet"
        table = TABLES[name]
        local = {
            (r.repo_pk, r.path): r.id
            for r in self.conn.execute(select(File.id, File.repo_pk, File.path))
        }
        names = _names(name, ("repo_id", "quant_path"), ("repo_pk", "quant_id"))
        changed = [n for n in names if n not in ("first_seen_at", "repo_pk", "path")]
        insert = Insert(self.conn, name, names)
        for batch in self._batches(name):
            take: list[int] = []
            updates: list[dict[str, Any]] = []
            repo_ids = batch.col("repo_id")
            pks = [self._repo(repo_id, name) for repo_id in repo_ids]
            qids = [
                self.quant_id.get((repo_id, quant_path)) if quant_path else None
                for repo_id, quant_path in zip(repo_ids, batch.col("quant_path"), strict=True)
            ]
            self.summary.kinds_differ += sum(
                kind != _kind_today(path)
                for path, kind in zip(batch.col("path"), batch.col("kind"), strict=True)
            )
            for i, (repo_id, path) in enumerate(zip(repo_ids, batch.col("path"), strict=True)):
                fid = local.get((pks[i], path))
                if fid is None:
                    take.append(i)
                elif repo_id in self.repos_taken:
                    row = {**batch.row(i), "repo_pk": pks[i], "quant_id": qids[i]}
                    updates.append({"fid": fid, **_decoded(name, row, changed)})
            written = insert(batch, take, {"repo_pk": pks, "quant_id": qids})
            if updates:
                cols: dict[str, Any] = {k: bindparam(k) for k in updates[0] if k != "fid"}
                self.conn.execute(
                    update(table).where(table.c.id == bindparam("fid")).values(**cols), updates
                )
            self.summary.files_written += written + len(updates)

    def refresh_live(self) -> None:
        """``quants.live`` and the columns kept with it (search_index.live_values) of the
        touched repos, as the crawl keeps them."""
        for chunk in _chunks(sorted(self.touched_repos)):
            self.conn.execute(
                update(Quant).where(Quant.repo_pk.in_(chunk)).values(live_values(Quant, Repo))
            )


def import_snapshot(
    catalog: Catalog,
    path: Path,
    *,
    source: str | None = None,
    source_revision: str | None = None,
) -> ImportSummary:
    """Verify, then merge the snapshot at ``path`` into ``catalog`` in one transaction.

    The quants it adds or replaces record ``source`` / ``source_revision`` (default: the
    directory, and the manifest's sha256), as migration 0006 describes.
    """
    manifest = verify_snapshot(path)
    if source is None:
        source = f"directory {path.resolve()}"[:512]
        source_revision = hashlib.sha256((path / MANIFEST_NAME).read_bytes()).hexdigest()
    summary = ImportSummary(manifest=manifest.to_json())
    with catalog.engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            # Take the write lock up front (pysqlite would begin only at the first write).
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.begin()
        try:
            with load_settings(conn):
                # Tables empty now (an empty catalog) are loaded without their secondary
                # indexes (PostgreSQL: and foreign keys), made once at the end
                # (crawler/snapshot/bulk.py).
                empty = empty_tables(conn, sorted({t.name for t in TABLES.values()}))
                dropped = drop_for_load(conn, empty)
                merge = _Merge(conn, path, summary, source, source_revision)
                merge.repos()
                merge.quants()
                merge.children("tensor_groups.parquet")
                merge.children("memory_models.parquet")
                merge.children("tensor_tables.parquet", replace_existing=True)
                merge.versions()
                merge.files()
                merge.refresh_live()
                rebuild(conn, dropped)
                conn.commit()
        except BaseException:
            conn.rollback()
            raise
    return summary
