"""One crawl pass, ``run_once``: discover, list files, group, read headers, analyse, store.

The one function ``quants crawl``, the scheduler and the tests call. It orchestrates; the Hub
client, the catalog store and the pure modules (grouping, headerfetch, gguf, profile, fit) do the
work. Guarantees: one repo = one transaction (``catalog.store.write_repo``); a repo with any
failure is recorded in ``scan_errors`` and keeps ``scanned_sha != sha`` so the next pass retries
it; a kill at any moment loses at most the repos in flight; the listing cursor advances only at
the end of a complete listing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from crawler.catalog import store
from crawler.catalog.store import (
    AnalysedShard,
    ErrorRecord,
    MemoryRecord,
    QuantAnalysis,
    RepoMeta,
    RepoWrite,
    ScanTotals,
    StoredRepo,
)
from crawler.errors import (
    CatalogError,
    ConfigError,
    GGUFError,
    HubBudgetExhausted,
    HubError,
    HubGated,
    HubNotFound,
    HubRateLimited,
    HubUnavailable,
    QuantsError,
)
from crawler.grouping import FileKind, GroupedFile, QuantGroup, group_files
from crawler.progress import CrawlCounts, NullProgress, Progress

if TYPE_CHECKING:
    from crawler.catalog import Catalog
    from crawler.config import Settings
    from crawler.gguf import GGUFHeader
    from crawler.hub import HubFile, RepoListing

logger = logging.getLogger(__name__)

__all__ = ["OVERLAP", "REFRESH_INTERVAL", "ScanHub", "ScanSummary", "error_kind", "run_once"]

#: The incremental listing stops at the previous watermark minus this (reference/hf-hub-api.md
#: section 5): a repo committed while the last pass was listing may sort just behind it.
OVERLAP = timedelta(hours=1)
#: A full listing (no watermark) runs at least this often: it refreshes downloads/likes of
#: unchanged repos, finds repos the watermark missed, and marks vanished repos.
REFRESH_INTERVAL = timedelta(hours=24)
#: First read of a later gguf-split shard with no size hint: such shards carry no tokenizer,
#: only ``split.*`` keys and the tensor infos (~64 bytes each, crawler/gguf.py), so 64 KiB holds
#: ~1000 tensors; the parser's estimate fetches the rest of a larger one in a second request.
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


@dataclass(frozen=True, slots=True)
class ScanSummary:
    """What one pass did. ``to_json`` gives the keys of DESIGN.md section 3 (and a few more)."""

    scan_id: int
    status: str
    repos_seen: int = 0
    repos_new: int = 0
    repos_changed: int = 0
    repos_unchanged: int = 0
    quants_analysed: int = 0
    files_analysed: int = 0
    requests: int = 0
    bytes_fetched: int = 0
    errors: int = 0
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
            "repos_seen": self.repos_seen,
            "repos_new": self.repos_new,
            "repos_changed": self.repos_changed,
            "repos_unchanged": self.repos_unchanged,
            "quants_analysed": self.quants_analysed,
            "files_analysed": self.files_analysed,
            "requests": self.requests,
            "bytes_fetched": self.bytes_fetched,
            "header_reads": self.header_reads,
            "header_bytes": self.header_bytes,
            "errors": self.errors,
        }


def error_kind(exc: BaseException, *, during: str = "read") -> str:
    """The ``scan_errors.kind`` of an exception (see ``catalog/tables.py`` ScanError).

    ``during`` is ``"list"`` for the tree listing (a missing repo there has vanished) or
    ``"read"`` for a header read.
    """
    text = str(exc).lower()
    if isinstance(exc, HubBudgetExhausted):
        return "budget"
    if isinstance(exc, HubRateLimited):
        return "http_429"
    if isinstance(exc, HubGated):
        return "gated"
    if isinstance(exc, HubNotFound):
        if text.startswith("revision not found"):
            return "changed"
        if during == "list":
            # Listed a moment ago, now 404 (or, anonymously, 401: the Hub answers the same for
            # deleted and private repos, hub._map_error): gone from public view either way.
            return "vanished"
        return "private" if "private" in text else "not_found"
    if isinstance(exc, _ContentChanged) or "changed" in text:
        return "changed"
    if isinstance(exc, HubUnavailable):
        for marker, kind in (
            ("http 5", "http_5xx"),
            ("http 429", "http_429"),
            ("timeout", "timeout"),
            ("too slow", "timeout"),
            # httpcore: a body shorter than Content-Length ("peer closed connection without
            # sending complete message body") is a RemoteProtocolError.
            ("remoteprotocolerror", "truncated"),
            ("connection", "reset"),
            ("session closed", "reset"),
            ("short read", "truncated"),
            ("content-range", "range_ignored"),
        ):
            if marker in text:
                return kind
        return "other"
    if isinstance(exc, GGUFError):
        return "malformed_gguf"
    if isinstance(exc, HubError):
        return "http_5xx" if "http 5" in text else "other"
    return "other"


class _ContentChanged(HubError):
    """The bytes served are not the ones the tree listed (re-upload during the crawl)."""


@dataclass(slots=True)
class _Counters:
    repos_seen: int = 0
    repos_new: int = 0
    repos_changed: int = 0
    repos_unchanged: int = 0
    quants_analysed: int = 0
    files_analysed: int = 0
    errors: int = 0
    header_reads: int = 0
    header_bytes_fetched: int = 0
    header_bytes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, **deltas: int) -> None:
        with self.lock:
            for key, value in deltas.items():
                setattr(self, key, getattr(self, key) + value)


def _utc(value: datetime | None) -> datetime | None:
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
        last_modified=_utc(listing.last_modified),
        created_at=_utc(listing.created_at),
        author=listing.author or listing.repo_id.split("/", 1)[0],
        private=listing.private,
        gated=listing.gated,
        downloads=listing.downloads,
        likes=listing.likes,
        base_model=base[0] if base else None,
        tags=listing.tags,
        card_data=card or None,
    )


def _cursor_key(authors: Sequence[str], searches: Sequence[str]) -> str:
    query = json.dumps({"authors": sorted(authors), "searches": sorted(searches)})
    return hashlib.sha256(query.encode("utf-8")).hexdigest()[:16]


def _is_later_shard(f: GroupedFile) -> bool:
    return f.kind == FileKind.SHARD and (f.shard_index or 1) > 1


def _gguf_base_model(header: GGUFHeader) -> str | None:
    # convert_hf_to_gguf.py writes general.base_model.{i}.repo_url for HF sources; cards copied
    # by re-uploaders (QuantFactory) can be wrong, so the file's own key wins (DESIGN.md 2).
    url = header.metadata.get("general.base_model.0.repo_url")
    if isinstance(url, str):
        for prefix in ("https://huggingface.co/", "http://huggingface.co/"):
            if url.startswith(prefix):
                rest = url[len(prefix) :].strip("/")
                if rest.count("/") == 1:
                    return rest
    return None


def analyse_quant(
    repo_id: str,
    revision: str | None,
    group: QuantGroup,
    shards: Sequence[AnalysedShard],
    repo_files: Sequence[str],
) -> QuantAnalysis:
    """Profile and memory coefficients of one quant from its shards' headers (pure)."""
    from crawler.fit import coefficients
    from crawler.profile import build_profile, merge_headers

    headers = [s.header for s in shards]
    header = headers[0] if len(headers) == 1 else merge_headers(headers)
    profile = build_profile(
        header, file_name=group.path, repo_id=repo_id, repo_files=tuple(repo_files)
    )
    # The catalog stores what the file is, not how this pass fetched it (bytes_fetched and
    # requests stay None): the same content gives the same row whichever pass read it.
    profile_json = profile.to_json(
        source=f"{repo_id}/{group.path}",
        revision=revision,
        size_bytes=group.size_bytes,
        header_bytes=sum(s.header_bytes for s in shards),
    )
    try:
        coeff = coefficients(header)
        memory = MemoryRecord(
            status=str(getattr(coeff, "status", "ok")),
            reason=getattr(coeff, "reason", None),
            weights_bytes=getattr(coeff, "weights_bytes", None),
            mtp_weights_bytes=getattr(coeff, "mtp_weights_bytes", None),
            expert_bytes=getattr(coeff, "expert_bytes", None),
            host_bytes=getattr(coeff, "host_bytes", None),
            kv_bytes_per_token_f16=getattr(coeff, "kv_bytes_per_token_f16", None),
            fixed_bytes_f16=getattr(coeff, "fixed_bytes_f16", None),
            coefficients=coeff.to_json(),
        )
    except QuantsError as exc:
        memory = MemoryRecord(status="unknown", reason=str(exc))
    file_type = headers[0].metadata.get("general.file_type")
    return QuantAnalysis(
        profile=profile_json,
        memory=memory,
        shards=tuple(shards),
        base_model=_gguf_base_model(headers[0]),
        file_type=file_type if isinstance(file_type, int) else None,
    )


