"""One crawl pass, run_once: discover, list files, group, read headers, analyse, store.

One repo, one transaction; a failed repo is recorded and retried; a kill loses only repos in flight.
Details: docs/internals/crawl.md#scan
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from crawler.base.errors import CatalogError, ConfigError, HubError, HubUnavailable
from crawler.catalog import scans, store
from crawler.catalog.scans import ScanSummary
from crawler.crawl.errors import error_kind, error_record
from crawler.crawl.progress import NullProgress, Progress
from crawler.crawl.repo import RepoScanner, ScanHub, as_utc

if TYPE_CHECKING:
    from crawler.base.config import Settings
    from crawler.catalog import Catalog

logger = logging.getLogger(__name__)

__all__ = ["OVERLAP", "REFRESH_INTERVAL", "ScanHub", "ScanSummary", "error_kind", "run_once"]

#: The incremental listing (HfApi.list_models sorted by lastModified) stops at the previous
#: watermark minus this: a repo committed while the last pass was listing may sort just behind it.
OVERLAP = timedelta(hours=1)
#: A full listing (no watermark) runs at least this often: it refreshes downloads/likes of
#: unchanged repos, finds repos the watermark missed, and marks vanished repos.
REFRESH_INTERVAL = timedelta(hours=24)


def _cursor_key(
    authors: Sequence[str], searches: Sequence[str], base_models: Sequence[str] = ()
) -> str:
    scope: dict[str, list[str]] = {"authors": sorted(authors), "searches": sorted(searches)}
    if base_models:  # absent otherwise, so the cursors of existing catalogs keep their keys
        scope["base_models"] = sorted(base_models)
    query = json.dumps(scope)
    return hashlib.sha256(query.encode("utf-8")).hexdigest()[:16]


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
    base_models: Sequence[str] = (),
) -> ScanSummary:
    """Run one crawl pass and return its summary.

    ``authors``/``searches`` choose the listings (both None: the default author list and search
    terms of ``crawler.hub``). ``limit`` caps the repos listed. ``full`` forces (True) or
    forbids (False) a full listing; None runs one when the last is older than
    REFRESH_INTERVAL and otherwise lists only what changed since the watermark.
    ``stop`` is checked between repos: the repos in flight finish and the scan is marked
    ``interrupted``. ``base_models`` adds one listing per base model (every GGUF repo whose
    ``base_model:quantized:<id>`` tag names it). A pass whose every listing failed before any
    repo was reached ends ``failed`` with the cause in ``message`` (it reached nothing).
    Raises only ConfigError and CatalogError; every other failure is recorded.
    """
    from crawler.crawl.catalogs import open_catalog as _open_catalog

    progress = progress or NullProgress()
    stop = stop or threading.Event()
    default_scope = authors is None and searches is None
    if default_scope:
        from crawler.hub import DEFAULT_AUTHORS, DEFAULT_SEARCH_TERMS

        authors, searches = DEFAULT_AUTHORS, DEFAULT_SEARCH_TERMS
    authors, searches = tuple(authors or ()), tuple(searches or ())
    own_catalog = catalog is None
    if catalog is None:
        catalog = _open_catalog(settings.resolved_db_url)
    # The listing cursor follows the scope asked for; the default crawl's base models (those
    # the catalog holds, which grow) share the default scope's cursor.
    key_bases = tuple(base_models)
    if default_scope:
        from crawler.catalog.base_models import crawl_base_models

        base_models = crawl_base_models(catalog, (*settings.base_models, *base_models))
    own_hub = hub is None
    if hub is None:
        from crawler.hub import HubClient

        client: ScanHub = HubClient(settings, sleep=_interruptible_sleep(stop))
        hub = client
    try:
        scan_id = scans.start_scan(
            catalog,
            trigger=trigger,
            endpoint=settings.hf_endpoint,
            params={
                "authors": list(authors),
                "searches": list(searches),
                "base_models": list(base_models),
                "limit": limit,
                "concurrency": settings.concurrency,
            },
        )
        state = RepoScanner(settings, hub, catalog, scan_id, progress, stop)
        try:
            summary = _run(state, authors, searches, limit, full, tuple(base_models), key_bases)
        except BaseException as exc:
            state.stop.set()
            try:
                state.shutdown()
            except BaseException:
                logger.debug("shutdown after failure also failed", exc_info=True)
            # Ctrl-C: the repos in flight were finished above, as for a stop request.
            interrupted = isinstance(exc, KeyboardInterrupt)
            scans.finish_scan(
                catalog,
                scan_id,
                _totals(state),
                status="interrupted" if interrupted else "failed",
                message="interrupted by the user" if interrupted else str(exc)[:500],
            )
            raise
        finally:
            progress.finish()
        scans.finish_scan(
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


def _totals(p: RepoScanner) -> ScanSummary:
    """The scanner's counters with this pass's share of the Hub client's requests and bytes."""
    stats = p.hub.stats
    return dataclasses.replace(
        p.counts.value,
        requests=stats.requests - p.start_stats[0],
        bytes_fetched=stats.bytes_fetched - p.start_stats[1],
    )


