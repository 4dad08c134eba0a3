"""Scan rows: a scan left ``running`` by a killed process is closed when the next one starts."""

from __future__ import annotations

from crawler.catalog import Catalog, store
from crawler.catalog.tables import Scan


def test_start_scan_closes_abandoned_running_scans(catalog_url):
    with Catalog.open(catalog_url) as catalog:
        first = store.start_scan(catalog, trigger="manual", endpoint=None, params={})
        second = store.start_scan(catalog, trigger="manual", endpoint=None, params={})
        with catalog.session() as s:
            old, new = s.get(Scan, first), s.get(Scan, second)
            assert old is not None and new is not None
            assert (old.status, new.status) == ("failed", "running")
            assert old.finished_at is not None
            assert "abandoned" in (old.message or "")
