"""``quants search`` and ``quants sql`` in loops while ``quants crawl`` writes SQLite (WAL).

Two reader processes (tests/reliability/readers.py: the real CLI entry point, called in a loop)
read while a crawl of the whole fixture world fills the catalog, then while a second crawl
re-analyses re-uploaded files (deletes and rewrites rows). Every read must succeed (no "database
is locked", no internal error) and none may be torn:

- ``sql``: in one statement, every analysed quant comes with its tensor groups, memory model and
  tensor table (all written in its repo's transaction);
- ``search``: for every repo in a result, its quants are exactly those of that repo after the
  first crawl or after the second: never part of a repo.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from crawler.catalog import Catalog
from tests.cli import clean_env, run_quants
from tests.fixtures.world import FileCache, Quant, reupload
from tests.hub_emulator import HubEmulator
from tests.reliability.conftest import count
from tests.reliability.readers import SEARCH_ARGS, _call
from tests.schemas import checked

ROOT = Path(__file__).resolve().parents[2]
REUPLOADS = [
    ("unsloth/Qwen3.6-27B-GGUF", Quant("Qwen3.6-27B-Q8_0.gguf", "qwen35", "Q4_K_M")),
    ("lmstudio-community/Qwen3-8B-GGUF", Quant("Qwen3-8B-Q8_0.gguf", "qwen3", "Q6_K")),
]


def _crawl(emu: HubEmulator, db: str, tmp: Path) -> None:
    out = run_quants(
        "crawl", "--endpoint", emu.endpoint, "--db", db, "--all", "--json", env=clean_env(tmp)
    )
    assert out.returncode == 0, out.stderr[-3000:]


def _by_repo(search_json: str) -> dict[str, frozenset[str]]:
    groups: dict[str, set[str]] = defaultdict(set)
    for r in checked("search", search_json)["results"]:
        groups[r["repo"]].add(r["path"])
    return {k: frozenset(v) for k, v in groups.items()}


def _search_now(db: str) -> dict[str, frozenset[str]]:
    code, out, err = _call(["search", *SEARCH_ARGS, "--db", db])
    assert code == 0, err
    return _by_repo(out)


def test_reads_while_a_crawl_writes_are_never_locked_or_torn(
    hub: HubEmulator,
    world_cache: FileCache,
    tmp_path: Path,
    figures: dict[str, Any],
) -> None:
    db = f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    Catalog.open(db).close()  # the schema exists before the readers start
    stop = tmp_path / "stop"
    hub.latency_s = 0.005  # spread the crawl's writes over a few seconds
    readers = {
        kind: (
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.reliability.readers",
                    kind,
                    db,
                    str(tmp_path / f"{kind}.jsonl"),
                    str(stop),
                ],
                env=clean_env(tmp_path),
                cwd=ROOT,
            ),
            tmp_path / f"{kind}.jsonl",
        )
        for kind in ("search", "sql")
    }
    try:
        _crawl(hub, db, tmp_path)
        first = _search_now(db)
        for repo_id, quant in REUPLOADS:
            reupload(hub.state, world_cache, repo_id, quant)
        _crawl(hub, db, tmp_path)
    finally:
        stop.touch()
        for proc, _ in readers.values():
            proc.wait(timeout=120)
    final = _search_now(db)
    changed = {repo_id for repo_id, _ in REUPLOADS}
    assert {r for r in final if final[r] != first.get(r)} <= changed

    calls: dict[str, list[dict[str, Any]]] = {
        kind: [json.loads(line) for line in path.read_text().splitlines()]
        for kind, (_, path) in readers.items()
    }
    for kind, results in calls.items():
        for call in results:
            assert "locked" not in call["err"].lower(), (kind, call["err"])
            assert "internal error" not in call["err"], (kind, call["err"])
            # search exits 3 while the catalog is still empty (nothing fits yet).
            assert call["code"] in ((0, 3) if kind == "search" else (0,)), (kind, call["err"])

    sizes = set()
    for call in calls["sql"]:
        rows = json.loads(call["out"])
        sizes.add(len(rows))
        torn = [r for r in rows if not (r["n_groups"] > 0 and r["n_memory"] == r["n_tables"] == 1)]
        assert torn == []
    # The reads really overlapped the writes: they saw the catalog at several sizes.
    assert len(sizes) >= 3, sizes

    seen_partial_catalog = False
    for call in calls["search"]:
        if call["code"] != 0:
            continue
        got = _by_repo(call["out"])
        seen_partial_catalog |= len(got) < len(final)
        for repo, paths in got.items():
            assert paths in (first.get(repo), final.get(repo)), (repo, sorted(paths))
    assert seen_partial_catalog
    assert len(calls["search"]) >= 5 and len(calls["sql"]) >= 5
    count(figures, "concurrency", "quants search calls", len(calls["search"]))
    count(figures, "concurrency", "quants sql calls", len(calls["sql"]))
    count(figures, "concurrency", "catalog sizes seen by sql", len(sizes))
