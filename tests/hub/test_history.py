"""Scan history, changes between scans and the watch store on a real SQLite catalog.

Rows are written the way a crawl pass writes them (scans, repos, quants, quant_versions), so
these tests pin the read path independently of the crawler; the e2e tests run real crawls.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from crawler.base.errors import UsageError
from crawler.catalog import Catalog
from crawler.catalog.changes import changes_since
from crawler.catalog.history import list_scans, parse_since
from crawler.catalog.tables import Quant, QuantVersion, Repo, Scan
from crawler.catalog.watches import (
    add_watch,
    content_keys,
    get_watch,
    list_hits,
    list_watches,
    record_hits,
    remove_watch,
)

T0 = datetime(2026, 11, 1, 3, 0, tzinfo=UTC)


def _profile(attn: str, mtp: bool = True) -> dict[str, Any]:
    return {
        "groups": {"attn": {"types": {attn: 16}}},
        "mtp": {"present": mtp, "state": "present" if mtp else "absent"},
    }


class World:
    """Writes scans the way a crawl pass does."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.scan_id: int | None = None
        self.now = T0

    def scan(self, status: str = "ok") -> int:
        self.now += timedelta(days=1)
        with self.catalog.session() as s:
            row = Scan(started_at=self.now, status="running", trigger="schedule")
            s.add(row)
            s.flush()
            self.scan_id = row.id
        return row.id

    def finish(self, status: str = "ok", **counters: int) -> None:
        with self.catalog.session() as s:
            row = s.get(Scan, self.scan_id)
            assert row is not None
            row.status = status
            row.finished_at = self.now + timedelta(minutes=5)
            for key, value in counters.items():
                setattr(row, key, value)

    def quant(self, repo_id: str, path: str, key: str, size: int, profile: dict[str, Any]) -> None:
        at = self.now + timedelta(minutes=1)
        with self.catalog.session() as s:
            repo = s.scalars(select(Repo).where(Repo.repo_id == repo_id)).first()
            if repo is None:
                repo = Repo(repo_id=repo_id, first_seen_at=at, last_seen_at=at)
                s.add(repo)
                s.flush()
            quant = s.scalars(
                select(Quant).where(Quant.repo_pk == repo.id, Quant.path == path)
            ).first()
            if quant is None:
                quant = Quant(repo_pk=repo.id, path=path, size_bytes=size, first_seen_at=at)
                s.add(quant)
            quant.content_key, quant.size_bytes, quant.revision = key, size, f"rev-{key}"
            quant.quant_label = path.rsplit("-", 1)[-1].removesuffix(".gguf")
            s.flush()
            s.add(
                QuantVersion(
                    quant_id=quant.id,
                    scan_id=self.scan_id,
                    revision=f"rev-{key}",
                    content_key=key,
                    size_bytes=size,
                    profile=profile,
                    analysed_at=at,
                )
            )

    def vanish_quant(self, repo_id: str, path: str) -> None:
        with self.catalog.session() as s:
            quant = s.scalars(
                select(Quant).join(Repo).where(Repo.repo_id == repo_id, Quant.path == path)
            ).one()
            quant.vanished_at = self.now + timedelta(minutes=2)

    def vanish_repo(self, repo_id: str) -> None:
        at = self.now + timedelta(minutes=2)
        with self.catalog.session() as s:
            repo = s.scalars(select(Repo).where(Repo.repo_id == repo_id)).one()
            repo.vanished_at = at
            for quant in s.scalars(select(Quant).where(Quant.repo_pk == repo.id)):
                quant.vanished_at = at


@pytest.fixture
def world(catalog_url: str):
    with Catalog.open(catalog_url) as catalog:
        yield World(catalog)


