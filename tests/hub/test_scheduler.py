"""The scheduler: triggers, one instance at a time, the crawl lock, run-now, stop.

No test waits on a wall-clock cron: cron triggers are checked with a fixed "now", and the
running scheduler gets an injected short trigger.
"""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from apscheduler.triggers.interval import IntervalTrigger

from crawler.base.config import Settings
from crawler.base.errors import ConfigError, LockHeld
from crawler.crawl.lock import crawl_lock
from crawler.crawl.progress import CrawlCounts
from crawler.crawl.scheduler import (
    CrawlJob,
    LoggingProgress,
    ScheduleOptions,
    build_trigger,
    run_scheduler,
)
from tests.hub_emulator import HubEmulator


def _settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path, db_url=f"sqlite:///{tmp_path / 'catalog.sqlite'}")


def _run_in_background(target, *args, **kwargs) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def body() -> None:
        try:
            target(*args, **kwargs)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, errors


def _wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.02)


def test_cron_trigger_fires_at_the_local_time_of_its_zone() -> None:
    trigger = build_trigger(ScheduleOptions(cron="0 3 * * *", timezone="Europe/Berlin", jitter_s=0))
    now = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
    fire = trigger.get_next_fire_time(None, now)
    assert fire == datetime(2026, 7, 2, 3, 0, tzinfo=ZoneInfo("Europe/Berlin"))
    # Summer time: 03:00 in Berlin is 01:00 UTC.
    assert fire.astimezone(UTC) == datetime(2026, 7, 2, 1, 0, tzinfo=UTC)


def test_jitter_delays_within_its_bound() -> None:
    trigger = build_trigger(ScheduleOptions(cron="0 3 * * *", timezone="UTC", jitter_s=300))
    now = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
    base = datetime(2026, 7, 2, 3, 0, tzinfo=UTC)
    fires = {trigger.get_next_fire_time(None, now) for _ in range(50)}
    assert all(base <= f <= base + timedelta(seconds=300) for f in fires)
    assert len(fires) > 1  # it does jitter


@pytest.mark.parametrize(
    "options",
    [
        ScheduleOptions(cron="61 3 * * *"),
        ScheduleOptions(timezone="Mars/Olympus"),
        ScheduleOptions(jitter_s=-1),
        ScheduleOptions(misfire_grace_s=0),
    ],
)
def test_bad_options_are_config_errors(options: ScheduleOptions) -> None:
    with pytest.raises(ConfigError):
        build_trigger(options)


def test_scheduler_runs_the_job_on_an_injected_trigger_one_at_a_time(tmp_path: Path) -> None:
    stop = threading.Event()
    active = 0
    peak = 0
    runs = 0
    lock = threading.Lock()

    def job() -> None:
        nonlocal active, peak, runs
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.3)  # longer than the trigger's interval: max_instances must hold
        with lock:
            active -= 1
            runs += 1
            if runs >= 3:
                stop.set()

    thread, errors = _run_in_background(
        run_scheduler,
        _settings(tmp_path),
        ScheduleOptions(),
        trigger=IntervalTrigger(seconds=0.05),
        stop=stop,
        job=job,
    )
    thread.join(timeout=30)
    assert not thread.is_alive() and not errors
    assert runs >= 3
    assert peak == 1


def test_run_now_runs_at_once_despite_a_distant_cron(tmp_path: Path) -> None:
    stop = threading.Event()
    ran = threading.Event()

    def job() -> None:
        ran.set()
        stop.set()

    options = ScheduleOptions(cron="0 3 1 1 *", timezone="UTC", run_now=True)
    thread, errors = _run_in_background(
        run_scheduler, _settings(tmp_path), options, stop=stop, job=job
    )
    assert ran.wait(timeout=20)
    thread.join(timeout=20)
    assert not thread.is_alive() and not errors


def test_stop_waits_for_the_job_in_progress(tmp_path: Path) -> None:
    stop = threading.Event()
    started = threading.Event()
    finished = threading.Event()

    def job() -> None:
        started.set()
        # A crawl pass: checks stop between "repos", finishes the one in progress.
        while not stop.is_set():
            time.sleep(0.01)
        time.sleep(0.2)
        finished.set()

    options = ScheduleOptions(run_now=True, timezone="UTC")
    thread, errors = _run_in_background(
        run_scheduler, _settings(tmp_path), options, stop=stop, job=job
    )
    assert started.wait(timeout=20)
    stop.set()
    thread.join(timeout=20)
    assert not thread.is_alive() and not errors
    assert finished.is_set()  # run_scheduler returned only after the job ended


