"""The per-repo work of a crawl pass: decide, list, group, read headers, analyse, write.

Each repo is written in one catalog transaction.
Details: docs/internals/crawl.md#repo
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from crawler.base.errors import (
    CatalogError,
    ConfigError,
    GGUFError,
    HubBudgetExhausted,
    HubError,
    QuantsError,
)
from crawler.base.tally import Tally
from crawler.catalog import repo_locks, scans, store
from crawler.catalog.analyses import QuantRow
from crawler.catalog.scans import ErrorRecord, ScanSummary
from crawler.catalog.store import RepoMeta, RepoWrite, StoredRepo
from crawler.crawl.errors import ContentChanged, error_kind, error_record
from crawler.crawl.progress import CrawlCounts, Progress
from crawler.crawl.rows import finished_row
from crawler.gguf.fetch import first_read_for
from crawler.gguf.header_read import TemplateBook, read_quant_header, scopes_for
from crawler.profile.analysis import AnalysedShard, analyse_quant
from crawler.profile.grouping import FileKind, GroupedFile, QuantGroup, RepoLayout, group_files
from crawler.profile.measured import (
    MAX_ARTIFACTS,
    MeasuredRow,
    artifact_kind,
    match_rows,
    parse_artifact,
)

if TYPE_CHECKING:
    from crawler.base.config import Settings
    from crawler.catalog import Catalog
    from crawler.hub import HubFile, RepoListing

logger = logging.getLogger(__name__)

__all__ = ["COLD_SHARD_FIRST_READ", "RepoScanner", "ScanHub"]

#: First read of a later gguf-split shard: such shards carry no tokenizer, only ``split.*`` keys
#: and the tensor infos (~64 bytes each, crawler/gguf/parse.py), so 64 KiB holds ~1000 tensors; the
#: parser's estimate fetches the rest of a larger one in a second request. Never sized from a
#: first shard (whose header holds the tokenizer), whichever is read first.
COLD_SHARD_FIRST_READ = 64 << 10
# Writes of unchanged repos' downloads/likes are batched this many at a time.
_TOUCH_BATCH = 200


class _Reader(Protocol):
    """A ``ReadAt`` over one file that learns the Hub's content etag (``X-Linked-Etag``)."""

    etag: str | None

    def __call__(self, offset: int, length: int) -> bytes: ...


class _Stats(Protocol):
    @property
    def requests(self) -> int: ...
    @property
    def bytes_fetched(self) -> int: ...
    @property
    def range_ignored(self) -> int: ...


class ScanHub(Protocol):
    """What a crawl pass needs of the Hub (``crawler.hub.HubClient``; tests pass fakes)."""

    @property
    def stats(self) -> _Stats:
        """Request/byte counters since the client was created."""

    def discover(
        self,
        *,
        authors: Iterable[str] = (),
        searches: Iterable[str] = (),
        base_models: Iterable[str] = (),
        since: datetime | None = None,
        limit: int | None = None,
    ) -> Iterator[RepoListing]:
        """Repos, most recently modified first, each once."""

    def repo_info(self, repo_id: str, revision: str | None = None) -> RepoListing:
        """One repo's listing fields."""

    def list_files(self, repo_id: str, revision: str) -> tuple[HubFile, ...]:
        """Every file of the repo at ``revision``."""

    def range_reader(self, repo_id: str, path: str, revision: str) -> _Reader:
        """A ranged reader over one file at ``revision``."""


def as_utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _meta(listing: RepoListing) -> RepoMeta:
    base = listing.card_base_models[:1] or listing.quantized_from[:1]
    card: dict[str, Any] = {}
    if listing.card_base_models:
        card["base_model"] = list(listing.card_base_models)
    if listing.base_model_relation:
        card["base_model_relation"] = listing.base_model_relation
    return RepoMeta(
        repo_id=listing.repo_id,
        sha=listing.sha,
        last_modified=as_utc(listing.last_modified),
        created_at=as_utc(listing.created_at),
        author=listing.author or listing.repo_id.split("/", 1)[0],
        private=listing.private,
        gated=listing.gated,
        downloads=listing.downloads,
        likes=listing.likes,
        base_model=base[0] if base else None,
        tags=listing.tags,
        card_data=card or None,
    )


def _is_later_shard(f: GroupedFile) -> bool:
    return f.kind == FileKind.SHARD and (f.shard_index or 1) > 1


