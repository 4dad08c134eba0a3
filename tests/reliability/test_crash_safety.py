"""SIGKILL of ``quants crawl`` at random points, then a normal crawl: the catalog is whole and equal
to a clean crawl's, on SQLite and on PostgreSQL.

Kill points are drawn (seeded) from three kinds, over the whole pass of the fixture world:

- ``request:N``: while the emulator answers the Nth Hub/CDN request (listing, trees, header
  reads; repos are written while others are read, so also around transactions);
- ``stmt:N``: just before the Nth catalog statement that is not a SELECT: inside a transaction,
  between its writes, or inside the schema migration of the first open (low N);
- ``commit:N``: when the Nth transaction is about to commit, all its writes sent.

The two catalog kinds use tests/reliability/killhook/sitecustomize.py, which SQLAlchemy event
hooks load into the real CLI process. After each kill: SQLite ``integrity_check`` and foreign keys
are ok, the next ``quants crawl`` exits 0, and the catalog's canonical dump (every analysis fact,
no timestamps or row ids: tests/hub/snapshot.py) equals a clean crawl's.
``QUANTS_RELIABILITY_FULL=1`` draws 24 points per backend (figures in docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli import KillLater, clean_env, run_quants, start_quants
from tests.hub.snapshot import _QUERIES, integrity_ok, snapshot
from tests.hub_emulator import Fault, HubEmulator
from tests.pg import databases
from tests.reliability.conftest import count

ROOT = Path(__file__).resolve().parents[2]
KILLHOOK = Path(__file__).resolve().parent / "killhook"
FULL = os.environ.get("QUANTS_RELIABILITY_FULL", "") not in ("", "0")


def _env(tmp: Path, kill_at: str | None) -> dict[str, str]:
    hook = {"PYTHONPATH": str(KILLHOOK), "QUANTS_TEST_KILL_AT": kill_at} if kill_at else {}
    return clean_env(tmp, **hook)


def _crawl_args(endpoint: str, db: str) -> tuple[str, ...]:
    return ("crawl", "--endpoint", endpoint, "--db", db, "--all", "--json")


def crawl(
    emu: HubEmulator, db: str, tmp: Path, kill_at: str | None = None
) -> subprocess.CompletedProcess[str]:
    return run_quants(*_crawl_args(emu.endpoint, db), env=_env(tmp, kill_at))


def dump(url: str) -> dict[str, Any]:
    """Canonical dump of the catalog (same facts as tests/hub/snapshot.py on any backend)."""
    if url.startswith("sqlite"):
        return snapshot(url)
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            out: dict[str, Any] = {
                name: [tuple(r) for r in conn.execute(text(q))] for name, q in _QUERIES.items()
            }
            out["tensor_tables"] = [
                (r[0], r[1], r[2], r[3], r[4], zlib.decompress(r[5]))
                for r in conn.execute(
                    text(
                        "SELECT r.repo_id, q.path, t.revision, t.encoding, t.n_tensors, t.data"
                        " FROM tensor_tables t JOIN quants q ON q.id = t.quant_id"
                        " JOIN repos r ON r.id = q.repo_pk ORDER BY r.repo_id, q.path"
                    )
                )
            ]
            return out
    finally:
        engine.dispose()


def consistent(url: str) -> bool:
    """SQLite: integrity_check + foreign_key_check. PostgreSQL: no orphan rows."""
    if url.startswith("sqlite"):
        return integrity_ok(url)
    from sqlalchemy import create_engine, text

    orphans = (
        "SELECT count(*) FROM quants q LEFT JOIN repos r ON r.id = q.repo_pk WHERE r.id IS NULL",
        "SELECT count(*) FROM files f LEFT JOIN repos r ON r.id = f.repo_pk WHERE r.id IS NULL",
        "SELECT count(*) FROM tensor_groups g LEFT JOIN quants q ON q.id = g.quant_id"
        " WHERE q.id IS NULL",
        "SELECT count(*) FROM tensor_tables t LEFT JOIN quants q ON q.id = t.quant_id"
        " WHERE q.id IS NULL",
    )
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return all(conn.execute(text(q)).scalar() == 0 for q in orphans)
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def new_db(request, tmp_path: Path) -> Iterator[Callable[[], str]]:
    """A factory of fresh, empty catalog URLs on one backend."""
    made: list[str] = []
    if request.param == "sqlite":

        def make() -> str:
            made.append(f"sqlite:///{tmp_path / f'catalog-{len(made)}.sqlite'}")
            return made[-1]

        yield make
        return
    with databases("quants_kill") as new:
        yield new


def _points(rng: random.Random, counts: dict[str, int], n: int) -> list[tuple[str, int]]:
    """``n`` kill points: one inside the first open's schema migration, then the three kinds in
    turn at uniformly drawn positions of the pass."""
    points = [("stmt", rng.randint(1, 8))]
    kinds = ["commit", "request", "stmt"]
    while len(points) < n:
        kind = kinds[len(points) % 3]
        points.append((kind, rng.randint(1, counts[kind])))
    return points


def test_sigkill_at_random_points_then_a_crawl_equals_a_clean_one(
    hub: HubEmulator,
    new_db: Callable[[], str],
    tmp_path: Path,
    figures: dict[str, Any],
) -> None:
    clean_db = new_db()
    backend = clean_db.split(":", 1)[0].split("+")[0]
    counts_file = tmp_path / "counts.json"
    hub.clear_log()
    first = crawl(hub, clean_db, tmp_path, kill_at=f"count:{counts_file}")
    assert first.returncode == 0, first.stderr[-3000:]
    counts = json.loads(counts_file.read_text())
    counts["request"] = len(hub.requests())
    assert counts["commit"] >= 10 and counts["stmt"] >= 100, counts
    clean = dump(clean_db)
    n = 24 if FULL else (4 if backend == "sqlite" else 3)
    rng = random.Random(20261202 + len(backend))
    for kind, at in _points(rng, counts, n):
        where = f"{backend} {kind}:{at}"
        db = new_db()
        hub.faults.clear()
        if kind == "request":
            kill = KillLater()
            rule = hub.faults.add(Fault.run(kill), nth=at)
            proc = start_quants(*_crawl_args(hub.endpoint, db), env=_env(tmp_path, None))
            kill.started(proc.pid)
            proc.communicate(timeout=180)
            assert rule.fired == 1, f"{where}: never reached"
            returncode = proc.returncode
        else:
            returncode = crawl(hub, db, tmp_path, kill_at=f"{kind}:{at}").returncode
        assert returncode == -signal.SIGKILL, f"{where}: not killed ({returncode})"
        hub.faults.clear()
        if backend == "sqlite" and Path(db.removeprefix("sqlite:///")).exists():
            assert consistent(db), f"{where}: corrupt after the kill"
        again = crawl(hub, db, tmp_path)
        assert again.returncode == 0, f"{where}: {again.stderr[-2000:]}"
        assert consistent(db), where
        assert dump(db) == clean, f"{where}: catalog differs from a clean crawl"
        count(figures, f"kills survived ({backend})", kind)