class _Pass:
    """State of one run_once call: counters, pools, the repos handled."""

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
        self.counts = _Counters()
        self.start_stats = (hub.stats.requests, hub.stats.bytes_fetched, hub.stats.range_ignored)
        self.handled: set[str] = set()
        self.touch: list[RepoMeta] = []
        self.write_lock = threading.Lock()
        self.budget_spent = False
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
        c = self.counts
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
                store.record_errors(self.catalog, self.scan_id, errors)

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
        if stored is not None and stored.done and stored.sha == meta.sha:
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
            self.slots.release()
            return
        self.counts.add(**{"repos_new" if stored is None else "repos_changed": 1})
        try:
            self.process(meta, stored)
        except (ConfigError, CatalogError):
            raise
        except Exception as exc:  # recorded; one repo never aborts the pass (STYLE.md 4)
            logger.exception("crawling %s failed", meta.repo_id)
            self.record([_err("other", f"{type(exc).__name__}: {exc}", meta.repo_id)])
        finally:
            self.slots.release()
            self.progress.advance(meta.repo_id, self.crawl_counts())

    # -- one repo -------------------------------------------------------------------------------

    def process(self, meta: RepoMeta, stored: StoredRepo | None) -> None:
        """List, group, read and write one repo (runs in a repo worker thread)."""
        repo_id = meta.repo_id
        if meta.sha is None:
            self._write(RepoWrite(meta, None, errors=(_err("other", "no sha", repo_id),)))
            return
        try:
            files = self.hub.list_files(repo_id, meta.sha)
        except (ConfigError, CatalogError):
            raise
        except HubError as exc:
            kind = error_kind(exc, during="list")
            self._note_budget(exc)
            vanished = kind == "vanished"
            self._write(
                RepoWrite(meta, None, vanished=vanished, errors=(_err(kind, exc, repo_id),))
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
        analyses: dict[str, QuantAnalysis] = {}
        repo_files = [f.path for f in layout.files]
        for group in todo:
            got = [shards.get(f.path) for f in group.header_files]
            if any(s is None for s in got):
                continue
            try:
                analysis = analyse_quant(
                    repo_id, meta.sha, group, [s for s in got if s is not None], repo_files
                )
                if analysis.base_model is None and meta.base_model is not None:
                    analysis = replace(analysis, base_model=meta.base_model)
                analyses[group.path] = analysis
            except (ConfigError, CatalogError):
                raise
            except Exception as exc:  # a bug in a rule must not stop the crawl; it is recorded
                logger.exception("analysing %s/%s failed", repo_id, group.path)
                kind = "malformed_gguf" if isinstance(exc, GGUFError) else "other"
                errors.append(_err(kind, f"{type(exc).__name__}: {exc}", repo_id, group.path))
        self.counts.add(quants_analysed=len(analyses))
        self._write(RepoWrite(meta, layout, analyses, complete=not errors, errors=tuple(errors)))

    def _write(self, w: RepoWrite) -> None:
        self.counts.add(errors=len(w.errors))
        with self.write_lock:
            store.write_repo(self.catalog, self.scan_id, w)

    def _note_budget(self, exc: BaseException) -> None:
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
        """Read every header file of ``todo``: probes first where no size hint is known."""
        hints = _hints(stored)
        jobs = [f for q in todo for f in q.header_files]
        # Part 1 of a byte-concatenated file: its tensor offsets run into the later parts.
        sizes = {f.path: q.size_bytes for q in todo for f in q.files if f.kind == FileKind.PART}
        probes: list[GroupedFile] = []
        for later in (False, True):
            if hints.get(later) is None:
                probe = next((f for f in jobs if _is_later_shard(f) == later), None)
                if probe is not None:
                    probes.append(probe)
        out: dict[str, AnalysedShard] = {}
        for batch in (probes, [f for f in jobs if f not in probes]):
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
                    self._note_budget(exc)
                    errors.append(_err(error_kind(exc), exc, meta.repo_id, f.path))
                    continue
                out[f.path] = shard
                later = _is_later_shard(f)
                hints[later] = max(hints.get(later) or 0, shard.header_bytes)
        return out

    def _read_one(
        self, meta: RepoMeta, f: GroupedFile, hint: int | None, file_size: int
    ) -> AnalysedShard:
        from crawler.gguf import read_header

        assert meta.sha is not None
        if self.budget_spent:
            raise HubBudgetExhausted("budget spent", repo_id=meta.repo_id)
        reader = self.hub.range_reader(meta.repo_id, f.path, meta.sha)
        tally = [0, 0]

        def read_at(offset: int, length: int) -> bytes:
            data = reader(offset, length)
            tally[0] += 1
            tally[1] += len(data)
            return data

        try:
            header = read_header(
                read_at,
                file_size=file_size,
                max_header_bytes=self.settings.max_header_bytes,
                size_hint=hint,
                # A later shard carries no tokenizer: tensor infos only (~70 bytes each).
                first_read=COLD_SHARD_FIRST_READ if hint is None and _is_later_shard(f) else None,
                source=f"{meta.repo_id}/{f.path}",
            )
        finally:
            self.counts.add(header_reads=tally[0], header_bytes_fetched=tally[1])
        etag = reader.etag
        if etag and len(f.content_key) == 64 and etag != f.content_key:
            raise _ContentChanged(
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


def _err(kind: str, message: object, repo_id: str | None, path: str | None = None) -> ErrorRecord:
    return ErrorRecord(kind=kind, message=str(message), repo_id=repo_id, path=path)


def run_once(
    settings: Settings,
    *,
    hub: ScanHub | None = None,
    catalog: Catalog | None = None,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    trigger: str = "manual",
    authors: Sequence[str] | None = None,
    searches: Sequence[str] | None = None,
    limit: int | None = None,
    full: bool | None = None,
) -> ScanSummary:
    """Run one crawl pass and return its summary.

    ``authors``/``searches`` choose the listings (both None: the default author list and search
    terms of ``crawler.hub``). ``limit`` caps the repos listed. ``full`` forces (True) or
    forbids (False) a full listing; None runs one when the last is older than
    :data:`REFRESH_INTERVAL` and otherwise lists only what changed since the watermark.
    ``stop`` is checked between repos: the repos in flight finish and the scan is marked
    ``interrupted``. Raises only ConfigError and CatalogError; every other failure is recorded.
    """
    from crawler.catalog import Catalog as _Catalog

    progress = progress or NullProgress()
    stop = stop or threading.Event()
    if authors is None and searches is None:
        from crawler.hub import DEFAULT_AUTHORS, DEFAULT_SEARCH_TERMS

        authors, searches = DEFAULT_AUTHORS, DEFAULT_SEARCH_TERMS
    authors, searches = tuple(authors or ()), tuple(searches or ())
    own_catalog = catalog is None
    if catalog is None:
        catalog = _Catalog.open(settings.resolved_db_url)
    own_hub = hub is None
    if hub is None:
        from crawler.hub import HubClient

        client: ScanHub = HubClient(settings)
        hub = client
    try:
        scan_id = store.start_scan(
            catalog,
            trigger=trigger,
            endpoint=settings.hf_endpoint,
            params={
                "authors": list(authors),
                "searches": list(searches),
                "limit": limit,
                "concurrency": settings.concurrency,
            },
        )
        state = _Pass(settings, hub, catalog, scan_id, progress, stop)
        try:
            summary = _run(state, authors, searches, limit, full)
        except BaseException as exc:
            state.stop.set()
            try:
                state.shutdown()
            except BaseException:
                logger.debug("shutdown after failure also failed", exc_info=True)
            store.finish_scan(
                catalog, scan_id, _totals(state), status="failed", message=str(exc)[:500]
            )
            raise
        finally:
            progress.finish()
        store.finish_scan(
            catalog, scan_id, _totals(state), status=summary.status, message=summary.message
        )
        return summary
    finally:
        if own_hub:
            close = getattr(hub, "close", None)
            if callable(close):
                close()
        if own_catalog:
            catalog.close()


def _totals(p: _Pass) -> ScanTotals:
    c = p.counts
    stats = p.hub.stats
    return ScanTotals(
        repos_seen=c.repos_seen,
        repos_new=c.repos_new,
        repos_changed=c.repos_changed,
        repos_unchanged=c.repos_unchanged,
        quants_analysed=c.quants_analysed,
        files_analysed=c.files_analysed,
        requests=stats.requests - p.start_stats[0],
        bytes_fetched=stats.bytes_fetched - p.start_stats[1],
        errors=c.errors,
    )


def _run(
    p: _Pass,
    authors: Sequence[str],
    searches: Sequence[str],
    limit: int | None,
    full: bool | None,
) -> ScanSummary:
    key = _cursor_key(authors, searches)
    now = datetime.now(UTC)
    watermark = _parse_dt(store.get_state(p.catalog, f"watermark:{key}"))
    last_full = _parse_dt(store.get_state(p.catalog, f"full_listing:{key}"))
    if full is None:
        full = watermark is None or last_full is None or now - last_full > REFRESH_INTERVAL
    since = None if full or watermark is None else watermark - OVERLAP
    p.progress.start(None)
    newest: datetime | None = None
    listed = 0
    complete = True
    try:
        for listing in p.hub.discover(authors=authors, searches=searches, since=since, limit=limit):
            if p.stop.is_set():
                complete = False
                break
            lm = _utc(listing.last_modified)
            if lm is not None and (newest is None or lm > newest):
                newest = lm
            listed += 1
            p.handle(listing)
    except (ConfigError, CatalogError):
        raise
    except HubError as exc:
        complete = False
        p._note_budget(exc)
        p.record([_err(error_kind(exc, during="list"), f"listing failed: {exc}", None)])
    if limit is not None and listed >= limit:
        complete = False
    p.wait()
    # Retry repos a previous pass left unfinished (errors, a kill) that this listing did not
    # bring up again: their lastModified may be behind the watermark.
    if not p.stop.is_set():
        for repo_id in store.pending_repo_ids(p.catalog, exclude=p.handled):
            if p.stop.is_set():
                break
            try:
                listing = p.hub.repo_info(repo_id)
            except (ConfigError, CatalogError):
                raise
            except HubError as exc:
                p._note_budget(exc)
                kind = error_kind(exc, during="list")
                if kind == "vanished":
                    store.mark_repos_vanished(p.catalog, seen=(), authors=None, only=[repo_id])
                p.record([_err(kind, exc, repo_id)])
                continue
            p.handle(listing)
    p.shutdown()
    p.flush_touch()
    stopped = p.stop.is_set()
    if complete and not stopped:
        if newest is not None and (watermark is None or newest > watermark):
            store.set_state(p.catalog, f"watermark:{key}", newest.isoformat())
        if full:
            store.set_state(p.catalog, f"full_listing:{key}", now.isoformat())
            scope: Sequence[str] | None = authors if authors else None
            if authors or not searches:
                gone = store.mark_repos_vanished(p.catalog, seen=p.handled, authors=scope)
                if gone:
                    logger.info("%d repos vanished from the Hub", len(gone))
    stats = p.hub.stats
    ignored = stats.range_ignored - p.start_stats[2]
    if ignored:
        # Served correctly by streaming only the prefix; recorded so a bad mirror is visible.
        p.record(
            [
                _err(
                    "range_ignored",
                    f"{ignored} ranged reads were answered with the whole file",
                    None,
                )
            ]
        )
    c = p.counts
    message = None
    if p.budget_spent:
        message = "stopped: the request/byte budget is spent"
    elif stopped:
        message = "stopped on request; unfinished repos are retried by the next pass"
    return ScanSummary(
        scan_id=p.scan_id,
        status="interrupted" if stopped else "ok",
        repos_seen=c.repos_seen,
        repos_new=c.repos_new,
        repos_changed=c.repos_changed,
        repos_unchanged=c.repos_unchanged,
        quants_analysed=c.quants_analysed,
        files_analysed=c.files_analysed,
        requests=stats.requests - p.start_stats[0],
        bytes_fetched=stats.bytes_fetched - p.start_stats[1],
        errors=c.errors,
        header_reads=c.header_reads,
        header_bytes_fetched=c.header_bytes_fetched,
        header_bytes=c.header_bytes,
        message=message,
    )


def _parse_dt(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return _utc(datetime.fromisoformat(value))
    except ValueError:
        return None
