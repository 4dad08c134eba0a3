"""One crawl pass (crawler/crawl/run.py) against the Hub emulator: lock, scan, then watches.

The pass any caller runs (``quants crawl``, the scheduler, an on-demand search scan): the scan is
recorded with the caller's trigger, the watches run after it through the library's own search, and
a pass that finds the crawl lock taken does nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler.base.config import Settings
from crawler.base.errors import LockHeld
from crawler.catalog import Catalog
from crawler.catalog.history import list_scans
from crawler.catalog.watches import get_watch, list_hits
from crawler.crawl.lock import crawl_lock
from crawler.crawl.run import CrawlScope, crawl_pass
from crawler.crawl.watch import add_watch
from tests.hub_emulator import HubEmulator


def _settings(hub: HubEmulator, tmp_path: Path) -> Settings:
    return Settings(
        hf_endpoint=hub.endpoint,
        data_dir=tmp_path,
        db_url=f"sqlite:///{tmp_path / 'catalog.sqlite'}",
        timeout_s=10,
    )


def test_a_pass_records_its_trigger_and_runs_the_watches_itself(
    hub: HubEmulator, tmp_path: Path
) -> None:
    settings = _settings(hub, tmp_path)
    with Catalog.open(settings.resolved_db_url) as catalog:
        _, baseline = add_watch(settings, catalog, "w", {"vram": 512})
    assert baseline == 0  # an empty catalog: nothing fits yet
    summary = crawl_pass(settings, scope=CrawlScope(limit=3), trigger="search")
    assert summary.status == "ok" and summary.repos_seen == 3
    with Catalog.open(settings.resolved_db_url) as catalog:
        (scan,) = list_scans(catalog)
        watch = get_watch(catalog, "w")
        hits = list_hits(catalog, "w")
    assert (scan.id, scan.trigger) == (summary.scan_id, "search")
    # Evaluated after the scan with the library's own search (no caller passed one): what the
    # pass stored fits 512 GiB and was reported as new, with this scan's id.
    assert watch.last_evaluated_at is not None and hits
    assert {(h.payload["reason"], h.scan_id) for h in hits} == {("new", summary.scan_id)}
    assert (tmp_path / "feeds" / "watches.atom").is_file()


def test_a_pass_does_nothing_while_another_holds_the_lock(hub: HubEmulator, tmp_path: Path):
    settings = _settings(hub, tmp_path)
    with Catalog.open(settings.resolved_db_url) as catalog:
        add_watch(settings, catalog, "w", {"vram": 512})
    with crawl_lock(settings, command="quants schedule"), pytest.raises(LockHeld):
        crawl_pass(settings, trigger="search")
    assert hub.requests() == []
    with Catalog.open(settings.resolved_db_url) as catalog:
        assert get_watch(catalog, "w").hits == 0  # no watch ran
