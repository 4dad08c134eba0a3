"""Several crawl processes sharing one PostgreSQL catalog never read the same repo twice.

Two real ``quants crawl`` processes (separate data directories, as on two machines) crawl the
fixture world from the emulator into one PostgreSQL database at the same time. Every repo they
complete had its file tree listed once and its quants analysed once in total, the work was
shared, and the catalog equals one crawl's. The claim primitives are also checked directly:
one winner per repo, a lapsed (killed crawler's) claim is taken over, a live one is not.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from crawler.catalog import Catalog
from crawler.catalog.repo_locks import claim_repo, release_repo
from tests.cli import clean_env, run_quants, start_quants
from tests.hub_emulator import HubEmulator
from tests.hub_emulator.faults import Fault
from tests.pg import databases
from tests.schemas import checked

pytestmark = pytest.mark.postgres


def _views(db: str) -> list[tuple[object, ...]]:
    with Catalog.open(db) as catalog, catalog.engine.connect() as conn:
        return sorted(
            tuple(r)
            for r in conn.execute(
                text(
                    "SELECT repo_id, path, revision, quant_label, size_bytes, bpw, mtp_present,"
                    " attn_min_bits FROM v_quants"
                )
            )
        )


def test_two_concurrent_crawls_share_the_work_and_never_read_a_repo_twice(
    hub: HubEmulator,
    tmp_path: Path,
) -> None:
    hub.latency_s = 0.01  # spread the crawls over time so they interleave
    # Neither crawl lists a repo before both have started: on a busy machine one process may take
    # a second longer to start than the other crawl needs to finish.
    both_started = threading.Barrier(2, timeout=120)
    gate = hub.faults.add(Fault.run(both_started.wait), method="GET", path="/api/models", times=2)
    with databases("quants_claims") as new:
        shared, alone = new(), new()
        procs = [
            start_quants(
                "crawl",
                "--endpoint",
                hub.endpoint,
                "--db",
                shared,
                "--all",
                "--json",
                env=clean_env(tmp_path / name),
            )
            for name in ("machine-a", "machine-b")
        ]
        outs = [p.communicate(timeout=240) for p in procs]
        for proc, (_out, err) in zip(procs, outs, strict=True):
            assert proc.returncode == 0, err
        summaries = [checked("crawl", out) for out, _ in outs]
        assert gate.fired == 2  # both waited at the gate
        trees = Counter(
            "/".join(r.path.split("/")[3:5]) for r in hub.requests(path="/tree/", method="GET")
        )
        with Catalog.open(shared) as catalog, catalog.engine.connect() as conn:
            done = [
                r
                for (r,) in conn.execute(text("SELECT repo_id FROM repos WHERE scanned_sha = sha"))
            ]
            left = conn.execute(text("SELECT count(*) FROM repo_claims")).scalar()
        assert len(done) > 10 and left == 0  # every claim was released
        twice = {r: trees[r] for r in done if trees[r] != 1}
        assert not twice, f"repos listed by both crawlers: {twice}"
        # Each analysable quant was analysed by exactly one of the two, and both did some work.
        hub.latency_s = 0.0
        out = run_quants(
            "crawl",
            "--endpoint",
            hub.endpoint,
            "--db",
            alone,
            "--all",
            "--json",
            env=clean_env(tmp_path / "single"),
        )
        assert out.returncode == 0, out.stderr
        single = checked("crawl", out.stdout)
        assert sum(s["quants_analysed"] for s in summaries) == single["quants_analysed"]
        assert all(s["repos_new"] > 0 for s in summaries), summaries
        assert _views(shared) == _views(alone)


def test_claims_one_winner_lapsed_claims_taken_over() -> None:
    with databases("quants_claims") as new, Catalog.open(new()) as catalog:
        now = datetime(2026, 12, 3, tzinfo=UTC)
        assert claim_repo(catalog, "a/b", "one", now=now)
        assert not claim_repo(catalog, "a/b", "two", now=now + timedelta(minutes=1))
        # A killed crawler never releases: its claim lapses after the TTL.
        assert claim_repo(catalog, "a/b", "two", now=now + timedelta(hours=1))
        assert not claim_repo(catalog, "a/b", "one", now=now + timedelta(hours=1, minutes=1))
        release_repo(catalog, "a/b", "one")  # not the holder: no effect
        assert not claim_repo(catalog, "a/b", "three", now=now + timedelta(hours=1, minutes=2))
        release_repo(catalog, "a/b", "two")
        assert claim_repo(catalog, "a/b", "three", now=now + timedelta(hours=1, minutes=3))
        # The same machine's crawler, restarted after a kill, takes its own claim back at once.
        assert claim_repo(catalog, "a/b", "three", now=now + timedelta(hours=1, minutes=4))
