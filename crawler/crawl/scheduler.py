"""apscheduler wiring for quants schedule: the crawl pass on a cron trigger, in the foreground.

Only wiring (the pass is run.py); SIGTERM/SIGINT finish the repo in progress, then exit.
Details: docs/internals/crawl.md#scheduler
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from crawler.base.errors import ConfigError, LockHeld, QuantsError
from crawler.crawl.lock import crawl_lock
from crawler.crawl.run import (
    AfterScanFn,
    CrawlFn,
    CrawlScope,
    locked_pass,
    scan_step,
    watch_step,
)

if TYPE_CHECKING:
    from apscheduler.triggers.base import BaseTrigger

    from crawler.base.config import Settings
    from crawler.crawl.progress import CrawlCounts

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_CRON",
    "CrawlJob",
    "LoggingProgress",
    "ScheduleOptions",
    "build_trigger",
    "run_scheduler",
]

DEFAULT_CRON = "0 3 * * *"

#: Repos with imported analyses each scheduled pass re-reads itself (oldest imports first):
#: over a few weeks of nightly passes every pulled analysis is checked against the Hub.
VERIFY_IMPORTED_SAMPLE = 25


@dataclass(frozen=True, slots=True)
class ScheduleOptions:
    """How ``quants schedule`` runs the pass."""

    cron: str = DEFAULT_CRON
    # IANA zone name; None = the machine's local zone (apscheduler uses tzlocal).
    timezone: str | None = None
    run_now: bool = False
    # Spread load on the Hub: nightly crawls of many users should not all start at 03:00:00.
    jitter_s: int = 300
    # A run missed by up to this much (machine asleep, process paused) still runs once.
    misfire_grace_s: int = 3600


def build_trigger(options: ScheduleOptions) -> BaseTrigger:
    """The apscheduler ``CronTrigger`` for ``options``; ConfigError for a bad cron or zone."""
    from apscheduler.triggers.cron import CronTrigger

    from crawler.crawl.cron import parse_cron

    if options.jitter_s < 0 or options.misfire_grace_s < 1:
        raise ConfigError("jitter must be >= 0 and the misfire grace time >= 1 second")
    spec = parse_cron(options.cron)
    return CronTrigger(
        timezone=_zone(options.timezone),
        jitter=options.jitter_s or None,
        **spec.apscheduler_fields(),
    )


def _zone(name: str | None) -> Any:
    if name is None:
        from tzlocal import get_localzone

        return get_localzone()
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f"unknown time zone {name!r} (use an IANA name like Europe/Berlin)"
        ) from None


class LoggingProgress:
    """A Progress that writes log lines instead of drawing a bar.

    One INFO line at the start and the end, and at most one every ``interval_s`` in between, so
    a nightly log stays readable; every repo at DEBUG.
    """

    def __init__(self, *, interval_s: float = 60.0) -> None:
        self._interval_s = interval_s
        self._total: int | None = None
        self._last = 0.0
        self._started = 0.0
        self._counts: CrawlCounts | None = None

    def start(self, total: int | None) -> None:
        """Log the start of the pass."""
        self._total = total
        self._started = self._last = time.monotonic()
        logger.info("crawl started%s", f" ({total} repos)" if total is not None else "")

    def advance(self, label: str, counts: CrawlCounts) -> None:
        """Log progress at most once per interval (DEBUG for every repo)."""
        self._counts = counts
        logger.debug("repo done: %r", label)
        now = time.monotonic()
        if now - self._last >= self._interval_s:
            self._last = now
            logger.info("crawl progress: %s", self._describe())

    def finish(self) -> None:
        """Log the totals."""
        elapsed = time.monotonic() - self._started if self._started else 0.0
        logger.info("crawl ended after %.1f s: %s", elapsed, self._describe())

    def _describe(self) -> str:
        c = self._counts
        if c is None:
            return "no repos"
        of = f"/{self._total}" if self._total is not None else ""
        return (
            f"repos {c.repos}{of}, files {c.files}, bytes {c.bytes_fetched}, "
            f"requests {c.requests}, errors {c.errors}"
        )


class CrawlJob:
    """The scheduled job: one locked_pass (lock, scan, watches).

    A pass that finds the lock taken (a manual ``quants crawl`` is running) is skipped with a
    warning; a failed pass is logged and the scheduler carries on with the next one. ``crawl``
    defaults to a scan of the default scope; ``after_scan`` to the watches.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        stop: threading.Event,
        crawl: CrawlFn | None = None,
        after_scan: AfterScanFn = watch_step,
    ) -> None:
        self.settings = settings
        self.stop = stop
        self._crawl = crawl or scan_step(
            CrawlScope(),
            trigger="schedule",
            verify_imported=True,
            verify_sample=VERIFY_IMPORTED_SAMPLE,
        )
        self._after_scan = after_scan
        self.runs = 0
        self.skipped = 0
        self.last_summary: Any = None

    def __call__(self) -> None:
        """Run one pass (apscheduler calls this from its worker thread)."""
        if self.stop.is_set():
            return
        try:
            locked_pass(
                self.settings,
                command="quants schedule",
                scan=self._counted_scan,
                after_scan=self._logged_after_scan,
                stop=self.stop,
                progress=LoggingProgress(),
            )
        except LockHeld as exc:
            self.skipped += 1
            logger.warning("scheduled crawl skipped: %s", exc)
        except QuantsError as exc:
            logger.error("scheduled crawl failed: %s", exc)

    def _counted_scan(self, settings: Settings, stop: threading.Event, progress: Any) -> Any:
        self.runs += 1
        return self._crawl(settings, stop, progress)

    def _logged_after_scan(self, settings: Settings, summary: Any) -> None:
        self.last_summary = summary
        logger.info("scheduled crawl done: %s", summary)
        try:
            self._after_scan(settings, summary)
        except QuantsError as exc:
            logger.error("evaluating watches failed: %s", exc)