def _two_scans(world: World) -> tuple[int, int]:
    first = world.scan()
    world.quant("unsloth/A-GGUF", "A-Q4_K_M.gguf", "k1", 100, _profile("MXFP4"))
    world.quant("unsloth/A-GGUF", "A-Q8_0.gguf", "k2", 200, _profile("Q8_0"))
    world.quant("bart/B-GGUF", "B-Q4_K_M.gguf", "k3", 300, _profile("Q4_K"))
    world.quant("gone/C-GGUF", "C-Q4_K_M.gguf", "k4", 400, _profile("Q4_K"))
    world.finish(repos_seen=3, repos_new=3, quants_analysed=4)
    second = world.scan()
    world.quant("unsloth/A-GGUF", "A-Q4_K_M.gguf", "k1b", 150, _profile("Q8_0"))  # re-upload
    world.quant("bart/B-GGUF", "B-Q5_K_M.gguf", "k5", 350, _profile("Q5_K"))  # new
    world.vanish_quant("unsloth/A-GGUF", "A-Q8_0.gguf")
    world.vanish_repo("gone/C-GGUF")
    world.finish(repos_seen=3, repos_changed=2, quants_analysed=2, requests=9, bytes_fetched=77)
    return first, second


def test_scans_newest_first_with_duration(world: World) -> None:
    first, second = _two_scans(world)
    world.scan()  # still running: no end, no duration
    scans = list_scans(world.catalog)
    assert [s.id for s in scans] == [second + 1, second, first]
    assert scans[0].status == "running" and scans[0].duration_s is None
    assert scans[1].duration_s == 300.0
    data = scans[1].to_json()
    assert data["repos_changed"] == 2 and data["bytes_fetched"] == 77 and data["requests"] == 9
    assert data["started_at"].endswith("Z")
    assert [s.id for s in list_scans(world.catalog, limit=1)] == [second + 1]


def test_changes_of_the_latest_scan(world: World) -> None:
    first, second = _two_scans(world)
    for since in (None, str(first)):
        report = changes_since(world.catalog, since)
        assert report.scan_ids == (second,)
        assert [(q.repo_id, q.path) for q in report.new_quants] == [
            ("bart/B-GGUF", "B-Q5_K_M.gguf")
        ]
        assert len(report.reuploads) == 1
        up = report.reuploads[0]
        assert (up.repo_id, up.path, up.old_size_bytes, up.new_size_bytes) == (
            "unsloth/A-GGUF",
            "A-Q4_K_M.gguf",
            100,
            150,
        )
        assert up.changes == ("attention MXFP4 -> Q8_0", "size 100 B -> 150 B (+50 B)")
        assert [(q.repo_id, q.path) for q in report.vanished_quants] == [
            ("unsloth/A-GGUF", "A-Q8_0.gguf")
        ]
        assert [(r.repo_id, r.quants) for r in report.vanished_repos] == [("gone/C-GGUF", 1)]
    assert report.since_scan_id == first
    assert report.to_json()["reuploads"][0]["changes"][0] == "attention MXFP4 -> Q8_0"


def test_changes_since_the_latest_scan_are_empty(world: World) -> None:
    _first, second = _two_scans(world)
    report = changes_since(world.catalog, str(second))
    assert report.empty and report.scan_ids == ()


def test_changes_since_a_date_covers_both_scans(world: World) -> None:
    _two_scans(world)
    report = changes_since(world.catalog, "2026-11-01")
    # From before the first scan: everything is new, the re-upload included (no baseline).
    assert {(q.repo_id, q.path) for q in report.new_quants} == {
        ("unsloth/A-GGUF", "A-Q4_K_M.gguf"),
        ("unsloth/A-GGUF", "A-Q8_0.gguf"),
        ("bart/B-GGUF", "B-Q4_K_M.gguf"),
        ("bart/B-GGUF", "B-Q5_K_M.gguf"),
        ("gone/C-GGUF", "C-Q4_K_M.gguf"),
    }
    assert report.reuploads == ()
    # A naive date-time is UTC; the second scan started on 2026-11-03 03:00.
    later = changes_since(world.catalog, "2026-11-03T02:59:00")
    assert len(later.reuploads) == 1 and len(later.new_quants) == 1


def test_two_reuploads_in_the_window_diff_first_against_last(world: World) -> None:
    first = world.scan()
    world.quant("u/A-GGUF", "A-Q4_K_M.gguf", "v1", 100, _profile("MXFP4"))
    world.finish()
    world.scan()
    world.quant("u/A-GGUF", "A-Q4_K_M.gguf", "v2", 100, _profile("Q6_K"))
    world.finish()
    world.scan()
    world.quant("u/A-GGUF", "A-Q4_K_M.gguf", "v3", 100, _profile("Q8_0", mtp=False))
    world.finish()
    report = changes_since(world.catalog, str(first))
    assert len(report.scan_ids) == 2
    assert report.reuploads[0].changes == ("attention MXFP4 -> Q8_0", "MTP head removed")


