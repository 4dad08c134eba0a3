"""The crawl's write path into the catalog, and the small reads the crawl decides with.

Everything one repo contributes (repo row, files, quants, tensor groups, compressed tensor tables,
memory models, quant history, its scan errors) is written in ONE transaction, and
``repos.scanned_sha`` is set in that same transaction only when every quant was analysed: a crash
at any moment leaves either the old state or the new one, and the next pass redoes exactly the
repos whose ``scanned_sha`` differs from their ``sha``. Takes and returns frozen dataclasses;
ORM rows never leave this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, select, update

from crawler.analysis import AnalysedShard, MemoryRecord, QuantAnalysis, StoredProfile
from crawler.catalog import Catalog
from crawler.catalog.search_index import refresh_live_rows
from crawler.catalog.tables import (
    CrawlState,
    File,
    MemoryModel,
    Quant,
    QuantVersion,
    Repo,
    Scan,
    ScanError,
    TensorGroup,
    TensorTable,
)
from crawler.catalog.tensor_tables import (
    TENSOR_TABLE_ENCODING,
    decode_tensor_table,
    encode_tensor_table,
)
from crawler.grouping import FileKind, RepoLayout
from crawler.ranking.columns import search_columns, search_scalars

__all__ = [
    "SCAN_COUNTERS",
    "ErrorRecord",
    "RepoMeta",
    "RepoWrite",
    "ScanSummary",
    "ScanTotals",
    "StoredQuantTables",
    "StoredRepo",
    "finish_scan",
    "get_state",
    "iter_tensor_tables",
    "load_repo",
    "mark_repos_vanished",
    "pending_repo_ids",
    "record_errors",
    "set_state",
    "start_scan",
    "touch_repos",
    "update_analysis",
    "write_repo",
]


def _now() -> datetime:
    return datetime.now(UTC)


# -- values ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RepoMeta:
    """What the listing says about a repo (no per-file data)."""

    repo_id: str
    sha: str | None
    last_modified: datetime | None = None
    created_at: datetime | None = None
    author: str | None = None
    private: bool = False
    gated: str | None = None
    downloads: int | None = None
    likes: int | None = None
    base_model: str | None = None
    tags: tuple[str, ...] = ()
    card_data: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ErrorRecord:
    """One ``scan_errors`` row."""

    kind: str
    message: str
    repo_id: str | None = None
    path: str | None = None


@dataclass(frozen=True, slots=True)
class RepoWrite:
    """Everything one repo contributes to the catalog in one transaction.

    ``layout`` is None when the file listing failed (files and quants are then left alone).
    ``analyses`` maps quant path -> analysis for the quants read in this pass; quants whose
    content did not change keep their stored analysis. ``complete`` sets ``scanned_sha``.
    """

    meta: RepoMeta
    layout: RepoLayout | None
    analyses: Mapping[str, QuantAnalysis] = field(default_factory=dict)
    complete: bool = False
    vanished: bool = False
    errors: tuple[ErrorRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class StoredRepo:
    """What the catalog knows of a repo, as far as the crawl needs it."""

    repo_id: str
    sha: str | None
    scanned_sha: str | None
    vanished: bool
    #: quant path -> content key of its stored analysis (analysed quants only).
    analysed: Mapping[str, str]
    #: file path -> header bytes of its last analysis (size hints for the next read).
    header_bytes: Mapping[str, int]
    #: file path -> (kind, shard index) for the stored, live GGUF files.
    file_kinds: Mapping[str, tuple[str, int | None]]

    @property
    def done(self) -> bool:
        """True when the repo's current sha was fully analysed."""
        return self.sha is not None and self.scanned_sha == self.sha and not self.vanished


@dataclass(frozen=True, slots=True)
class ScanTotals:
    """Counters written to the ``scans`` row (same names as its columns)."""

    repos_seen: int = 0
    repos_new: int = 0
    repos_changed: int = 0
    repos_unchanged: int = 0
    quants_analysed: int = 0
    files_analysed: int = 0
    requests: int = 0
    bytes_fetched: int = 0
    errors: int = 0

    def counters(self) -> dict[str, int]:
        """The counters by name, in field order (the JSON of ``crawl`` and ``scans``)."""
        return {name: getattr(self, name) for name in SCAN_COUNTERS}


#: The names of :class:`ScanTotals`' counters (columns of ``scans``).
SCAN_COUNTERS = tuple(f.name for f in fields(ScanTotals))


