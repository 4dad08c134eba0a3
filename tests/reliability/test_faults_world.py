"""Network faults over a crawl of the whole fixture world, then a fault-free crawl heals it all.

Each fault kind of the emulator (429 with Retry-After, 5xx, connection reset, truncated body,
slow body, latency past the client timeout, Range ignored) is injected alone at a high rate on
every request of both origins (Hub API, resolve, CDN), then all of them mixed together with a
world mutation (a re-upload mid-crawl). After each faulty crawl:

- nothing is lost silently: every repo the faulty crawl did not finish, and every quant missing
  from its catalog, has a ``scan_errors`` row of that scan; the scan's error count is its rows;
- the catalog is consistent (``integrity_check``, foreign keys);
- one fault-free crawl later, the catalog equals a clean crawl's of the same world
  (tests/hub/snapshot.py: every analysis fact, no timestamps or row ids).

The client's retries sleep on a fake clock; timeouts are real (0.5 s). ``QUANTS_RELIABILITY_FULL=1``
runs more seeds at higher rates (figures in docs/reliability.md).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from crawler.base.config import Settings
from crawler.catalog import Catalog
from crawler.crawl.scan import ScanSummary, run_once
from crawler.hub import HubClient
from tests.fixtures.world import WORLD, FileCache, Quant, reupload
from tests.hub.snapshot import integrity_ok, rows, snapshot
from tests.hub_emulator import Fault, HubEmulator
from tests.reliability.conftest import count

FULL = os.environ.get("QUANTS_RELIABILITY_FULL", "") not in ("", "0")
SEEDS = range(1, 6) if FULL else range(1, 2)
RATE = 0.5 if FULL else 0.3
KINDS: dict[str, list[Fault]] = {
    "429": [Fault.rate_limited(retry_after=1)],
    "5xx": [Fault.http(500), Fault.http(502), Fault.http(503), Fault.http(504)],
    "reset": [Fault.reset()],
    "truncate": [Fault.truncate(after_bytes=100), Fault.truncate(after_bytes=5000)],
    "slow": [Fault.slow(chunk=16384, pause_s=0.002)],
    "timeout": [Fault.delay(0.8)],
    "ignore_range": [Fault.ignore_range()],
}


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _crawl(emu: HubEmulator, url: str, **client: Any) -> ScanSummary:
    clock = _Clock()
    settings = Settings(hf_endpoint=emu.endpoint, db_url=url, timeout_s=0.5)
    hub_client = HubClient(
        settings, max_retries=client.pop("max_retries", 5), sleep=clock.sleep, clock=clock
    )
    with Catalog.open(url) as catalog:
        return run_once(settings, hub=hub_client, catalog=catalog, authors=(), searches=())


def _quant_paths(url: str) -> set[tuple[str, str]]:
    return set(rows(url, "SELECT repo_id, path FROM v_quants"))


def assert_every_failure_recorded(url: str, clean: str, summary: ScanSummary) -> None:
    """What the faulty crawl lacks is accounted for by scan_errors rows of its scan."""
    scan_id = summary.scan_id
    errors = rows(url, "SELECT repo_id, path, kind FROM scan_errors WHERE scan_id = ?", scan_id)
    assert len(errors) == summary.errors
    failed_repos = {r for r, _, _ in errors}
    unfinished = {
        r
        for (r,) in rows(
            url, "SELECT repo_id FROM repos WHERE scanned_sha IS NULL OR scanned_sha != sha"
        )
    }
    # A repo left unfinished has a recorded failure; a listing failure names no repo (NULL).
    listing_failed = None in failed_repos
    assert unfinished <= failed_repos or listing_failed, unfinished - failed_repos
    missing = _quant_paths(clean) - _quant_paths(url)
    missing_repos = {r for r, _ in missing}
    assert missing_repos <= failed_repos or listing_failed, missing_repos - failed_repos
    # Finished repos hold exactly the clean crawl's quants.
    done = {
        r for (r,) in rows(url, "SELECT repo_id FROM repos WHERE scanned_sha = sha")
    } - failed_repos
    assert {q for q in _quant_paths(url) if q[0] in done} == {
        q for q in _quant_paths(clean) if q[0] in done
    }


@pytest.fixture(scope="module")
def clean_snapshot(
    _shared_hub: HubEmulator,
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[str, dict[str, Any]]:
    _shared_hub.reset()
    url = f"sqlite:///{tmp_path_factory.mktemp('clean') / 'clean.sqlite'}"
    summary = _crawl(_shared_hub, url)
    assert summary.status == "ok"
    return url, snapshot(url)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_one_fault_kind_at_a_high_rate_then_heal(
    shared_hub: HubEmulator,
    clean_snapshot: tuple[str, dict[str, Any]],
    tmp_path,
    kind: str,
    seed: int,
    figures: dict[str, Any],
) -> None:
    clean_url, clean = clean_snapshot
    url = f"sqlite:///{tmp_path / 'faulty.sqlite'}"
    faults = KINDS[kind]
    rules = [
        shared_hub.faults.add(f, rate=RATE / len(faults), seed=seed * 100 + i)
        for i, f in enumerate(faults)
    ]
    summary = _crawl(shared_hub, url, max_retries=2)
    fired = sum(r.fired for r in rules)
    count(figures, "faults injected", kind, fired)
    count(figures, "faulty crawls", "alone")
    count(figures, "failures recorded in scan_errors", kind, summary.errors)
    # Few when the listing itself fails (nothing else is requested; recorded, healed below).
    assert fired >= 1, f"{kind}: no fault fired"
    assert summary.status == "ok"
    assert integrity_ok(url)
    assert_every_failure_recorded(url, clean_url, summary)
    shared_hub.faults.clear()
    healed = _crawl(shared_hub, url)
    assert healed.errors == _expected_persistent_errors(clean_url)
    assert snapshot(url) == clean
    assert integrity_ok(url)


def _expected_persistent_errors(clean_url: str) -> int:
    # The world's own failures (gated repo, malformed files) stay errors on every pass.
    (n,) = rows(clean_url, "SELECT count(*) FROM scan_errors")[0]
    return int(n)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_fault_kind_mixed_with_a_reupload_then_heal(
    hub: HubEmulator,
    world_cache: FileCache,
    tmp_path,
    seed: int,
    figures: dict[str, Any],
) -> None:
    url = f"sqlite:///{tmp_path / 'faulty.sqlite'}"
    clean_url = f"sqlite:///{tmp_path / 'clean.sqlite'}"
    everything = [f for faults in KINDS.values() for f in faults]
    rules = [
        hub.faults.add(f, rate=(RATE + 0.1) / len(everything), seed=seed * 1000 + i)
        for i, f in enumerate(everything)
    ]
    repo = "unsloth/Qwen3.6-27B-GGUF"
    new = Quant("Qwen3.6-27B-Q8_0.gguf", "qwen35", "Q4_K_M-mtp-downgraded")
    mutation = hub.faults.add(
        Fault.run(lambda: reupload(hub.state, world_cache, repo, new)),
        path=f"/{repo}/resolve/",
        times=1,
    )
    summary = _crawl(hub, url, max_retries=2)
    fired = sum(r.fired for r in rules)
    count(figures, "faults injected", "mixed", fired)
    count(figures, "faulty crawls", "mixed")
    count(figures, "failures recorded in scan_errors", "mixed", summary.errors)
    assert fired >= 10 and mutation.fired == 1
    assert integrity_ok(url)
    hub.faults.clear()
    # The reference: a clean crawl of the world as it is now (after the re-upload).
    _crawl(hub, clean_url)
    assert_every_failure_recorded(url, clean_url, summary)
    _crawl(hub, url)
    assert _facts(snapshot(url)) == _facts(snapshot(clean_url))
    (revision,) = rows(url, "SELECT revision FROM v_quants WHERE path = ?", new.path)[0]
    assert revision == hub.state.get(repo).head.sha
    assert integrity_ok(url)


def _facts(snap: dict[str, Any]) -> dict[str, Any]:
    """A snapshot without what legitimately depends on when a file was read during a change of
    the repo: the revision each unchanged file was read at, and the quant history."""
    drop = {"quants": 2, "files": 8, "tensor_tables": 2}
    out = {k: v for k, v in snap.items() if k != "versions"}
    for table, i in drop.items():
        out[table] = [row[:i] + row[i + 1 :] for row in snap[table]]
    # quants.profile (inspect's JSON) names the revision too.
    out["quants"] = [
        tuple(_without_revision(v) if isinstance(v, str) and v.startswith("{") else v for v in row)
        for row in out["quants"]
    ]
    return out


def _without_revision(text: str) -> str:
    doc = json.loads(text)
    doc.pop("revision", None)
    return json.dumps(doc, sort_keys=True)


def test_world_has_quants_of_every_shape() -> None:
    # The faults act on split shards, byte parts, sidecars and plain files alike.
    shapes = {
        "split" if f.split else "parts" if f.parts else "file"
        for r in WORLD
        for f in r.files
        if isinstance(f, Quant)
    }
    assert shapes == {"split", "parts", "file"}
