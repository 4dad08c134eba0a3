"""One crawl pass (crawler/crawl/run.py) against the Hub emulator: lock, scan, then watches.

The pass any caller runs (``quants crawl``, the scheduler, an on-demand search scan): the scan is
recorded with the caller's trigger, the watches run after it with the search function the caller
passes in, and a pass that finds the crawl lock taken does nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from crawler.catalog import Catalog
from crawler.catalog.history import list_scans
from crawler.config import Settings
from crawler.crawl.lock import crawl_lock
from crawler.crawl.run import CrawlScope, crawl_pass
from crawler.crawl.watch import add_watch
from crawler.errors import LockHeld
from tests.hub_emulator import HubEmulator


def _settings(hub: HubEmulator, tmp_path: Path) -> Settings:
    return Settings(
        hf_endpoint=hub.endpoint,
        data_dir=tmp_path,
        db_url=f"sqlite:///{tmp_path / 'catalog.sqlite'}",
        timeout_s=10,
    )


def test_a_pass_records_its_trigger_and_runs_the_watches_with_the_given_search(
    hub: HubEmulator, tmp_path: Path
) -> None:
    settings = _settings(hub, tmp_path)
    calls: list[list[str]] = []

    def search(catalog: Catalog, argv: Sequence[str]) -> list[dict[str, Any]]:
        calls.append(list(argv))
        return []

    with Catalog.open(settings.resolved_db_url) as catalog:
        add_watch(settings, catalog, "w", ["--vram", "24"], search=search)
    assert calls == [["--vram", "24"]]  # the baseline
    summary = crawl_pass(settings, search=search, scope=CrawlScope(limit=3), trigger="search")
    assert summary.status == "ok" and summary.repos_seen == 3
    assert calls == [["--vram", "24"]] * 2  # evaluated after the scan, with this search
    with Catalog.open(settings.resolved_db_url) as catalog:
        (scan,) = list_scans(catalog)
    assert (scan.id, scan.trigger) == (summary.scan_id, "search")
    assert (tmp_path / "feeds" / "watches.atom").is_file()


def test_a_pass_does_nothing_while_another_holds_the_lock(hub: HubEmulator, tmp_path: Path):
    settings = _settings(hub, tmp_path)

    def search(catalog: Catalog, argv: Sequence[str]) -> list[dict[str, Any]]:
        raise AssertionError("no watch may run")

    with crawl_lock(settings, command="quants schedule"), pytest.raises(LockHeld):
        crawl_pass(settings, search=search, trigger="search")
    assert hub.requests() == []