@dataclass(frozen=True, slots=True, kw_only=True)
class ScanSummary(ScanTotals):
    """What one pass did (``crawler.scan.run_once``). ``to_json`` gives the keys of DESIGN.md
    section 3 (and a few more)."""

    scan_id: int
    status: str
    #: Ranged GETs made for headers (redirect hops not counted) and bytes those returned.
    header_reads: int = 0
    header_bytes_fetched: int = 0
    #: Bytes the analysed headers span (what a perfect reader would fetch).
    header_bytes: int = 0
    message: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The crawl summary JSON (sizes in bytes)."""
        return {
            "scan_id": self.scan_id,
            "status": self.status,
            **self.counters(),
            "header_reads": self.header_reads,
            "header_bytes": self.header_bytes,
        }


@dataclass(frozen=True, slots=True)
class StoredQuantTables:
    """A stored quant's raw headers, for ``quants reprofile``."""

    quant_id: int
    repo_id: str
    path: str
    revision: str | None
    size_bytes: int
    repo_files: tuple[str, ...]
    shards: tuple[AnalysedShard, ...]


# -- tensor tables ---------------------------------------------------------------------------


def load_repo(catalog: Catalog, repo_id: str) -> StoredRepo | None:
    """The stored state of ``repo_id``, or None if the catalog never saw it."""
    with catalog.session() as s:
        repo = s.scalar(select(Repo).where(Repo.repo_id == repo_id))
        if repo is None:
            return None
        analysed = {
            path: key or ""
            for path, key in s.execute(
                select(Quant.path, Quant.content_key).where(
                    Quant.repo_pk == repo.id,
                    Quant.analysed_at.is_not(None),
                    Quant.vanished_at.is_(None),
                )
            )
        }
        header_bytes: dict[str, int] = {}
        kinds: dict[str, tuple[str, int | None]] = {}
        for path, kind, index, hb in s.execute(
            select(File.path, File.kind, File.shard_index, File.header_bytes).where(
                File.repo_pk == repo.id, File.vanished_at.is_(None)
            )
        ):
            kinds[path] = (kind, index)
            if hb:
                header_bytes[path] = hb
        return StoredRepo(
            repo_id=repo.repo_id,
            sha=repo.sha,
            scanned_sha=repo.scanned_sha,
            vanished=repo.vanished_at is not None,
            analysed=analysed,
            header_bytes=header_bytes,
            file_kinds=kinds,
        )


def pending_repo_ids(catalog: Catalog, *, exclude: Iterable[str] = ()) -> list[str]:
    """Live repos whose current sha is not fully analysed (errors or an interrupted pass)."""
    skip = set(exclude)
    with catalog.session() as s:
        rows = s.scalars(
            select(Repo.repo_id)
            .where(Repo.vanished_at.is_(None))
            .where((Repo.scanned_sha.is_(None)) | (Repo.scanned_sha != Repo.sha))
            .order_by(Repo.repo_id)
        )
        return [r for r in rows if r not in skip]


def get_state(catalog: Catalog, key: str) -> str | None:
    """A ``crawl_state`` value."""
    with catalog.session() as s:
        row = s.get(CrawlState, key)
        return row.value if row is not None else None


def set_state(catalog: Catalog, key: str, value: str) -> None:
    """Set a ``crawl_state`` value."""
    with catalog.session() as s:
        s.merge(CrawlState(key=key, value=value))


# -- scans -----------------------------------------------------------------------------------


def start_scan(
    catalog: Catalog, *, trigger: str, endpoint: str | None, params: Mapping[str, Any]
) -> int:
    """Insert a ``running`` scan row; return its id.

    Callers hold the crawl lock, so any other ``running`` row belongs to a process that died
    (SIGKILL, power loss): it is closed as ``failed`` rather than left running forever.
    """
    with catalog.session() as s:
        for stale in s.scalars(select(Scan).where(Scan.status == "running")):
            stale.status = "failed"
            stale.finished_at = stale.finished_at or _now()
            stale.message = "abandoned: the crawl process ended without finishing"
        scan = Scan(
            started_at=_now(),
            status="running",
            trigger=trigger,
            endpoint=endpoint,
            params=dict(params),
        )
        s.add(scan)
        s.flush()
        return scan.id


def finish_scan(
    catalog: Catalog, scan_id: int, totals: ScanTotals, *, status: str, message: str | None
) -> None:
    """Record the pass's totals and final status (ok, interrupted, failed)."""
    with catalog.session() as s:
        scan = s.get(Scan, scan_id)
        if scan is None:
            return
        scan.finished_at = _now()
        scan.status = status
        scan.message = message
        for name, value in totals.counters().items():
            setattr(scan, name, value)


