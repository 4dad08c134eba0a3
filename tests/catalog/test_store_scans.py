"""Scan rows: a scan left ``running`` by a killed process is closed when the next one starts."""

from __future__ import annotations

from crawler.catalog import Catalog, scans
from crawler.catalog.tables import Scan


def test_start_scan_closes_abandoned_running_scans(catalog_url):
    with Catalog.open(catalog_url) as catalog:
        first = scans.start_scan(catalog, trigger="manual", endpoint=None, params={})
        second = scans.start_scan(catalog, trigger="manual", endpoint=None, params={})
        with catalog.session() as s:
            old, new = s.get(Scan, first), s.get(Scan, second)
            assert old is not None and new is not None
            assert (old.status, new.status) == ("failed", "running")
            assert old.finished_at is not None
            assert "abandoned" in (old.message or "")


def test_nul_in_text_is_stored_on_every_backend(catalog_url):
    """PostgreSQL text cannot hold NUL: it becomes U+FFFD there; SQLite keeps it."""
    from datetime import UTC, datetime

    from crawler.catalog.tables import Repo

    now = datetime(2026, 12, 1, tzinfo=UTC)
    with Catalog.open(catalog_url) as catalog:
        with catalog.session() as s:
            s.add(
                Repo(
                    repo_id="evil/\x00name",
                    author="a\x00b",
                    private=False,
                    first_seen_at=now,
                    last_seen_at=now,
                    tags=["x\x00y"],
                )
            )
        _, rows = catalog.query_readonly("select repo_id, author from repos")
        nul = "\ufffd" if catalog.dialect == "postgresql" else "\x00"
        assert rows == [(f"evil/{nul}name", f"a{nul}b")]


def test_crawl_state_written_at_once_by_many_writers_keeps_the_newest_cursor(catalog_url):
    """Two crawls of one catalog finish together: both write the watermark they read as absent.
    Every write succeeds, and a forward-only cursor ends at the newest time written."""
    import threading
    from datetime import UTC, datetime, timedelta

    base = datetime(2026, 10, 3, 12, tzinfo=UTC)
    times = [(base + timedelta(seconds=7 * i, microseconds=i % 2)).isoformat() for i in range(8)]
    with Catalog.open(catalog_url) as catalog:
        start = threading.Barrier(len(times), timeout=60)
        failures: list[BaseException] = []

        def write(value: str) -> None:
            start.wait()
            try:
                scans.set_state(catalog, "watermark:k", value, forward_only=True)
                scans.set_state(catalog, "snapshot:k", value)
            except BaseException as exc:  # collected: the assertion below names it
                failures.append(exc)

        threads = [threading.Thread(target=write, args=(t,)) for t in reversed(times)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
        assert scans.get_state(catalog, "watermark:k") == max(times)
        assert scans.get_state(catalog, "snapshot:k") in times
        scans.set_state(catalog, "watermark:k", times[0], forward_only=True)
        assert scans.get_state(catalog, "watermark:k") == max(times)
        scans.set_state(catalog, "watermark:k", times[0])
        assert scans.get_state(catalog, "watermark:k") == times[0]
