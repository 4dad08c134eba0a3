"""The crawl pass against the Hub emulator: real HubClient, real SQLite catalog, real GGUF files.

Covers: what a first pass stores, zero header reads for unchanged files, re-uploads under the
same name, size hints, every fault kind (recorded, then healed by the next pass to the same
catalog as a clean crawl), repos vanishing or changing mid-crawl, stop requests and budgets.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select

from crawler.base.config import Settings
from crawler.catalog import Catalog
from crawler.catalog.tables import MemoryModel as Memory
from crawler.catalog.tables import Quant as QuantRow
from crawler.catalog.tables import TensorGroup as Group
from crawler.catalog.tensor_tables import decode_tensor_table
from crawler.crawl.progress import CrawlCounts
from crawler.crawl.scan import ScanSummary, run_once
from crawler.hub import HubClient
from crawler.ranking.columns import stored_columns
from tests.fixtures.world import (
    FAILING,
    WORLD,
    FileCache,
    Quant,
    analysable_quants,
    quant_key,
    reupload,
)
from tests.hub.snapshot import integrity_ok, rows, snapshot
from tests.hub_emulator import Fault, HubEmulator

QWEN8 = "lmstudio-community/Qwen3-8B-GGUF"
QWEN8_FILE = "Qwen3-8B-Q8_0.gguf"
UNSLOTH = "unsloth/Qwen3.6-27B-GGUF"
# Repos the anonymous crawl cannot finish: gated files and files that are not GGUF.


def _crawl(emu: HubEmulator, url: str, client: HubClient, **kw: Any) -> ScanSummary:
    kw.setdefault("authors", ())
    kw.setdefault("searches", ())
    settings = Settings(hf_endpoint=emu.endpoint, db_url=url, timeout_s=5.0)
    with Catalog.open(url) as catalog:
        return run_once(settings, hub=client, catalog=catalog, **kw)


_LIVE_MISMATCHES = (
    "SELECT count(*) FROM quants q JOIN repos r ON r.id = q.repo_pk"
    " WHERE q.live != (q.vanished_at IS NULL AND r.vanished_at IS NULL)"
)


def _expected_quants() -> set[tuple[str, str]]:
    """(repo, quant path) of every quant an anonymous crawl can analyse."""
    return {quant_key(repo.repo_id, f) for repo, f in analysable_quants()}


def _resolve_paths(emu: HubEmulator) -> list[str]:
    return [r.path for r in emu.requests(origin="hub", path="/resolve/")]


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'catalog.sqlite'}"


def test_first_crawl_stores_every_quant_and_records_each_failure(
    hub: HubEmulator, url: str, make_client: Callable[..., HubClient]
) -> None:
    summary = _crawl(hub, url, make_client(hub))
    assert summary.status == "ok"
    listed = [r for r in WORLD if not r.private and r.repo_id != "Qwen/Qwen3-8B"]
    assert summary.repos_seen == summary.repos_new == len(listed)
    assert set(rows(url, "SELECT repo_id, path FROM v_quants")) == _expected_quants()
    assert summary.quants_analysed == len(_expected_quants())
    errors = sorted(rows(url, "SELECT repo_id, path, kind FROM scan_errors"))
    assert errors == [
        ("broken/Malformed-GGUF", "Malformed-Q4_K_M.gguf", "malformed_gguf"),
        ("broken/Malformed-GGUF", "NotReally-Q8_0.gguf", "malformed_gguf"),
        ("google/gemma-3-12b-it-qat-q4_0-gguf", "gemma-3-12b-it-q4_0.gguf", "gated"),
    ]
    assert summary.errors == 3
    # Only repos without failures are marked done.
    done = dict(rows(url, "SELECT repo_id, scanned_sha = sha FROM repos"))
    assert {r for r, ok in done.items() if not ok} == FAILING
    # Files: mmproj and parts recorded; imatrix and non-GGUF ignored.
    kinds = dict(
        rows(
            url,
            "SELECT f.path, f.kind FROM files f JOIN repos r ON r.id = f.repo_pk"
            " WHERE r.repo_id = ?",
            UNSLOTH,
        )
    )
    assert kinds["mmproj-F16.gguf"] == "mmproj"
    assert "imatrix_unsloth.gguf_file" not in kinds and "README.md" not in kinds
    parts = rows(
        url,
        "SELECT f.path, f.kind, f.analysed_oid IS NOT NULL FROM files f"
        " JOIN repos r ON r.id = f.repo_pk WHERE r.repo_id = ? AND f.kind = 'part'"
        " ORDER BY f.path",
        "mradermacher/Qwen3-30B-A3B-i1-GGUF",
    )
    assert [(p[0].rsplit(".", 1)[1], p[2]) for p in parts] == [("part1of2", 1), ("part2of2", 1)]
    # The split quant: both shards' tensor tables stored, decodable, with every tensor.
    (data, encoding, n) = rows(
        url,
        "SELECT t.data, t.encoding, t.n_tensors FROM tensor_tables t"
        " JOIN quants q ON q.id = t.quant_id WHERE q.path LIKE 'UD-Q4_K_XL/%'",
    )[0]
    shards = decode_tensor_table(data, encoding)
    assert len(shards) == 2 and sum(len(s.header.tensors) for s in shards) == n > 0
    meta = shards[0].header.metadata
    assert meta["general.architecture"] == "glm4moe" and meta["split.count"] == 2
    assert all(len(v) <= 4096 for v in meta.values() if isinstance(v, list))
    # Memory models and history: one of each per analysed quant.
    n_quants = len(_expected_quants())
    assert rows(url, "SELECT count(*) FROM memory_models")[0][0] == n_quants
    assert rows(url, "SELECT count(*) FROM quant_versions")[0][0] == n_quants
    scan = rows(url, "SELECT status, repos_seen, quants_analysed, errors FROM scans")
    assert scan == [("ok", summary.repos_seen, n_quants, 3)]
    assert integrity_ok(url)


def test_recrawl_reads_no_header_of_unchanged_files(
    hub: HubEmulator, url: str, make_client: Callable[..., HubClient]
) -> None:
    _crawl(hub, url, make_client(hub))
    before = snapshot(url)
    hub.clear_log()
    again = _crawl(hub, url, make_client(hub))
    # Only the repos that failed are retried (and fail the same way).
    touched = {p.split("/resolve/")[0].strip("/") for p in _resolve_paths(hub)}
    assert touched == FAILING
    assert again.quants_analysed == 0 and again.files_analysed == 0
    assert again.repos_unchanged == again.repos_seen - len(FAILING)
    # Incremental: one listing page, no tree request for an unchanged repo.
    assert len(hub.requests(path="/api/models", method="GET")) - len(
        hub.requests(path="/tree/")
    ) == 1 + len(FAILING)  # the listing + one repo_info per pending repo
    assert {r.path.split("/")[4] for r in hub.requests(path="/tree/")} == {
        r.split("/")[1] for r in FAILING
    }
    assert snapshot(url) == before


def test_a_recrawl_copies_new_downloads_into_the_quants(
    hub: HubEmulator, url: str, make_client: Callable[..., HubClient]
) -> None:
    """An unchanged repo's new downloads (written without a commit: the touch path) reach its
    quants' copy, which the search's copy classes are ordered by (migration 0018)."""
    _crawl(hub, url, make_client(hub))
    copies = (
        "SELECT q.repo_downloads, COALESCE(r.downloads, -1) FROM quants q"
        " JOIN repos r ON r.id = q.repo_pk WHERE r.repo_id = ?"
    )
    before = rows(url, copies, UNSLOTH)
    assert before and all(mine == theirs for mine, theirs in before)
    hub.state.update_repo(UNSLOTH, downloads=before[0][1] + 12345)
    again = _crawl(hub, url, make_client(hub), full=True)  # the listing that refreshes them
    assert again.quants_analysed == 0  # no header read: the repo is unchanged
    after = rows(url, copies, UNSLOTH)
    assert len(after) == len(before)
    assert all(mine == theirs == before[0][1] + 12345 for mine, theirs in after), (before, after)


def test_reupload_under_the_same_name_is_detected_and_reread(
    hub: HubEmulator, url: str, make_client: Callable[..., HubClient], world_cache: FileCache
) -> None:
    _crawl(hub, url, make_client(hub))
    path = "Qwen3.6-27B-UD-Q4_K_XL.gguf"
    # A silent re-upload, reversed: same name, MXFP4 attention.
    reupload(hub.state, world_cache, UNSLOTH, Quant(path, "qwen35", "UD-Q4_K_XL-mxfp4"))
    hub.clear_log()
    summary = _crawl(hub, url, make_client(hub))
    assert summary.repos_changed >= 1 and summary.quants_analysed == 1
    assert [p for p in _resolve_paths(hub) if UNSLOTH in p] == [
        f"/{UNSLOTH}/resolve/{hub.state.get(UNSLOTH).head.sha}/{path}"
    ]
    versions = rows(
        url,
        "SELECT v.content_key FROM quant_versions v JOIN quants q ON q.id = v.quant_id"
        " WHERE q.path = ? ORDER BY v.id",
        path,
    )
    assert len(versions) == 2 and versions[0] != versions[1]
    (attn,) = rows(
        url, "SELECT attn_preserved FROM v_quants WHERE repo_id = ? AND path = ?", UNSLOTH, path
    )
    assert attn == (0,)
    # A README-only commit: new sha, no header read, repo done at the new sha.
    hub.state.commit(UNSLOTH, world_cache.files([]), title="Update README.md")
    hub.clear_log()
    _crawl(hub, url, make_client(hub))
    assert not [p for p in _resolve_paths(hub) if UNSLOTH in p]
    assert rows(url, "SELECT scanned_sha = sha FROM repos WHERE repo_id = ?", UNSLOTH) == [(1,)]


def test_size_hint_makes_each_later_quant_one_range_read(
    hub: HubEmulator, url: str, make_client: Callable[..., HubClient]
) -> None:
    summary = _crawl(hub, url, make_client(hub), searches=("unsloth/qwen3.6-27b-gguf",))
    assert summary.files_analysed == 4
    # One ranged GET per file, and past the first (probe) file only header + margin.
    cdn = hub.requests(origin="cdn")
    assert len(cdn) == 4 == summary.header_reads
    headers = dict(rows(url, "SELECT path, header_bytes FROM files WHERE header_bytes IS NOT NULL"))
    hinted = sorted(cdn, key=lambda r: r.at)[1:]
    for rec in hinted:
        assert rec.bytes_sent <= max(headers.values()) * 1.01 + 8192 + 64


def _target_blob_path(emu: HubEmulator) -> str:
    return "/" + emu.state.get(QWEN8).head.files[QWEN8_FILE].sha256


FAULTS: list[tuple[str, Fault, str, str | None]] = [
    # (name, fault, origin, kind recorded when it persists; None: the read succeeds anyway)
    ("429", Fault.rate_limited(retry_after=1), "hub", "http_429"),
    ("503", Fault.http(503), "hub", "http_5xx"),
    ("reset", Fault.reset(), "cdn", "reset"),
    ("truncated", Fault.truncate(after_bytes=100), "cdn", "truncated"),
    ("timeout", Fault.delay(2.0), "cdn", "timeout"),
    ("private", Fault.http(401), "hub", "private"),
    ("gated", Fault.http(403, "gated", X_Error_Code="GatedRepo"), "hub", "gated"),
    ("range_ignored", Fault.ignore_range(), "cdn", None),
]


@pytest.mark.parametrize(("name", "fault", "origin", "kind"), FAULTS, ids=[f[0] for f in FAULTS])
@pytest.mark.parametrize("persistent", [False, True], ids=["once", "always"])
def test_each_fault_is_recorded_and_the_next_pass_heals_it(
    hub: HubEmulator,
    tmp_path,
    make_client: Callable[..., HubClient],
    name: str,
    fault: Fault,
    origin: str,
    kind: str | None,
    persistent: bool,
) -> None:
    clean = f"sqlite:///{tmp_path / 'clean.sqlite'}"
    faulty = f"sqlite:///{tmp_path / 'faulty.sqlite'}"
    scope = {"searches": ("qwen3-8b-gguf",)}
    _crawl(hub, clean, make_client(hub), **scope)
    target = f"/{QWEN8}/resolve/[0-9a-f]+/{QWEN8_FILE}$" if origin == "hub" else None
    rule = hub.faults.add(
        fault,
        origin=origin,  # type: ignore[arg-type]
        regex=target,
        path=None if origin == "hub" else _target_blob_path(hub),
        times=None if persistent else 1,
    )
    summary = _crawl(hub, faulty, make_client(hub, max_retries=1, timeout_s=0.5), **scope)
    errors = rows(faulty, "SELECT repo_id, path, kind FROM scan_errors")
    assert rule.fired >= 1
    if persistent and kind is not None:
        assert errors == [(QWEN8, QWEN8_FILE, kind)], name
        assert rows(faulty, "SELECT scanned_sha FROM repos WHERE repo_id = ?", QWEN8) == [(None,)]
        assert summary.status == "ok" and summary.errors == 1
    elif kind in ("private", "gated"):
        # Access errors are not retried within a pass: even once is recorded, then healed.
        assert errors == [(QWEN8, QWEN8_FILE, kind)], name
    elif kind is None:
        # Range ignored: read correctly by streaming the prefix, noted once per pass.
        assert [e[2] for e in errors] == ["range_ignored"]
    else:
        assert errors == [], name
    hub.faults.clear()
    healed = _crawl(hub, faulty, make_client(hub), **scope)
    assert healed.errors == 0
    assert snapshot(faulty) == snapshot(clean)
    assert integrity_ok(faulty)


def test_repo_vanishing_mid_crawl_is_marked_and_the_pass_goes_on(
    hub: HubEmulator, url: str, make_client: Callable[..., HubClient]
) -> None:
    _crawl(hub, url, make_client(hub))
    # A new commit makes the repo "changed"; it is deleted just as its tree is requested.
    hub.state.commit(UNSLOTH, {}, title="touch")
    hub.faults.add(Fault.run(lambda: hub.state.delete_repo(UNSLOTH)), path=f"{UNSLOTH}/tree/")
    summary = _crawl(hub, url, make_client(hub))
    assert summary.status == "ok"
    assert rows(url, "SELECT kind FROM scan_errors WHERE repo_id = ?", UNSLOTH) == [("vanished",)]
    assert rows(url, "SELECT vanished_at IS NOT NULL FROM repos WHERE repo_id = ?", UNSLOTH) == [
        (1,)
    ]
    assert rows(url, "SELECT count(*) FROM v_quants WHERE repo_id = ?", UNSLOTH) == [(0,)]
    assert rows(
        url,
        "SELECT count(*) FROM quants q JOIN repos r ON r.id = q.repo_pk"
        " WHERE r.repo_id = ? AND q.vanished_at IS NULL",
        UNSLOTH,
    ) == [(0,)]
    # The search's live flag follows the vanished columns (crawler.catalog.store).
    assert rows(url, _LIVE_MISMATCHES) == [(0,)]
    assert rows(url, "SELECT count(*) FROM quants WHERE live") != [(0,)]


def test_repo_changing_mid_crawl_is_read_at_the_listed_revision_then_updated(
    hub: HubEmulator, url: str, make_client: Callable[..., HubClient], world_cache: FileCache
) -> None:
    path = "Qwen3.6-27B-Q8_0.gguf"
    new = Quant(path, "qwen35", "Q4_K_M-mtp-downgraded")
    hub.faults.add(
        Fault.run(lambda: reupload(hub.state, world_cache, UNSLOTH, new)),
        path=f"{UNSLOTH}/resolve/",
        times=1,
    )
    _crawl(hub, url, make_client(hub))
    listed_sha = rows(url, "SELECT sha FROM repos WHERE repo_id = ?", UNSLOTH)[0][0]
    assert listed_sha != hub.state.get(UNSLOTH).head.sha
    (before,) = rows(url, "SELECT mtp_preserved FROM v_quants WHERE path = ?", path)
    assert before == (1,)
    _crawl(hub, url, make_client(hub))
    (after,) = rows(url, "SELECT revision, mtp_preserved FROM v_quants WHERE path = ?", path)
    assert after == (hub.state.get(UNSLOTH).head.sha, 0)


def test_full_listing_marks_deleted_repos_vanished(
    hub: HubEmulator, url: str, make_client: Callable[..., HubClient]
) -> None:
    _crawl(hub, url, make_client(hub))
    hub.state.delete_repo(QWEN8)
    _crawl(hub, url, make_client(hub), full=False)
    assert rows(url, "SELECT vanished_at IS NULL FROM repos WHERE repo_id = ?", QWEN8) == [(1,)]
    _crawl(hub, url, make_client(hub), full=True)
    assert rows(url, "SELECT vanished_at IS NULL FROM repos WHERE repo_id = ?", QWEN8) == [(0,)]
    assert rows(url, "SELECT count(*) FROM v_quants WHERE repo_id = ?", QWEN8) == [(0,)]
    assert rows(url, _LIVE_MISMATCHES) == [(0,)]
    assert rows(
        url,
        "SELECT count(*) FROM quants q JOIN repos r ON r.id = q.repo_pk"
        " WHERE r.repo_id = ? AND q.live",
        QWEN8,
    ) == [(0,)]


class _StopAfter:
    """A Progress that asks the pass to stop after ``n`` repos."""

    def __init__(self, stop: threading.Event, n: int) -> None:
        self.stop, self.n, self.seen = stop, n, 0

    def start(self, total: int | None) -> None:
        pass

    def advance(self, label: str, counts: CrawlCounts) -> None:
        self.seen += 1
        if self.seen >= self.n:
            self.stop.set()

    def finish(self) -> None:
        pass


def test_stop_finishes_repos_in_flight_marks_interrupted_and_next_pass_completes(
    hub: HubEmulator, tmp_path, make_client: Callable[..., HubClient]
) -> None:
    clean = f"sqlite:///{tmp_path / 'clean.sqlite'}"
    url = f"sqlite:///{tmp_path / 'stopped.sqlite'}"
    _crawl(hub, clean, make_client(hub))
    stop = threading.Event()
    summary = _crawl(hub, url, make_client(hub), stop=stop, progress=_StopAfter(stop, 2))
    assert summary.status == "interrupted"
    assert 2 <= summary.repos_seen < len(WORLD) - 2
    assert rows(url, "SELECT status FROM scans") == [("interrupted",)]
    # No half-written repo: every repo row is either done or failing.
    assert integrity_ok(url)
    assert rows(url, "SELECT value FROM crawl_state WHERE key LIKE 'watermark:%'") == []
    hub.clear_log()
    _crawl(hub, url, make_client(hub))
    assert snapshot(url) == snapshot(clean)


def test_budget_stops_the_pass_and_is_recorded(
    hub: HubEmulator, url: str, make_client: Callable[..., HubClient]
) -> None:
    summary = _crawl(hub, url, make_client(hub, max_requests=12))
    assert summary.status == "interrupted"
    assert "budget" in (summary.message or "")
    kinds = {k for (k,) in rows(url, "SELECT kind FROM scan_errors")}
    assert "budget" in kinds
    assert integrity_ok(url)


def test_crawl_and_recrawl_on_each_database(
    hub: HubEmulator, catalog_url: str, make_client: Callable[..., HubClient]
) -> None:
    """The write path on SQLite and (when configured) PostgreSQL, read back through SQL."""
    first = _crawl(hub, catalog_url, make_client(hub))
    with Catalog.open(catalog_url) as catalog:
        _, rows = catalog.query_readonly("SELECT repo_id, path FROM v_quants")
        assert set(rows) == _expected_quants()
        _, kinds = catalog.query_readonly(
            "SELECT kind, count(*) FROM scan_errors GROUP BY kind ORDER BY kind"
        )
        assert kinds == [("gated", 1), ("malformed_gguf", 2)]
        _, groups = catalog.query_readonly(
            "SELECT count(*) FROM v_tensor_groups WHERE group_name = 'attn'"
        )
        assert groups == [(first.quants_analysed,)]
        # Each quant's copy class as the crawl wrote it is the one the refill computes from
        # the stored rows (the JSON and the groups read back from this database).
        assert _stored_classes(catalog) == _recomputed_classes(catalog)
        assert sum(key is not None for key in _stored_classes(catalog).values()) >= 5
    hub.clear_log()
    again = _crawl(hub, catalog_url, make_client(hub))
    assert again.files_analysed == 0
    touched = {p.split("/resolve/")[0].strip("/") for p in _resolve_paths(hub)}
    assert touched == FAILING


def _stored_classes(catalog: Catalog) -> dict[int, int | None]:
    with catalog.engine.connect() as conn:
        return dict(conn.execute(select(QuantRow.id, QuantRow.copy_key)).all())


def _recomputed_classes(catalog: Catalog) -> dict[int, int | None]:
    """copy_key from each quant's stored groups (name order), memory model and label."""
    with catalog.engine.connect() as conn:
        groups: dict[int, list[tuple[str, int, int, float | None]]] = {}
        for qid, *group in conn.execute(
            select(
                Group.quant_id, Group.group_name, Group.n_params, Group.n_bytes, Group.bpw
            ).order_by(Group.quant_id, Group.group_name)
        ):
            groups.setdefault(qid, []).append(tuple(group))
        out = dict.fromkeys(_stored_classes(catalog))
        for qid, status, co, label in conn.execute(
            select(Memory.quant_id, Memory.status, Memory.coefficients, QuantRow.quant_label).join(
                QuantRow, QuantRow.id == Memory.quant_id
            )
        ):
            out[qid] = stored_columns(groups.get(qid, []), status, co, label)["copy_key"]
        return out


def test_retry_waits_end_when_the_pass_is_stopped():
    """SIGTERM during a Hub outage: the retry wait returns at once instead of sleeping it out."""
    import threading
    import time

    from crawler.base.errors import HubUnavailable
    from crawler.crawl.scan import _interruptible_sleep

    stop = threading.Event()
    sleep = _interruptible_sleep(stop)
    started = time.monotonic()
    sleep(0.01)  # not stopped: an ordinary wait
    threading.Timer(0.05, stop.set).start()
    with pytest.raises(HubUnavailable, match="stopped"):
        sleep(30)
    assert time.monotonic() - started < 5