@contextmanager
def _signals_set_stop(stop: threading.Event) -> Iterator[None]:
    """SIGTERM/SIGINT set ``stop``; a second one restores the default action and re-sends it."""
    if threading.current_thread() is not threading.main_thread():
        # Signal handlers can only be installed from the main thread (tests drive ``stop``).
        yield
        return

    def handle(signum: int, _frame: Any) -> None:
        if stop.is_set():
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
            return
        logger.warning(
            "%s: finishing the repo in progress, then exiting (send it again to abort now)",
            signal.Signals(signum).name,
        )
        stop.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run_scheduler(
    settings: Settings,
    options: ScheduleOptions,
    *,
    trigger: BaseTrigger | None = None,
    stop: threading.Event | None = None,
    job: Callable[[], None] | None = None,
    scope: CrawlScope | None = None,
) -> None:
    """Run scheduled crawl passes in the foreground until ``stop`` is set (or SIGTERM/SIGINT).

    ``trigger`` and ``job`` default to the cron trigger of ``options`` and a CrawlJob
    crawling ``scope`` and running the watches; tests inject a short trigger
    instead of waiting for the wall clock.
    Raises LockHeld when another scheduler already runs on this catalog.

    apscheduler's BackgroundScheduler runs the job in its thread pool while this thread waits
    on ``stop``: the signal handler then only sets an event (safe at any point), and shutdown
    waits for the pass in progress to finish its repo.
    """
    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MISSED
    from apscheduler.schedulers.background import BackgroundScheduler

    stop = stop or threading.Event()
    trigger = trigger or build_trigger(options)
    if job is None:
        scan = scan_step(
            scope or CrawlScope(),
            trigger="schedule",
            verify_imported=True,
            verify_sample=VERIFY_IMPORTED_SAMPLE,
        )
        job = CrawlJob(settings, stop=stop, crawl=scan)
    with crawl_lock(settings, command="quants schedule", name="schedule"):
        from crawler.crawl.catalogs import open_catalog

        # Fail now, not at 03:00, on a catalog that cannot be opened (and migrate it once).
        open_catalog(settings.resolved_db_url).close()
        scheduler = BackgroundScheduler(timezone=_zone(options.timezone))
        extra: dict[str, Any] = {}
        if options.run_now:
            extra["next_run_time"] = datetime.now(scheduler.timezone)
        scheduled = scheduler.add_job(
            job,
            trigger,
            id="crawl",
            name="crawl pass",
            coalesce=True,
            max_instances=1,
            misfire_grace_time=options.misfire_grace_s,
            **extra,
        )

        def on_event(event: Any) -> None:
            if event.code == EVENT_JOB_MISSED:
                logger.warning("a scheduled crawl was missed (past the misfire grace time)")
            logger.info("next crawl at %s", scheduled.next_run_time)

        scheduler.add_listener(on_event, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED)
        with _signals_set_stop(stop):
            scheduler.start()
            logger.info("scheduler started; next crawl at %s", scheduled.next_run_time)
            try:
                # A timed wait keeps the main thread responsive to signals on every platform.
                while not stop.wait(1.0):
                    pass
            finally:
                logger.info("scheduler stopping; waiting for the crawl in progress to end")
                scheduler.shutdown(wait=True)
    logger.info("scheduler stopped")