def test_second_scheduler_on_one_catalog_is_refused(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    holder = crawl_lock(settings, command="quants schedule", name="schedule")
    with holder, pytest.raises(LockHeld, match="quants schedule"):
        run_scheduler(settings, ScheduleOptions(), job=lambda: None)


def test_job_skips_while_a_manual_crawl_holds_the_lock(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _settings(tmp_path)
    calls: list[str] = []
    after: list[object] = []

    def crawl(s: Settings, stop: threading.Event, progress) -> str:
        calls.append("crawl")
        return "summary"

    job = CrawlJob(
        settings,
        stop=threading.Event(),
        crawl=crawl,
        after_scan=lambda s, summary: after.append(summary),
    )
    with crawl_lock(settings, command="quants crawl"), caplog.at_level(logging.WARNING):
        job()
    assert calls == [] and job.skipped == 1
    assert "scheduled crawl skipped" in caplog.text and "quants crawl" in caplog.text
    job()  # the manual crawl is over
    assert calls == ["crawl"] and after == ["summary"] and job.runs == 1


def test_job_holds_the_crawl_lock_while_crawling(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    seen: list[str] = []

    def crawl(s: Settings, stop: threading.Event, progress) -> None:
        try:
            crawl_lock(settings, command="quants crawl").acquire()
        except LockHeld as exc:
            seen.append(str(exc))

    CrawlJob(settings, stop=threading.Event(), crawl=crawl, after_scan=lambda s, x: None)()
    assert seen and "quants schedule" in seen[0]


def test_failed_crawl_is_logged_and_watches_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def crawl(s: Settings, stop: threading.Event, progress) -> None:
        raise ConfigError("bad endpoint")

    after: list[object] = []
    job = CrawlJob(
        _settings(tmp_path),
        stop=threading.Event(),
        crawl=crawl,
        after_scan=lambda s, x: after.append(x),
    )
    with caplog.at_level(logging.ERROR):
        job()
    assert "scheduled crawl failed: bad endpoint" in caplog.text
    assert after == []


def test_logging_progress_lines(caplog: pytest.LogCaptureFixture) -> None:
    progress = LoggingProgress(interval_s=0.0)
    with caplog.at_level(logging.INFO, logger="crawler.crawl.scheduler"):
        progress.start(3)
        progress.advance("a/b", CrawlCounts(repos=1, files=2, bytes_fetched=10, requests=4))
        progress.finish()
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "crawl started (3 repos)"
    assert "repos 1/3, files 2, bytes 10, requests 4, errors 0" in lines[1]
    assert lines[-1].startswith("crawl ended after")


# --- with the Hub emulator: real crawl passes --------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def _scan_rows(db: Path) -> list[tuple[int, str, str]]:
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute("select id, status, trigger from scans order by id").fetchall()
    except sqlite3.OperationalError:  # the schema is being created
        return []
    finally:
        conn.close()


def test_scheduler_runs_real_crawls_on_a_short_trigger(hub: HubEmulator, tmp_path: Path) -> None:
    settings = Settings(
        hf_endpoint=hub.endpoint,
        data_dir=tmp_path,
        db_url=f"sqlite:///{tmp_path / 'catalog.sqlite'}",
        timeout_s=10,
    )
    stop = threading.Event()
    db = tmp_path / "catalog.sqlite"

    def two_scans_done() -> bool:
        return len([r for r in _scan_rows(db) if r[1] != "running"]) >= 2

    # Run now, then every second: no wall-clock cron in the test.
    options = ScheduleOptions(run_now=True, timezone="UTC")
    thread, errors = _run_in_background(
        run_scheduler, settings, options, trigger=IntervalTrigger(seconds=1), stop=stop
    )
    try:
        _wait_for(two_scans_done, timeout=120)
    finally:
        stop.set()
        thread.join(timeout=120)
    assert not thread.is_alive() and not errors
    rows = _scan_rows(db)
    assert [(status, trigger) for _, status, trigger in rows[:2]] == [
        ("ok", "schedule"),
        ("ok", "schedule"),
    ]
    from crawler.catalog import Catalog
    from crawler.catalog.history import list_scans

    with Catalog.open(settings.resolved_db_url) as catalog:
        scans = sorted(list_scans(catalog), key=lambda s: s.id)
    assert scans[0].repos_new > 5 and scans[0].quants_analysed > 10
    # The second pass is incremental: nothing new, no header read again.
    assert scans[1].repos_new == 0 and scans[1].quants_analysed == 0
    # Watches were evaluated after the passes: the (empty) Atom feed exists.
    assert (tmp_path / "feeds" / "watches.atom").is_file()
    # The scheduler released both locks when it stopped.
    with crawl_lock(settings, command="t"), crawl_lock(settings, command="t", name="schedule"):
        pass


def _schedule_process(hub: HubEmulator, tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUANTS_")}
    env.update(
        QUANTS_HF_ENDPOINT=hub.endpoint,
        QUANTS_DB=f"sqlite:///{tmp_path / 'catalog.sqlite'}",
        QUANTS_DATA_DIR=str(tmp_path),
        QUANTS_CONCURRENCY="1",
        QUANTS_TIMEOUT="10",
    )
    return subprocess.Popen(
        [sys.executable, "-m", "crawler", "schedule", "--run-now", "--timezone", "UTC", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def _repos_written(db: Path) -> int:
    if not db.exists():
        return 0
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute("select count(*) from repos where scanned_sha is not null").fetchone()[
            0
        ]
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_a_scan_records_it_interrupted(
    signum: int, hub: HubEmulator, tmp_path: Path
) -> None:
    # Every request takes a while, so the pass is still going when the signal arrives.
    hub.latency_s = 0.05
    db = tmp_path / "catalog.sqlite"
    proc = _schedule_process(hub, tmp_path, "--log-file", str(tmp_path / "schedule.log"))
    try:
        _wait_for(lambda: _repos_written(db) >= 1, timeout=120)
        proc.send_signal(signum)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "finishing the repo in progress" in err
    rows = _scan_rows(db)
    assert [(status, trigger) for _, status, trigger in rows] == [("interrupted", "schedule")]
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
        assert conn.execute("pragma foreign_key_check").fetchall() == []
        finished = conn.execute("select finished_at from scans").fetchone()[0]
        done = conn.execute("select count(*) from repos where scanned_sha is not null").fetchone()[
            0
        ]
        # A finished repo has its quants analysed (one transaction per repo).
        half_done = conn.execute(
            "select count(*) from quants q join repos r on r.id = q.repo_pk "
            "where r.scanned_sha is not null and q.analysed_at is null and q.vanished_at is null"
        ).fetchone()[0]
    finally:
        conn.close()
    assert finished is not None
    assert 1 <= done < 12, "the signal should land mid-pass"
    assert half_done == 0
    log = (tmp_path / "schedule.log").read_text("utf-8")
    assert "scheduler stopped" in log and "crawl ended" in log

    # The next pass picks up where this one stopped and completes.
    hub.latency_s = 0.0
    settings = Settings(hf_endpoint=hub.endpoint, data_dir=tmp_path, db_url=f"sqlite:///{db}")
    from crawler.crawl.scan import run_once

    summary = run_once(settings)
    assert summary.status == "ok"
    assert _repos_written(db) > done


def test_lock_contention_between_scheduler_and_manual_crawl(
    hub: HubEmulator, tmp_path: Path
) -> None:
    hub.latency_s = 0.05
    db = tmp_path / "catalog.sqlite"
    proc = _schedule_process(hub, tmp_path)
    try:
        _wait_for(lambda: _repos_written(db) >= 1, timeout=120)
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUANTS_")}
        env.update(
            QUANTS_HF_ENDPOINT=hub.endpoint,
            QUANTS_DB=f"sqlite:///{db}",
            QUANTS_DATA_DIR=str(tmp_path),
        )
        for args in (["crawl"], ["schedule"]):
            other = subprocess.run(
                [sys.executable, "-m", "crawler", *args],
                capture_output=True,
                text=True,
                env=env,
                cwd=ROOT,
                timeout=120,
            )
            assert other.returncode == 1, other.stderr
            first = other.stderr.splitlines()[0]
            assert first.startswith("error: the catalog is being crawled by quants schedule")
            assert f"pid {proc.pid}" in first
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    # The refused crawl left no scan row of its own.
    assert [trigger for _, _, trigger in _scan_rows(db)] == ["schedule"]