class RepoScanner:
    """One pass's repo work: pools, counters, the repos handled, the stop flag."""

    def __init__(
        self,
        settings: Settings,
        hub: ScanHub,
        catalog: Catalog,
        scan_id: int,
        progress: Progress,
        stop: threading.Event,
    ) -> None:
        self.settings = settings
        self.hub = hub
        self.catalog = catalog
        self.scan_id = scan_id
        self.progress = progress
        self.stop = stop
        self.counts = Tally(ScanSummary(scan_id=scan_id, status="running"))
        self.start_stats = (hub.stats.requests, hub.stats.bytes_fetched, hub.stats.range_ignored)
        self.handled: set[str] = set()
        self.owner = repo_locks.new_owner(settings.resolved_data_dir)  # name on its repo claims
        self.touch: list[RepoMeta] = []
        self.write_lock = threading.Lock()
        self.budget_spent = False
        # Tokenizer templates shared by every repo of the pass, and with other passes (catalog).
        from crawler.catalog.tokenizer_templates import CatalogTemplates

        self.templates = TemplateBook(CatalogTemplates(catalog))
        concurrency = settings.concurrency
        self.files = ThreadPoolExecutor(concurrency, thread_name_prefix="quants-header")
        # A few repos in flight keep the header pool busy while one repo lists its tree or
        # waits for its probe read; more would only hold memory.
        self.repo_slots = max(2, min(16, concurrency))
        self.repos = ThreadPoolExecutor(self.repo_slots, thread_name_prefix="quants-repo")
        # Listing runs at most this far ahead of the repos being processed: a stop request then
        # leaves little queued work, and queued repos not yet started are skipped.
        self.slots = threading.BoundedSemaphore(self.repo_slots + 1)
        self.inflight: list[Future[None]] = []

    # -- bookkeeping ----------------------------------------------------------------------------

    def crawl_counts(self) -> CrawlCounts:
        """Totals for the progress bar."""
        stats = self.hub.stats
        c = self.counts.value
        return CrawlCounts(
            repos=c.repos_seen,
            files=c.files_analysed,
            bytes_fetched=stats.bytes_fetched - self.start_stats[1],
            requests=stats.requests - self.start_stats[0],
            errors=c.errors,
        )

    def record(self, errors: Sequence[ErrorRecord]) -> None:
        """Write errors that belong to no repo transaction."""
        if errors:
            self.counts.add(errors=len(errors))
            with self.write_lock:
                scans.record_errors(self.catalog, self.scan_id, errors)

    def flush_touch(self) -> None:
        """Write the batched downloads/likes refresh of unchanged repos."""
        batch, self.touch = self.touch, []
        with self.write_lock:
            store.touch_repos(self.catalog, batch)

    def shutdown(self) -> None:
        """Wait for the repos in flight, then stop the pools."""
        self.wait()
        self.repos.shutdown(wait=True)
        self.files.shutdown(wait=True)

    def wait(self) -> None:
        """Wait for every repo in flight; re-raise a fatal error from one of them."""
        inflight, self.inflight = self.inflight, []
        for fut in inflight:
            fut.result()

    # -- listing ------------------------------------------------------------------------------

    def handle(self, listing: RepoListing) -> None:
        """Decide about one listed repo: skip (unchanged) or process it."""
        if listing.repo_id in self.handled:
            return
        self.handled.add(listing.repo_id)
        meta = _meta(listing)
        stored = store.load_repo(self.catalog, listing.repo_id)
        self.counts.add(repos_seen=1)
        if not _unchanged(stored, meta):
            # Crawlers sharing this catalog: one reads the repo, the others skip it; the state
            # is read again under the claim (the holder may have written it just before).
            if not repo_locks.claim_repo(self.catalog, meta.repo_id, self.owner):
                self.progress.advance(meta.repo_id, self.crawl_counts())
                return
            stored = store.load_repo(self.catalog, listing.repo_id)
            if _unchanged(stored, meta):
                repo_locks.release_repo(self.catalog, meta.repo_id, self.owner)
        if _unchanged(stored, meta):
            self.counts.add(repos_unchanged=1)
            self.touch.append(meta)
            if len(self.touch) >= _TOUCH_BATCH:
                self.flush_touch()
            self.progress.advance(meta.repo_id, self.crawl_counts())
            return
        self.slots.acquire()
        fut = self.repos.submit(self._process_guarded, meta, stored)
        self.inflight = [f for f in self.inflight if not f.done() or f.exception() is not None]
        self.inflight.append(fut)

    def _process_guarded(self, meta: RepoMeta, stored: StoredRepo | None) -> None:
        if self.stop.is_set():
            # Queued but not started: left for the next pass (nothing of it was written).
            repo_locks.release_repo(self.catalog, meta.repo_id, self.owner)
            self.slots.release()
            return
        self.counts.add(**{"repos_new" if stored is None else "repos_changed": 1})
        try:
            self.process(meta, stored)
        except (ConfigError, CatalogError):
            raise
        except Exception as exc:  # recorded; one repo never aborts the pass
            logger.exception("crawling %s failed", meta.repo_id)
            self.record([error_record("other", f"{type(exc).__name__}: {exc}", meta.repo_id)])
        finally:
            repo_locks.release_repo(self.catalog, meta.repo_id, self.owner)
            self.slots.release()
            self.progress.advance(meta.repo_id, self.crawl_counts())

    # -- one repo -------------------------------------------------------------------------------

    def process(self, meta: RepoMeta, stored: StoredRepo | None) -> None:
        """List, group, read and write one repo (runs in a repo worker thread)."""
        repo_id = meta.repo_id
        if meta.sha is None:
            self._write(RepoWrite(meta, None, errors=(error_record("other", "no sha", repo_id),)))
            return
        try:
            files = self.hub.list_files(repo_id, meta.sha)
        except (ConfigError, CatalogError):
            raise
        except HubError as exc:
            kind = error_kind(exc, during="list")
            self.note_budget(exc)
            vanished = kind == "vanished"
            self._write(
                RepoWrite(meta, None, vanished=vanished, errors=(error_record(kind, exc, repo_id),))
            )
            return
        layout = group_files(files)
        todo = [
            q
            for q in layout.quants
            if q.complete and (stored is None or stored.analysed.get(q.path) != q.content_key)
        ]
        errors: list[ErrorRecord] = []
        shards = self._read_headers(meta, todo, stored, errors)
        analyses: dict[str, QuantRow] = {}
        repo_files = [f.path for f in layout.files]
        for group in todo:
            got = [shards.get(f.path) for f in group.header_files]
            if any(s is None for s in got):
                continue
            try:
                analysis = analyse_quant(
                    repo_id,
                    meta.sha,
                    group.path,
                    group.size_bytes,
                    [s for s in got if s is not None],
                    repo_files,
                )
                if analysis.base_model is None and meta.base_model is not None:
                    analysis = replace(analysis, base_model=meta.base_model)
                analyses[group.path] = finished_row(analysis)
            except (ConfigError, CatalogError):
                raise
            except Exception as exc:  # a bug in a rule must not stop the crawl; it is recorded
                logger.exception("analysing %s/%s failed", repo_id, group.path)
                kind = "malformed_gguf" if isinstance(exc, GGUFError) else "other"
                errors.append(
                    error_record(kind, f"{type(exc).__name__}: {exc}", repo_id, group.path)
                )
        self.counts.add(quants_analysed=len(analyses))
        measured = tuple(self._read_measured(meta, files, layout))
        self._write(
            RepoWrite(
                meta,
                layout,
                analyses,
                complete=not errors,
                errors=tuple(errors),
                measured=measured,
            )
        )

    def _read_measured(
        self, meta: RepoMeta, files: Sequence[HubFile], layout: RepoLayout
    ) -> list[tuple[str, int, MeasuredRow]]:
        """Quality figures the repo publishes for its own quants (crawler/profile/measured.py).

        Only small artifacts of a known format are read, one request each, at most
        MAX_ARTIFACTS per revision; a failed read leaves the figures out (they are optional:
        the repo still counts as complete) unless the budget is spent.
        """
        assert meta.sha is not None
        found = [
            (f.path, kind) for f in files if (kind := artifact_kind(f.path, f.size)) is not None
        ][:MAX_ARTIFACTS]
        if not found:
            return []
        sizes = {f.path: f.size for f in files}
        rows: list[MeasuredRow] = []
        for path, kind in found:
            if self.budget_spent:
                break
            try:
                data = self.hub.range_reader(meta.repo_id, path, meta.sha)(0, sizes[path])
            except (ConfigError, CatalogError):
                raise
            except HubError as exc:
                self.note_budget(exc)
                logger.warning("reading %s/%s failed: %s", meta.repo_id, path, exc)
                continue
            rows += parse_artifact(kind, data.decode("utf-8", "replace"), path)
        by_name: dict[str, tuple[str, int]] = {}
        groups = {q.path: q for q in layout.quants}
        for gf in layout.files:
            if gf.quant_path is not None and gf.quant_path in groups:
                by_name[gf.path.rsplit("/", 1)[-1]] = (gf.quant_path, gf.size)
        for q in layout.quants:  # a split quant's stated size is the sum of its files
            by_name.setdefault(q.path.rsplit("/", 1)[-1], (q.path, q.size_bytes))
        return match_rows(rows, by_name)

    def _write(self, w: RepoWrite) -> None:
        self.counts.add(errors=len(w.errors))
        with self.write_lock:
            store.write_repo(self.catalog, self.scan_id, w)

    def note_budget(self, exc: BaseException) -> None:
        """Stop the pass when the request/byte budget is spent."""
        if isinstance(exc, HubBudgetExhausted):
            self.budget_spent = True
            self.stop.set()

    def _read_headers(
        self,
        meta: RepoMeta,
        todo: Sequence[QuantGroup],
        stored: StoredRepo | None,
        errors: list[ErrorRecord],
    ) -> dict[str, AnalysedShard]:
        """Read every header file of ``todo``: one first file alone (its tokenizer becomes the
        template of the others unless one is known), then the other first files, then the later
        shards of split quants (never before the first files: they carry no tokenizer)."""
        hints = _hints(stored)
        jobs = sorted((f for q in todo for f in q.header_files), key=_is_later_shard)
        # Part 1 of a byte-concatenated file: its tensor offsets run into the later parts.
        sizes = {f.path: q.size_bytes for q in todo for f in q.files if f.kind == FileKind.PART}
        probe = jobs[:1] if jobs and not _is_later_shard(jobs[0]) else []
        out: dict[str, AnalysedShard] = {}
        for batch in (probe, jobs[len(probe) :]):
            futures = [
                (
                    f,
                    self.files.submit(
                        self._read_one,
                        meta,
                        f,
                        hints.get(_is_later_shard(f)),
                        sizes.get(f.path, f.size),
                    ),
                )
                for f in batch
            ]
            for f, fut in futures:
                try:
                    shard = fut.result()
                except (ConfigError, CatalogError):
                    raise
                except QuantsError as exc:
                    self.note_budget(exc)
                    errors.append(error_record(error_kind(exc), exc, meta.repo_id, f.path))
                    continue
                out[f.path] = shard
                later = _is_later_shard(f)
                hints[later] = max(hints.get(later) or 0, shard.header_bytes)
        return out

    def _read_one(
        self, meta: RepoMeta, f: GroupedFile, hint: int | None, file_size: int
    ) -> AnalysedShard:
        assert meta.sha is not None
        if self.budget_spent:
            raise HubBudgetExhausted("budget spent", repo_id=meta.repo_id)
        reader = self.hub.range_reader(meta.repo_id, f.path, meta.sha)
        source = f"{meta.repo_id}/{f.path}"
        cap = self.settings.max_header_bytes
        if _is_later_shard(f):
            # Tensor infos only: 64 KiB, or a later shard's size seen before if larger.
            first = max(COLD_SHARD_FIRST_READ, first_read_for(hint, None) if hint else 0)
            read = read_quant_header(
                reader, file_size=file_size, max_header_bytes=cap, first_read=first, source=source
            )
        else:
            scopes = scopes_for(meta.repo_id, meta.base_model)
            with self.templates.turn(scopes):
                read = read_quant_header(
                    reader,
                    file_size=file_size,
                    max_header_bytes=cap,
                    book=self.templates,
                    scopes=scopes,
                    size_hint=hint,
                    source=source,
                )
        self.counts.add(
            header_reads=read.requests,
            header_bytes_fetched=read.bytes_fetched,
            header_templated=int(read.templated),
            header_fallbacks=int(read.fell_back or read.requests > 2),
        )
        header = read.header
        etag = reader.etag
        if etag and len(f.content_key) == 64 and etag != f.content_key:
            raise ContentChanged(
                f"{f.path} changed during the crawl (listed {f.content_key[:12]}, "
                f"served {etag[:12]})",
                repo_id=meta.repo_id,
            )
        self.counts.add(files_analysed=1, header_bytes=header.data_offset)
        return AnalysedShard(f.path, f.content_key, header.data_offset, header)


def _hints(stored: StoredRepo | None) -> dict[bool, int | None]:
    """Size hints from the previous analysis of the repo: first/single files vs later shards."""
    hints: dict[bool, int | None] = {False: None, True: None}
    if stored is None:
        return hints
    for path, size in stored.header_bytes.items():
        kind, index = stored.file_kinds.get(path, ("gguf", None))
        later = kind == FileKind.SHARD and (index or 1) > 1
        hints[later] = max(hints[later] or 0, size)
    return hints


def _unchanged(stored: StoredRepo | None, meta: RepoMeta) -> bool:
    return stored is not None and stored.done and stored.sha == meta.sha
