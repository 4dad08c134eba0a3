"""The crawl's write path into the catalog, and the small reads the crawl decides with.

One repo is written in ONE transaction, so a crash leaves either the old state or the new one.
Details: docs/internals/catalog.md#store
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, select, update

from crawler.catalog import Catalog
from crawler.catalog.analyses import QuantRow, write_analyses
from crawler.catalog.scans import ErrorRecord, add_errors, now_utc
from crawler.catalog.search_index import refresh_live_rows, refresh_repo_downloads
from crawler.catalog.tables import (
    File,
    MeasuredQuality,
    MemoryModel,
    Quant,
    QuantVersion,
    Repo,
    TensorGroup,
    TensorTable,
)
from crawler.profile.grouping import FileKind, RepoLayout
from crawler.profile.measured import MeasuredRow

__all__ = [
    "RepoMeta",
    "RepoWrite",
    "StoredRepo",
    "count_rows",
    "load_repo",
    "mark_repos_vanished",
    "pending_repo_ids",
    "refresh_live",
    "touch_repos",
    "write_repo",
]


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
class RepoWrite:
    """Everything one repo contributes to the catalog in one transaction.

    ``layout`` is None when the file listing failed (files and quants are then left alone).
    ``analyses`` maps quant path -> analysis for the quants read in this pass; quants whose
    content did not change keep their stored analysis. ``complete`` sets ``scanned_sha``.
    """

    meta: RepoMeta
    layout: RepoLayout | None
    analyses: Mapping[str, QuantRow] = field(default_factory=dict)
    complete: bool = False
    vanished: bool = False
    errors: tuple[ErrorRecord, ...] = ()
    #: (quant path, quant size, row) read from the repo's quality artifacts at ``meta.sha``
    #: (crawler.profile.measured.match_rows); they replace the repo's stored rows when ``layout`` is
    #: set.
    measured: tuple[tuple[str, int, MeasuredRow], ...] = ()


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
                    # An imported analysis is not this crawl's own read: whenever the crawl
                    # processes the repo it reads such a quant itself (a local read outranks).
                    Quant.source.is_(None),
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


def recheck_imported(catalog: Catalog, *, sample: int | None = None) -> int:
    """Mark repos holding imported analyses as not done, so the next pass re-reads them.

    Why: an imported analysis is a publisher's word. A pass then re-reads (pending_repo_ids)
    these repos even when their commit is unchanged, and load_repo leaves their imported quants
    out of what counts as analysed, so each is read again and replaced by the local read.
    ``sample``: at most this many repos, those whose imported analyses are oldest first (the
    nightly pass); None: all. Returns the number of repos marked.
    """
    with catalog.session() as s:
        oldest = func.min(Quant.analysed_at)
        query = (
            select(Quant.repo_pk)
            .join(Repo, Repo.id == Quant.repo_pk)
            .where(Quant.source.is_not(None), Quant.vanished_at.is_(None))
            .where(Repo.vanished_at.is_(None))
            .group_by(Quant.repo_pk)
            .order_by(oldest, Quant.repo_pk)
        )
        if sample is not None:
            query = query.limit(sample)
        ids = list(s.scalars(query))
        for chunk in range(0, len(ids), 5000):
            s.execute(
                update(Repo).where(Repo.id.in_(ids[chunk : chunk + 5000])).values(scanned_sha=None)
            )
        return len(ids)


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
    """Write one repo (docs/internals/catalog.md#store) in one transaction."""
    now = now_utc()
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
        add_errors(s, scan_id, w.errors)
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
    write_analyses(s, analysed_quants, w.meta.sha, scan_id, now)
    _write_measured(s, repo_pk, w, now)
    files = {f.path: f for f in s.scalars(select(File).where(File.repo_pk == repo_pk))}
    live_files = {f.path for f in layout.files}
    for f in files.values():
        if f.path not in live_files and f.vanished_at is None:
            f.vanished_at = now
    analysed = {shard.path: shard for a in w.analyses.values() for shard in a.analysis.shards}
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


def touch_repos(catalog: Catalog, metas: Sequence[RepoMeta]) -> None:
    """Refresh listing fields (downloads, likes, last seen) of repos known and unchanged."""
    if not metas:
        return
    now = now_utc()
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
        refresh_repo_downloads(s, [r.id for r in by_id.values()])


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
    now = now_utc()
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


def count_rows(catalog: Catalog) -> dict[str, int]:
    """Row counts per table (tests and the benchmark compare catalogs with it)."""
    with catalog.session() as s:
        return {
            model.__tablename__: s.scalar(select(func.count()).select_from(model)) or 0
            for model in (Repo, Quant, File, TensorGroup, TensorTable, MemoryModel, QuantVersion)
        }


def refresh_live(catalog: Catalog) -> None:
    """Recompute ``quants.live`` and ``search_text`` of every quant (rows written elsewhere)."""
    with catalog.session() as s:
        pks = list(s.scalars(select(Repo.id)))
        refresh_live_rows(s, pks)


def live_names_analysed_since(
    catalog: Catalog, since: datetime
) -> Iterator[tuple[str, str | None, str, str | None, str | None]]:
    """(repo_id, base_model, path, quant_label, architecture) of each live quant analysed at
    or after ``since``: what an on-demand look-up matches its query against."""
    with catalog.session() as s:
        rows = s.execute(
            select(
                Repo.repo_id,
                Quant.base_model,
                Quant.path,
                Quant.quant_label,
                Quant.architecture,
                Quant.analysed_at,
            )
            .join(Repo, Quant.repo_pk == Repo.id)
            .where(Quant.live.is_(True))
        )
        for repo_id, base, path, label, arch, analysed_at in rows:
            if analysed_at is None:
                continue
            if analysed_at.tzinfo is None:  # SQLite keeps no zone: the catalog writes UTC
                analysed_at = analysed_at.replace(tzinfo=UTC)
            if analysed_at >= since:
                yield repo_id, base, path, label, arch


def _write_measured(s: Any, repo_pk: int, w: RepoWrite, now: datetime) -> None:
    """Replace the repo's measured-quality rows with those read at this revision."""
    s.execute(delete(MeasuredQuality).where(MeasuredQuality.repo_pk == repo_pk))
    sha = w.meta.sha or ""
    for quant_path, size, r in w.measured:
        s.add(
            MeasuredQuality(
                repo_pk=repo_pk,
                quant_path=quant_path,
                file_name=r.file_name,
                size_bytes=size,
                revision=sha,
                metric=r.metric,
                value=r.value,
                corpus=r.corpus,
                reference=r.reference,
                artifact=r.artifact,
                fmt=r.fmt,
                source_url=f"https://huggingface.co/{w.meta.repo_id}/blob/{sha}/{r.artifact}",
                read_at=now,
            )
        )