def _run(
    p: RepoScanner,
    authors: Sequence[str],
    searches: Sequence[str],
    limit: int | None,
    full: bool | None,
    base_models: Sequence[str] = (),
    key_bases: Sequence[str] = (),
) -> ScanSummary:
    key = _cursor_key(authors, searches, key_bases)
    now = datetime.now(UTC)
    watermark = _parse_dt(scans.get_state(p.catalog, f"watermark:{key}"))
    last_full = _parse_dt(scans.get_state(p.catalog, f"full_listing:{key}"))
    if full is None:
        full = watermark is None or last_full is None or now - last_full > REFRESH_INTERVAL
    since = None if full or watermark is None else watermark - OVERLAP
    p.progress.start(None)
    newest: datetime | None = None
    listed = 0
    complete = True
    listing_error: HubError | None = None
    try:
        for listing in p.hub.discover(
            authors=authors, searches=searches, base_models=base_models, since=since, limit=limit
        ):
            if p.stop.is_set():
                complete = False
                break
            lm = as_utc(listing.last_modified)
            if lm is not None and (newest is None or lm > newest):
                newest = lm
            listed += 1
            p.handle(listing)
    except (ConfigError, CatalogError):
        raise
    except HubError as exc:
        complete = False
        listing_error = exc
        p.note_budget(exc)
        p.record([error_record(error_kind(exc, during="list"), f"listing failed: {exc}", None)])
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
                p.note_budget(exc)
                kind = error_kind(exc, during="list")
                if kind == "vanished":
                    store.mark_repos_vanished(p.catalog, seen=(), authors=None, only=[repo_id])
                p.record([error_record(kind, exc, repo_id)])
                continue
            p.handle(listing)
    p.shutdown()
    p.flush_touch()
    stopped = p.stop.is_set()
    if complete and not stopped:
        if newest is not None and (watermark is None or newest > watermark):
            scans.set_state(p.catalog, f"watermark:{key}", newest.isoformat(), forward_only=True)
        if full:
            scans.set_state(p.catalog, f"full_listing:{key}", now.isoformat(), forward_only=True)
            scope: Sequence[str] | None = authors if authors else None
            if authors or not (searches or base_models):
                gone = store.mark_repos_vanished(p.catalog, seen=p.handled, authors=scope)
                if gone:
                    logger.info("%d repos vanished from the Hub", len(gone))
    stats = p.hub.stats
    ignored = stats.range_ignored - p.start_stats[2]
    if ignored:
        # Served correctly by streaming only the prefix; recorded so a bad mirror is visible.
        p.record(
            [
                error_record(
                    "range_ignored",
                    f"{ignored} ranged reads were answered with the whole file",
                    None,
                )
            ]
        )
    message = None
    if listing_error is not None and not listed and not p.handled and not stopped:
        # Nothing was reached (DNS, connection refused, every listing failed): say so.
        return dataclasses.replace(
            _totals(p), status="failed", message=f"reached nothing: {listing_error}"
        )
    if p.budget_spent:
        message = "stopped: the request/byte budget is spent"
    elif stopped:
        message = "stopped on request; unfinished repos are retried by the next pass"
    return dataclasses.replace(
        _totals(p), status="interrupted" if stopped else "ok", message=message
    )


def _parse_dt(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return as_utc(datetime.fromisoformat(value))
    except ValueError:
        return None


def _interruptible_sleep(stop: threading.Event) -> Callable[[float], None]:
    """A retry/rate-limit wait that ends at once when the pass is stopped (SIGTERM in an outage).

    The request being retried then fails like any other; its repo is retried by the next pass.
    """

    def sleep(seconds: float) -> None:
        if stop.wait(seconds):
            raise HubUnavailable("crawl stopped while waiting to retry")

    return sleep