def record_errors(catalog: Catalog, scan_id: int, errors: Iterable[ErrorRecord]) -> None:
    """Insert ``scan_errors`` rows in their own transaction."""
    rows = list(errors)
    if not rows:
        return
    with catalog.session() as s:
        _add_errors(s, scan_id, rows)


def _add_errors(s: Any, scan_id: int, errors: Iterable[ErrorRecord]) -> None:
    at = _now()
    for e in errors:
        s.add(
            ScanError(
                scan_id=scan_id,
                repo_id=e.repo_id,
                path=e.path,
                kind=e.kind,
                message=e.message[:2000],
                at=at,
            )
        )


# -- the write path --------------------------------------------------------------------------


def _apply_meta(repo: Repo, meta: RepoMeta, now: datetime) -> None:
    repo.author = meta.author
    repo.sha = meta.sha
    repo.last_modified = meta.last_modified
    repo.created_at = meta.created_at
    repo.private = meta.private
    repo.gated = meta.gated
    if meta.downloads is not None:
        repo.downloads = meta.downloads
    if meta.likes is not None:
        repo.likes = meta.likes
    repo.base_model = meta.base_model
    repo.tags = list(meta.tags)
    repo.card_data = dict(meta.card_data) if meta.card_data is not None else None
    repo.last_seen_at = now


def write_repo(catalog: Catalog, scan_id: int, w: RepoWrite) -> None:
    """Write one repo (see the module docstring) in one transaction."""
    now = _now()
    with catalog.session() as s:
        repo = s.scalar(select(Repo).where(Repo.repo_id == w.meta.repo_id))
        if repo is None:
            repo = Repo(repo_id=w.meta.repo_id, first_seen_at=now, private=False)
            s.add(repo)
        _apply_meta(repo, w.meta, now)
        repo.vanished_at = now if w.vanished else None
        s.flush()
        if w.layout is not None:
            _write_layout(s, repo.id, w, scan_id, now)
        elif w.vanished:
            for model in (Quant, File):
                s.execute(
                    update(model)
                    .where(model.repo_pk == repo.id, model.vanished_at.is_(None))
                    .values(vanished_at=now)
                )
        refresh_live_rows(s, [repo.id])
        _add_errors(s, scan_id, w.errors)
        # Last, in the same transaction: the marker that this sha needs no more work.
        if w.complete and not w.vanished:
            repo.scanned_sha = w.meta.sha
            repo.scanned_at = now


def _write_layout(s: Any, repo_pk: int, w: RepoWrite, scan_id: int, now: datetime) -> None:
    assert w.layout is not None
    layout = w.layout
    quants = {q.path: q for q in s.scalars(select(Quant).where(Quant.repo_pk == repo_pk))}
    live_quants = {g.path for g in layout.quants}
    for q in quants.values():
        if q.path not in live_quants and q.vanished_at is None:
            q.vanished_at = now
    for group in layout.quants:
        q = quants.get(group.path)
        if q is None:
            q = Quant(repo_pk=repo_pk, path=group.path, first_seen_at=now)
            s.add(q)
            quants[group.path] = q
        q.vanished_at = None
        q.shard_count = group.shard_count
        q.size_bytes = group.size_bytes
    s.flush()  # once: the new quants get their ids
    groups = {g.path: g for g in layout.quants}
    analysed_quants = [
        (quants[path], a, groups[path].content_key)
        for path, a in sorted(w.analyses.items())
        if path in groups
    ]
    _write_analyses(s, analysed_quants, w.meta.sha, scan_id, now)
    files = {f.path: f for f in s.scalars(select(File).where(File.repo_pk == repo_pk))}
    live_files = {f.path for f in layout.files}
    for f in files.values():
        if f.path not in live_files and f.vanished_at is None:
            f.vanished_at = now
    analysed = {shard.path: shard for a in w.analyses.values() for shard in a.shards}
    for gf in layout.files:
        row = files.get(gf.path)
        if row is None:
            row = File(repo_pk=repo_pk, path=gf.path, first_seen_at=now)
            s.add(row)
        row.vanished_at = None
        row.kind = str(gf.kind)
        row.shard_index = gf.shard_index
        row.shard_count = gf.shard_count
        row.size_bytes = gf.size
        row.lfs_oid = gf.content_key if len(gf.content_key) == 64 else None
        row.blob_id = None if row.lfs_oid else gf.content_key[:64]
        row.quant_id = quants[gf.quant_path].id if gf.quant_path in quants else None
        shard = analysed.get(gf.path)
        if shard is not None:
            row.revision = w.meta.sha
            row.analysed_oid = shard.content_key[:64]
            row.header_bytes = shard.header_bytes
            row.analysed_at = now
        elif gf.kind == FileKind.PART and (gf.shard_index or 0) > 1 and gf.quant_path in w.analyses:
            # Later parts of a byte-concatenated file carry no header: analysed with part 1.
            row.revision = w.meta.sha
            row.analysed_oid = gf.content_key[:64]
            row.analysed_at = now


