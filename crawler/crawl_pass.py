"""One crawl pass as every caller runs it: take the crawl lock, scan, then evaluate the watches.

``quants crawl``, ``quants schedule`` (through :class:`crawler.scheduler.CrawlJob`) and an
on-demand look-up started by a search (:func:`crawler.ondemand.ensure_model`) all run
:func:`locked_pass`, so the lock, the scan record's ``trigger`` and the watches after it are the
same whoever starts the pass. The watches run the search through a
:data:`~crawler.watch.SearchFn` that the caller passes in: the search parser belongs to the CLI,
which the library never imports. :func:`configure_logging` is the logging set-up of both commands.
"""

from __future__ import annotations

import logging
import logging.handlers
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawler.errors import ConfigError
from crawler.lock import crawl_lock

if TYPE_CHECKING:
    from crawler.catalog import Catalog
    from crawler.config import Settings
    from crawler.progress import Progress
    from crawler.repo_scan import ScanHub
    from crawler.scan import ScanSummary
    from crawler.watch import SearchFn

logger = logging.getLogger(__name__)

__all__ = [
    "AfterScanFn",
    "CrawlFn",
    "CrawlScope",
    "configure_logging",
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
        from crawler.scan import run_once

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


def watch_step(search: SearchFn) -> AfterScanFn:
    """Evaluate the watches with ``search`` after a scan (skipped when the scan failed)."""

    def after(settings: Settings, summary: Any) -> None:
        from crawler.watch import evaluate_after_scan

        evaluate_after_scan(settings, summary, search=search)

    return after


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
    search: SearchFn,
    scope: CrawlScope | None = None,
    trigger: str = "manual",
    command: str = "quants crawl",
    full: bool | None = None,
    stop: threading.Event | None = None,
    progress: Progress | None = None,
    verify_imported: bool = False,
) -> ScanSummary:
    """Run one whole pass: lock, scan ``scope`` (recorded with ``trigger``: "manual",
    "schedule", "search"), evaluate the watches with ``search``; return the scan's summary.

    Raises LockHeld when another pass runs, and what ``scan.run_once`` raises.
    """
    from crawler.progress import NullProgress

    summary: ScanSummary = locked_pass(
        settings,
        command=command,
        scan=scan_step(
            scope or CrawlScope(), trigger=trigger, full=full, verify_imported=verify_imported
        ),
        after_scan=watch_step(search),
        stop=stop or threading.Event(),
        progress=progress or NullProgress(),
    )
    return summary


def configure_logging(
    settings: Settings, *, service: bool = False, log_file: Path | None = None
) -> None:
    """The logging of a crawl: the HF token redacted from every line.

    A one-off ``quants crawl`` (``service=False``) logs to stderr only when QUANTS_LOG_LEVEL asks
    for more than warnings (e.g. DEBUG/INFO: one line per Hub request). A service
    (``quants schedule``, ``service=True``) always logs to stderr, and to ``log_file`` if given
    (reopened when logrotate moves it), with timestamps; its own lines are at INFO whatever the
    level says, so a nightly log shows each run.
    """
    from crawler.redact import redact_logs

    if service:
        _configure_service_logging(settings.log_level, log_file)
    elif settings.log_level != "WARNING":
        logging.basicConfig(level=settings.log_level, format="%(levelname)s %(name)s: %(message)s")
    redact_logs(settings.hf_token)


def _configure_service_logging(level: str, log_file: Path | None) -> None:
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if log_file is not None:
        try:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            handlers.append(logging.handlers.WatchedFileHandler(log_file, encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot write the log file {log_file}: {exc.strerror}") from None
    root = logging.getLogger()
    for handler in handlers:
        handler.setFormatter(fmt)
        root.addHandler(handler)
    numeric = logging.getLevelName(level.upper())
    root.setLevel(numeric if isinstance(numeric, int) else logging.WARNING)
    for name in ("crawler.scheduler", "crawler.watch", "apscheduler"):
        named = logging.getLogger(name)
        named.setLevel(min(logging.INFO, root.level))