def test_empty_catalog_and_bad_since(world: World) -> None:
    assert changes_since(world.catalog).empty
    assert list_scans(world.catalog) == []
    with pytest.raises(UsageError, match="no such scan"):
        changes_since(world.catalog, "42")
    with pytest.raises(UsageError, match="scan id"):
        parse_since("yesterday")
    assert parse_since("2026-05-01") == datetime(2026, 5, 1, tzinfo=UTC)
    assert parse_since("2026-05-01T10:00:00+02:00") == datetime(2026, 5, 1, 8, tzinfo=UTC)


def test_watch_crud_and_hits_fire_once(world: World) -> None:
    watch = add_watch(world.catalog, "rtx4090", {"vram": 24.0, "ctx": 262144})
    assert watch.options == {"vram": 24.0, "ctx": 262144}
    assert get_watch(world.catalog, "rtx4090").options == {"vram": 24.0, "ctx": 262144}
    with pytest.raises(UsageError, match="exists"):
        add_watch(world.catalog, "rtx4090", {})
    with pytest.raises(UsageError, match="watch name"):
        add_watch(world.catalog, "../etc", {})
    first = record_hits(
        world.catalog, watch.id, [("a@1", {"repo": "a"}), ("b@1", {"repo": "b"})], scan_id=None
    )
    assert [h.result_key for h in first] == ["a@1", "b@1"]
    again = record_hits(
        world.catalog, watch.id, [("a@1", {"repo": "a"}), ("a@2", {"repo": "a"})], scan_id=None
    )
    assert [h.result_key for h in again] == ["a@2"]
    assert get_watch(world.catalog, "rtx4090").hits == 3
    assert get_watch(world.catalog, "rtx4090").last_evaluated_at is not None
    hits = list_hits(world.catalog, "rtx4090")
    assert hits[0].result_key == "a@2" and hits[0].to_json()["repo"] == "a"
    assert [w.name for w in list_watches(world.catalog)] == ["rtx4090"]
    remove_watch(world.catalog, "rtx4090")
    assert list_watches(world.catalog) == []
    with pytest.raises(UsageError, match="no watch"):
        remove_watch(world.catalog, "rtx4090")
    with pytest.raises(UsageError, match="no watch"):
        list_hits(world.catalog, "rtx4090")


def test_content_keys_follow_reuploads(world: World) -> None:
    _two_scans(world)
    keys = content_keys(
        world.catalog,
        [("unsloth/A-GGUF", "A-Q4_K_M.gguf"), ("bart/B-GGUF", "B-Q5_K_M.gguf"), ("x/y", "z")],
    )
    assert keys == {
        ("unsloth/A-GGUF", "A-Q4_K_M.gguf"): "k1b",
        ("bart/B-GGUF", "B-Q5_K_M.gguf"): "k5",
    }


def test_concurrent_evaluations_fire_each_result_once(world: World) -> None:
    import threading

    watch = add_watch(world.catalog, "race", {"vram": 8.0})
    keys = [f"r/{i}@k" for i in range(12)]
    fired: list[str] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def evaluate() -> None:
        try:
            barrier.wait()
            for key in keys:
                hits = record_hits(world.catalog, watch.id, [(key, {"k": key})], scan_id=None)
                fired.extend(h.result_key for h in hits)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=evaluate) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert sorted(fired) == sorted(keys)
    assert get_watch(world.catalog, "race").hits == len(keys)


def test_latest_changes_of_a_quant(world: World) -> None:
    from crawler.catalog.changes import latest_changes

    _two_scans(world)
    assert latest_changes(world.catalog, "unsloth/A-GGUF", "A-Q4_K_M.gguf") == (
        "attention MXFP4 -> Q8_0",
        "size 100 B -> 150 B (+50 B)",
    )
    assert latest_changes(world.catalog, "bart/B-GGUF", "B-Q4_K_M.gguf") == ()
    assert latest_changes(world.catalog, "no/such", "x.gguf") == ()
