"""One crawl pass as every caller runs it: take the crawl lock, scan, then evaluate the watches.

The same lock, trigger and watches whoever starts the pass (crawl, schedule, a search).
Details: docs/internals/crawl.md#run
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from crawler.crawl.lock import crawl_lock

if TYPE_CHECKING:
    from crawler.base.config import Settings
    from crawler.catalog import Catalog
    from crawler.crawl.progress import Progress
    from crawler.crawl.repo import ScanHub
    from crawler.crawl.scan import ScanSummary

logger = logging.getLogger(__name__)

__all__ = [
    "AfterScanFn",
    "CrawlFn",
    "CrawlScope",
    "crawl_pass",
    "locked_pass",
    "scan_step",
    "watch_step",
]

# The scan of a pass: (settings, stop event, progress) -> summary (whatever run_once returns).
CrawlFn = Callable[["Settings", threading.Event, "Progress"], Any]
# What runs after the scan, still under the lock: (settings, summary).
AfterScanFn = Callable[["Settings", Any], None]


@dataclass(frozen=True, slots=True)
class CrawlScope:
    """What a pass crawls (``quants crawl``'s ``--author``/``--search``/``--limit``).

    ``authors`` and ``searches`` both None: the crawler's default lists; both ``()``: every GGUF
    repo (``--all``).
    """

    authors: tuple[str, ...] | None = None
    searches: tuple[str, ...] | None = None
    limit: int | None = None
    #: Base models whose quantized children are listed too (an on-demand search's scope).
    base_models: tuple[str, ...] = ()

    def crawl_args(self) -> list[str]:
        """The same scope as ``quants crawl`` options (for a unit file or crontab)."""
        args: list[str] = []
        for author in self.authors or ():
            args += ["--author", author]
        for term in self.searches or ():
            args += ["--search", term]
        if self.limit is not None:
            args += ["--limit", str(self.limit)]
        return args


def scan_step(
    scope: CrawlScope,
    *,
    trigger: str = "manual",
    full: bool | None = None,
    hub: ScanHub | None = None,
    catalog: Catalog | None = None,
    verify_imported: bool = False,
    verify_sample: int | None = None,
) -> CrawlFn:
    """The scan of a pass (``scan.run_once`` over ``scope``, recorded with ``trigger``), through
    the caller's ``hub`` and ``catalog`` when it passes them.

    ``verify_imported``: first mark the repos holding imported analyses (at most
    ``verify_sample`` of them, oldest first; None: all) so the pass re-reads them itself
    (crawler.catalog.store.recheck_imported), even though their commit did not change.
    """

    def scan(settings: Settings, stop: threading.Event, progress: Progress) -> Any:
        from crawler.crawl.scan import run_once

        if verify_imported:
            from crawler.catalog import Catalog
            from crawler.catalog.store import recheck_imported

            if catalog is not None:
                marked = recheck_imported(catalog, sample=verify_sample)
            else:
                with Catalog.open(settings.resolved_db_url) as own:
                    marked = recheck_imported(own, sample=verify_sample)
            logger.info("re-reading %d repos with imported analyses", marked)

        return run_once(
            settings,
            hub=hub,
            catalog=catalog,
            progress=progress,
            stop=stop,
            trigger=trigger,
            authors=scope.authors,
            searches=scope.searches,
            limit=scope.limit,
            full=full,
            base_models=scope.base_models,
        )

    return scan


def watch_step(settings: Settings, summary: Any) -> None:
    """The AfterScanFn of every pass: evaluate the watches (skipped when the scan failed)."""
    from crawler.crawl.watch import evaluate_after_scan

    evaluate_after_scan(settings, summary)


def locked_pass(
    settings: Settings,
    *,
    command: str,
    scan: CrawlFn,
    after_scan: AfterScanFn,
    stop: threading.Event,
    progress: Progress,
) -> Any:
    """Under the crawl lock (LockHeld when another pass holds it): ``scan``, then ``after_scan``.

    The watches run under the lock too, so they see the catalog as this pass left it.
    """
    with crawl_lock(settings, command=command):
        summary = scan(settings, stop, progress)
        after_scan(settings, summary)
    return summary


def crawl_pass(
    settings: Settings,
    *,
    scope: CrawlScope | None = None,
    trigger: str = "manual",
    command: str = "quants crawl",
    full: bool | None = None,
    stop: threading.Event | None = None,
    progress: Progress | None = None,
    verify_imported: bool = False,
) -> ScanSummary:
    """Run one whole pass: lock, scan ``scope`` (recorded with ``trigger``: "manual",
    "schedule", "search"), evaluate the watches; return the scan's summary.

    Raises LockHeld when another pass runs, and what ``scan.run_once`` raises.
    """
    from crawler.crawl.progress import NullProgress

    summary: ScanSummary = locked_pass(
        settings,
        command=command,
        scan=scan_step(
            scope or CrawlScope(), trigger=trigger, full=full, verify_imported=verify_imported
        ),
        after_scan=watch_step,
        stop=stop or threading.Event(),
        progress=progress or NullProgress(),
    )
    return summary
