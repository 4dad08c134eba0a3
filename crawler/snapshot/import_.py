"""``quants import``: merge a snapshot into any catalog, idempotently, in ONE transaction.

Checked whole before anything is written: the manifest (a newer schema is refused), every
file's size and sha256, every Parquet footer, schema and row count. Then one transaction merges:

- a repo or quant the catalog does not know is added;
- a quant both know: the newer analysis (``analysed_at``) wins; equal times keep the local row,
  so importing the same snapshot twice changes nothing; a repo row follows its ``scanned_at``;
- nothing local is removed: local quants the snapshot lacks stay; history rows
  (``quant_versions``) are unioned; a local tensor table stays unless the quant's content changed;
- the times stored are the snapshot's (``analysed_at``, ``scanned_at``): the crawl and the
  search's freshness checks count a pulled entry's age from when it was really read.

Any failure while merging (e.g. a file unreadable past its footer) rolls the transaction back.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import Connection, bindparam, delete, select, update

from crawler.catalog import Catalog
from crawler.catalog.search_index import live_sql, search_text_sql
from crawler.catalog.tables import (
    File,
    MemoryModel,
    Quant,
    QuantVersion,
    Repo,
    TensorGroup,
    TensorTable,
)
from crawler.errors import SnapshotError
from crawler.snapshot.columns import WRITE_TABLES as TABLES
from crawler.snapshot.columns import arrow_schema, as_utc, columns_of
from crawler.snapshot.manifest import MANIFEST_NAME, Manifest, ManifestError, parse_manifest

__all__ = ["ImportSummary", "import_snapshot", "verify_snapshot"]

_BATCH = 20_000
_CHUNK = 5_000  # ids per IN (...) list


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
            "schema_version": self.manifest.get("schema_version"),
            "scans": self.manifest.get("scans"),
        }


# -- checking ------------------------------------------------------------------------------


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
    return manifest


def _rows(path: Path, name: str) -> Iterator[list[dict[str, Any]]]:
    """The file's rows in batches, timestamps aware (UTC), JSON columns as their text.

    Converted column by column (``Array.to_pylist``), about twice as fast as row by row.
    """
    file = path / name
    if not file.exists():
        return
    try:
        for batch in pq.ParquetFile(file).iter_batches(batch_size=_BATCH):
            keys = batch.schema.names
            columns = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
            yield [dict(zip(keys, values, strict=True)) for values in zip(*columns, strict=True)]
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise SnapshotError(f"{name}: unreadable ({exc}); nothing was imported") from None


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


class _Insert:
    """A bulk INSERT of one table's columns through the driver's executemany.

    SQLAlchemy compiles the statement once (PostgreSQL: with its casts, e.g. ``::JSON``) and its
    types' bind processors convert the values (SQLite timestamps and booleans); JSON arrives as
    its text from the snapshot and is stored as is. About 3x faster than ``conn.execute(insert,
    rows)``, whose per-row parameter processing dominated a 200k-quant import.
    """

    def __init__(self, conn: Connection, name: str, names: list[str]) -> None:
        table = TABLES[name]
        dialect = conn.dialect
        compiled = table.insert().values({n: bindparam(n) for n in names}).compile(dialect=dialect)
        self.conn = conn
        self.names = names
        self.sql = compiled.string
        self.order = list(compiled.positiontup) if compiled.positiontup else None
        json_cols = {c.name for c in columns_of(name) if c.kind == "json"}
        self.procs = [
            None if n in json_cols else table.c[n].type.bind_processor(dialect) for n in names
        ]
        # PostgreSQL: COPY FROM STDIN, ~10x faster than psycopg's pipelined executemany (which
        # took 14 of a 20k-quant import's 29 s); psycopg adapts each value, the server parses
        # JSON text into json columns.
        self.copy_sql: str | None = None
        if dialect.name == "postgresql":
            quoted = ", ".join(dialect.identifier_preparer.quote(n) for n in names)
            self.copy_sql = (
                f"COPY {dialect.identifier_preparer.quote(table.name)} ({quoted}) FROM STDIN"
            )

    def _copy(self, rows: list[dict[str, Any]]) -> None:
        assert self.copy_sql is not None
        names = self.names
        cursor = self.conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            with cursor.copy(self.copy_sql) as copy:
                for row in rows:
                    # PostgreSQL text cannot hold NUL (crawler/catalog/database.py replaces it
                    # the same way on the crawl's writes).
                    copy.write_row(
                        [
                            v.replace("\x00", "\ufffd") if isinstance(v, str) and "\x00" in v else v
                            for v in (row[n] for n in names)
                        ]
                    )
        finally:
            cursor.close()

    def __call__(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        if self.copy_sql is not None:
            self._copy(rows)
            return
        columns = [[row[n] for row in rows] for n in self.names]
        for i, proc in enumerate(self.procs):
            if proc is not None:
                columns[i] = [proc(v) for v in columns[i]]
        if self.order is not None:
            index = {n: i for i, n in enumerate(self.names)}
            params: list[Any] = list(zip(*(columns[index[n]] for n in self.order), strict=True))
        else:
            params = [dict(zip(self.names, v, strict=True)) for v in zip(*columns, strict=True)]
        self.conn.exec_driver_sql(self.sql, params)


def _chunks(ids: list[int]) -> Iterator[list[int]]:
    for i in range(0, len(ids), _CHUNK):
        yield ids[i : i + _CHUNK]


class _Merge:
    """One import's state inside its transaction."""

    def __init__(self, conn: Connection, path: Path, summary: ImportSummary) -> None:
        self.conn = conn
        self.path = path
        self.summary = summary
        self.repo_pk: dict[str, int] = {}
        self.repos_taken: set[str] = set()
        self.touched_repos: set[int] = set()
        # (repo_id, path) of the quants whose snapshot row won: their children come along.
        self.quants_taken: set[tuple[str, str]] = set()
        self.quant_id: dict[tuple[str, str], int] = {}
        self.content_changed: set[int] = set()

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
        insert = _Insert(self.conn, name, names)
        for rows in _rows(self.path, name):
            inserts = []
            for row in rows:
                mine = local.get(row["repo_id"])
                if mine is None:
                    inserts.append(row)
                    self.summary.repos_added += 1
                    self.repos_taken.add(row["repo_id"])
                elif _newer(row["scanned_at"], mine.scanned_at):
                    values = _decoded(name, row, changed)
                    first = as_utc(mine.first_seen_at)
                    theirs = as_utc(row["first_seen_at"])
                    if first is None or (theirs is not None and theirs < first):
                        values["first_seen_at"] = theirs
                    self.conn.execute(update(table).where(table.c.id == mine.id).values(**values))
                    self.summary.repos_updated += 1
                    self.repos_taken.add(row["repo_id"])
                    self.touched_repos.add(mine.id)
            insert(inserts)
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
                select(Quant.id, Quant.repo_pk, Quant.path, Quant.analysed_at, Quant.content_key)
            )
        }
        names = _names(name, ("repo_id",), ("repo_pk",))
        changed = [n for n in names if n not in ("first_seen_at", "repo_pk", "path")]
        insert = _Insert(self.conn, name, names)
        replaced: list[int] = []
        for rows in _rows(self.path, name):
            inserts = []
            for row in rows:
                pk = self._repo(row["repo_id"], name)
                key = (row["repo_id"], row["path"])
                mine = local.get((pk, row["path"]))
                row["repo_pk"] = pk
                if mine is None:
                    inserts.append(row)
                    self.summary.quants_added += 1
                elif _newer(row["analysed_at"], mine.analysed_at):
                    values = _decoded(name, row, changed)
                    self.conn.execute(update(table).where(table.c.id == mine.id).values(**values))
                    replaced.append(mine.id)
                    if mine.content_key != row["content_key"]:
                        self.content_changed.add(mine.id)
                    self.summary.quants_updated += 1
                else:
                    self.summary.quants_kept += 1
                    continue
                self.quants_taken.add(key)
                self.touched_repos.add(pk)
            insert(inserts)
        # The snapshot's children replace the old ones of the quants it won.
        for ids in _chunks(replaced):
            for model in (TensorGroup, MemoryModel):
                self.conn.execute(delete(model).where(model.quant_id.in_(ids)))
        stale = sorted(self.content_changed)
        for ids in _chunks(stale):
            self.conn.execute(delete(TensorTable).where(TensorTable.quant_id.in_(ids)))
        by_pk = {pk: rid for rid, pk in self.repo_pk.items()}
        self.quant_id = {
            (by_pk[repo_pk], path): qid
            for qid, repo_pk, path in self.conn.execute(select(Quant.id, Quant.repo_pk, Quant.path))
        }

    def children(self, name: str, *, replace_existing: bool = False) -> None:
        table = TABLES[name]
        insert = _Insert(self.conn, name, _names(name, ("repo_id", "path"), ("quant_id",)))
        for rows in _rows(self.path, name):
            inserts = []
            for row in rows:
                key = (row["repo_id"], row["path"])
                if key not in self.quants_taken:
                    continue
                row["quant_id"] = self.quant_id[key]
                inserts.append(row)
            if replace_existing and inserts:
                ids = sorted({v["quant_id"] for v in inserts})
                for chunk in _chunks(ids):
                    self.conn.execute(delete(table).where(table.c.quant_id.in_(chunk)))
            insert(inserts)

    def versions(self) -> None:
        name = "quant_versions.parquet"
        have = {
            (qid, key, as_utc(at))
            for qid, key, at in self.conn.execute(
                select(QuantVersion.quant_id, QuantVersion.content_key, QuantVersion.analysed_at)
            )
        }
        insert = _Insert(self.conn, name, _names(name, ("repo_id", "path"), ("quant_id",)))
        for rows in _rows(self.path, name):
            inserts = []
            for row in rows:
                qid = self.quant_id.get((row["repo_id"], row["path"]))
                if qid is None:
                    raise SnapshotError(
                        f"{name}: version of {row['repo_id']}/{row['path']} "
                        "that quants.parquet lacks"
                    )
                mark = (qid, row["content_key"], as_utc(row["analysed_at"]))
                if mark in have:
                    continue
                have.add(mark)
                row["quant_id"] = qid
                inserts.append(row)
            insert(inserts)
            self.summary.versions_added += len(inserts)

    def files(self) -> None:
        name = "files.parquet"
        table = TABLES[name]
        local = {
            (r.repo_pk, r.path): r.id
            for r in self.conn.execute(select(File.id, File.repo_pk, File.path))
        }
        names = _names(name, ("repo_id", "quant_path"), ("repo_pk", "quant_id"))
        changed = [n for n in names if n not in ("first_seen_at", "repo_pk", "path")]
        insert = _Insert(self.conn, name, names)
        for rows in _rows(self.path, name):
            inserts, updates = [], []
            for row in rows:
                pk = self._repo(row["repo_id"], name)
                quant_path = row["quant_path"]
                row["repo_pk"] = pk
                row["quant_id"] = (
                    self.quant_id.get((row["repo_id"], quant_path)) if quant_path else None
                )
                fid = local.get((pk, row["path"]))
                if fid is None:
                    inserts.append(row)
                elif row["repo_id"] in self.repos_taken:
                    updates.append({"fid": fid, **_decoded(name, row, changed)})
            insert(inserts)
            if updates:
                cols: dict[str, Any] = {k: bindparam(k) for k in updates[0] if k != "fid"}
                self.conn.execute(
                    update(table).where(table.c.id == bindparam("fid")).values(**cols), updates
                )
            self.summary.files_written += len(inserts) + len(updates)

    def refresh_live(self) -> None:
        """``quants.live`` / ``search_text`` of the touched repos, as the crawl keeps them."""
        for chunk in _chunks(sorted(self.touched_repos)):
            self.conn.execute(
                update(Quant)
                .where(Quant.repo_pk.in_(chunk))
                .values(live=live_sql(Quant, Repo), search_text=search_text_sql(Quant, Repo))
            )


def import_snapshot(catalog: Catalog, path: Path) -> ImportSummary:
    """Verify, then merge the snapshot at ``path`` into ``catalog`` in one transaction."""
    manifest = verify_snapshot(path)
    summary = ImportSummary(manifest=manifest.to_json())
    with catalog.engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            # Take the write lock up front (pysqlite would begin only at the first write).
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.begin()
        try:
            merge = _Merge(conn, path, summary)
            merge.repos()
            merge.quants()
            merge.children("tensor_groups.parquet")
            merge.children("memory_models.parquet")
            merge.children("tensor_tables.parquet", replace_existing=True)
            merge.versions()
            merge.files()
            merge.refresh_live()
        except BaseException:
            conn.rollback()
            raise
        conn.commit()
    return summary