def _apply_profile(q: Quant, p: StoredProfile) -> None:
    q.quant_label = p.quant_label
    q.architecture = p.architecture
    q.n_tensors = p.n_tensors
    q.n_params = p.n_params
    q.bpw = p.bpw
    q.mtp_present = p.mtp_present
    q.mtp_state = p.mtp_state
    q.mtp_layers = p.mtp_layers
    q.mtp_min_bits = p.mtp_min_bits
    q.mtp_preserved = p.mtp_preserved
    q.attn_min_bits = p.attn_min_bits
    q.attn_preserved = p.attn_preserved
    q.dynamic = p.dynamic
    q.loadable_by_mainline = p.loadable_by_mainline
    q.claims = list(p.claims)
    q.profile = dict(p.json)


def _group_rows(quant_id: int, p: StoredProfile) -> list[TensorGroup]:
    return [
        TensorGroup(
            quant_id=quant_id,
            group_name=g.name,
            n_tensors=g.n_tensors,
            n_params=g.n_params,
            n_bytes=g.n_bytes,
            bpw=g.bpw,
            min_bits=g.min_bits,
            max_bits=g.max_bits,
            types=dict(g.types),
        )
        for g in p.groups
    ]


def _apply_search_columns(q: Quant, p: StoredProfile, m: MemoryRecord) -> None:
    """Write the search columns (computed by :mod:`crawler.ranking.columns`)."""
    for name, value in search_columns(p.groups, m).items():
        setattr(q, name, value)


def _memory_row(quant_id: int, m: MemoryRecord) -> MemoryModel:
    return MemoryModel(
        **search_scalars(m.coefficients),
        quant_id=quant_id,
        status=m.status,
        reason=m.reason,
        weights_bytes=m.weights_bytes,
        mtp_weights_bytes=m.mtp_weights_bytes,
        expert_bytes=m.expert_bytes,
        host_bytes=m.host_bytes,
        kv_bytes_per_token_f16=m.kv_bytes_per_token_f16,
        fixed_bytes_f16=m.fixed_bytes_f16,
        coefficients=dict(m.coefficients) if m.coefficients is not None else None,
    )


def _replace_children(s: Any, quant_ids: list[int], tables: Sequence[Any]) -> None:
    # One DELETE per table for all the repo's re-analysed quants (no per-row merge/SELECT).
    for model in tables:
        s.execute(delete(model).where(model.quant_id.in_(quant_ids)))


def _write_analyses(
    s: Any,
    items: Sequence[tuple[Quant, QuantAnalysis, str]],
    revision: str | None,
    scan_id: int | None,
    now: datetime,
) -> None:
    if not items:
        return
    ids = [q.id for q, _, _ in items]
    with s.no_autoflush:
        _replace_children(s, ids, (TensorGroup, MemoryModel, TensorTable))
        # Ordered by id, so each quant's entry ends as its latest version's key.
        last_key: dict[int, str | None] = {
            row.quant_id: row.content_key
            for row in s.execute(
                select(QuantVersion.quant_id, QuantVersion.content_key)
                .where(QuantVersion.quant_id.in_(ids))
                .order_by(QuantVersion.id)
            )
        }
        rows: list[Any] = []
        for q, a, content_key in items:
            _apply_profile(q, a.profile)
            q.revision = revision
            q.base_model = a.base_model
            q.file_type = a.file_type
            q.header_bytes = sum(sh.header_bytes for sh in a.shards)
            q.analysed_at = now
            q.content_key = content_key
            group_rows = _group_rows(q.id, a.profile)
            _apply_search_columns(q, a.profile, a.memory)
            rows += group_rows
            rows.append(_memory_row(q.id, a.memory))
            rows.append(
                TensorTable(
                    quant_id=q.id,
                    revision=revision,
                    encoding=TENSOR_TABLE_ENCODING,
                    n_tensors=sum(len(sh.header.tensors) for sh in a.shards),
                    data=encode_tensor_table(a.shards),
                )
            )
            # History: a row per distinct content (a re-upload under the same name adds one).
            if last_key.get(q.id) != content_key:
                rows.append(
                    QuantVersion(
                        quant_id=q.id,
                        scan_id=scan_id,
                        revision=revision,
                        content_key=content_key,
                        size_bytes=q.size_bytes,
                        profile=dict(a.profile.json),
                        analysed_at=now,
                    )
                )
        s.add_all(rows)


def touch_repos(catalog: Catalog, metas: Sequence[RepoMeta]) -> None:
    """Refresh listing fields (downloads, likes, last seen) of repos known and unchanged."""
    if not metas:
        return
    now = _now()
    with catalog.session() as s:
        by_id = {
            r.repo_id: r
            for r in s.scalars(select(Repo).where(Repo.repo_id.in_([m.repo_id for m in metas])))
        }
        for m in metas:
            repo = by_id.get(m.repo_id)
            if repo is None:
                continue
            if m.downloads is not None:
                repo.downloads = m.downloads
            if m.likes is not None:
                repo.likes = m.likes
            repo.last_seen_at = now


def mark_repos_vanished(
    catalog: Catalog,
    *,
    seen: Iterable[str],
    authors: Iterable[str] | None,
    only: Iterable[str] | None = None,
) -> list[str]:
    """Mark live repos not ``seen`` by a complete listing as vanished (with their quants/files).

    ``authors`` limits the check to those authors' repos (a per-author listing says nothing
    about other repos); None means the listing covered every GGUF repo. ``only`` restricts the
    check to those repo ids (a repo the Hub answered 404 for).
    """
    seen_set = set(seen)
    now = _now()
    with catalog.session() as s:
        query = select(Repo).where(Repo.vanished_at.is_(None))
        if authors is not None:
            query = query.where(Repo.author.in_(list(authors)))
        if only is not None:
            query = query.where(Repo.repo_id.in_(list(only)))
        gone = [r for r in s.scalars(query) if r.repo_id not in seen_set]
        for repo in gone:
            repo.vanished_at = now
            for model in (Quant, File):
                s.execute(
                    update(model)
                    .where(model.repo_pk == repo.id, model.vanished_at.is_(None))
                    .values(vanished_at=now)
                )
        refresh_live_rows(s, [r.id for r in gone])
        return [r.repo_id for r in gone]


# -- reprofile -------------------------------------------------------------------------------


def iter_tensor_tables(catalog: Catalog) -> list[StoredQuantTables]:
    """Every live quant's stored headers (decoded), with its repo's live GGUF file names."""
    out: list[StoredQuantTables] = []
    with catalog.session() as s:
        files_by_repo: dict[int, list[str]] = {}
        for repo_pk, path in s.execute(
            select(File.repo_pk, File.path).where(File.vanished_at.is_(None))
        ):
            files_by_repo.setdefault(repo_pk, []).append(path)
        rows = s.execute(
            select(Quant, Repo.repo_id, TensorTable)
            .join(Repo, Quant.repo_pk == Repo.id)
            .join(TensorTable, TensorTable.quant_id == Quant.id)
            .where(Quant.vanished_at.is_(None))
            .order_by(Repo.repo_id, Quant.path)
        )
        for q, repo_id, table in rows:
            out.append(
                StoredQuantTables(
                    quant_id=q.id,
                    repo_id=repo_id,
                    path=q.path,
                    revision=q.revision,
                    size_bytes=q.size_bytes,
                    repo_files=tuple(sorted(files_by_repo.get(q.repo_pk, []))),
                    shards=tuple(decode_tensor_table(table.data, table.encoding)),
                )
            )
    return out


def update_analysis(
    catalog: Catalog, quant_id: int, profile: StoredProfile, memory: MemoryRecord
) -> bool:
    """Replace a quant's profile columns, groups and memory model (``quants reprofile``).

    Returns True when the profile changed. History gets no row: the content did not change.
    """
    with catalog.session() as s:
        q = s.get(Quant, quant_id)
        if q is None:
            return False
        changed = (q.profile or {}) != dict(profile.json)
        _apply_profile(q, profile)
        _replace_children(s, [q.id], (TensorGroup, MemoryModel))
        group_rows = _group_rows(q.id, profile)
        _apply_search_columns(q, profile, memory)
        s.add_all([*group_rows, _memory_row(q.id, memory)])
        refresh_live_rows(s, [q.repo_pk])  # label and architecture may have changed
        return changed


def count_rows(catalog: Catalog) -> dict[str, int]:
    """Row counts per table (tests and the benchmark compare catalogs with it)."""
    with catalog.session() as s:
        return {
            model.__tablename__: s.scalar(select(func.count()).select_from(model)) or 0
            for model in (Repo, Quant, File, TensorGroup, TensorTable, MemoryModel, QuantVersion)
        }
