"""Measured quality end to end: a crawl of the emulator's repos that publish KLD (a MagicQuant
manifest, a llama-perplexity log) shows the figures in search, compare and the web app.

The catalog is crawled by the real CLI from the Hub emulator serving MEASURED_WORLD; the
expected values are the fixture's own numbers and sizes, never search's code path.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from crawler.catalog import Catalog
from crawler.catalog.tables import MeasuredQuality, Repo
from tests.cli import clean_env, run_quants
from tests.fixtures.world import MEASURED_WORLD, FileCache, populate
from tests.hub_emulator.server import HubEmulator
from tests.web.conftest import serving

MQ = "magiccodingman/Qwen3.6-27B-MagicQuant-GGUF"
LOGS = "kldlogs/Qwen3.6-27B-GGUF"
#: The manifest's figures for the files the repo holds (tests/fixtures/world.py).
MQ_KLD = {
    "Qwen3.6-27B-MQ-Q6_K_1.gguf": 0.001650,
    "Qwen3.6-27B-MQ-IQ4_XS_1.gguf": 0.010870,
    "Qwen3.6-27B-MQ-Q4_K_M_1.gguf": 0.024260,
}


def quants(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    return run_quants(*args, env=clean_env(tmp), timeout=120)


@pytest.fixture(scope="module")
def crawled(tmp_path_factory, world_cache: FileCache) -> tuple[str, Path, str]:
    tmp = tmp_path_factory.mktemp("measured-e2e")
    db = f"sqlite:///{tmp / 'catalog.sqlite'}"
    emulator = HubEmulator()
    populate(emulator.state, world_cache, MEASURED_WORLD)
    with emulator:
        out = quants(
            "crawl", "--endpoint", emulator.endpoint, "--db", db, "--all", "--json", tmp=tmp
        )
    assert out.returncode == 0, out.stderr
    with Catalog.open(db) as catalog, catalog.session() as s:
        sha = s.scalar(select(Repo.sha).where(Repo.repo_id == MQ))
    assert sha
    return db, tmp, sha


def _search(crawled: tuple[str, Path, str], *args: str) -> dict[str, Any]:
    db, tmp, _ = crawled
    out = quants("search", "qwen3.6 27b", "--vram", "80", "--db", db, "--json", *args, tmp=tmp)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_crawl_stores_rows_keyed_to_file_size_and_revision(crawled) -> None:
    db, _, sha = crawled
    with Catalog.open(db) as catalog, catalog.session() as s:
        rows = s.execute(
            select(Repo.repo_id, MeasuredQuality).join(Repo, Repo.id == MeasuredQuality.repo_pk)
        ).all()
    got = {(repo, m.quant_path, m.metric): m for repo, m in rows}
    # The external baseline (not in the repo) and the stale row (another size) are not stored.
    assert {p for r, p, _ in got if r == MQ} == set(MQ_KLD)
    for name, kld in MQ_KLD.items():
        m = got[MQ, name, "mean_kld"]
        assert m.value == pytest.approx(kld) and m.revision == sha and m.size_bytes > 0
        assert m.source_url == (
            f"https://huggingface.co/{MQ}/blob/{sha}/magicquant-manifest/"
            "magicquant.final-survivors.json"
        )
        assert m.corpus is None and m.fmt == "magicquant"
        assert (MQ, name, "ppl") in got
    log = {metric: m.value for (r, _, metric), m in got.items() if r == LOGS}
    assert log == pytest.approx({"mean_kld": 0.031273, "p99.9_kld": 1.834118, "ppl": 6.705115})


def test_search_json_shows_measured_beside_the_estimate(crawled) -> None:
    doc = _search(crawled)
    by_path = {(r["repo"], r["path"]): r for r in doc["results"]}
    for name, kld in MQ_KLD.items():
        r = by_path[MQ, name]
        measured = {m["metric"]: m for m in r["measured"]}
        assert measured["mean_kld"]["value"] == pytest.approx(kld)
        assert measured["mean_kld"]["source_url"].endswith("magicquant.final-survivors.json")
        # The estimate is still there and is the model's own KLD, not the measured one.
        assert r["quality"] is not None
        assert r["quality_detail"]["kld"] != pytest.approx(kld)
    assert by_path[MQ, "Qwen3.6-27B-MQ-Q8_0_1.gguf"]["measured"] == []
    log = {m["metric"] for m in by_path[LOGS, "Qwen3.6-27B-Q4_0.gguf"]["measured"]}
    assert log == {"mean_kld", "p99.9_kld", "ppl"}


def test_search_and_compare_carry_the_graded_mtp_reading(crawled) -> None:
    results = _search(crawled)["results"]
    by_path = {(r["repo"], r["path"]): r["mtp"] for r in results}
    q8 = by_path[MQ, "Qwen3.6-27B-MQ-Q8_0_1.gguf"]
    assert (q8["grade"], q8["preserved"]) == ("at_bar", True)
    low = [m for m in by_path.values() if m["preserved"] is False]
    assert low  # the fixture's Q4_0 and Q4_K_M files keep their MTP block at 4 bits
    for m in low:
        assert m["min_bits"] == 4 and m["grade"] == "likely_fine"
        assert "github.com/lablup/mlxcel/pull/1203" in m["reading"]
    db, tmp, _ = crawled
    out = quants("compare", "Qwen/Qwen3.6-27B", "--db", db, "--json", tmp=tmp)
    grades = {q["path"]: q["mtp"]["grade"] for q in json.loads(out.stdout)["quants"]}
    assert grades["Qwen3.6-27B-MQ-Q8_0_1.gguf"] == "at_bar"


def test_sort_quality_orders_only_peers_by_measured_kld(crawled) -> None:
    results = _search(crawled, "--sort", "quality")["results"]
    # One base model (capability equal): the estimate orders by effective bits (the tiny fixture
    # models round every score to the same two decimals).
    bits = [r["quality_detail"]["effective_bits"] for r in results]
    assert len(set(bits)) == len(results)  # no ties: one estimate order
    by_estimate = sorted(results, key=lambda r: -r["quality_detail"]["effective_bits"])
    peers = [i for i, r in enumerate(by_estimate) if r["repo"] == MQ and r["path"] in MQ_KLD]
    # The manifest's files hold the same slots as in the estimate's order, lowest KLD first...
    assert [results[i]["path"] for i in peers] == sorted(MQ_KLD, key=MQ_KLD.__getitem__)
    # ... and that is not the estimate's order (the fixture's IQ4_XS beats its Q4_K_M).
    assert [by_estimate[i]["path"] for i in peers] != [results[i]["path"] for i in peers]
    # Every other result, the log's file with its different source included, keeps its slot.
    others = [i for i in range(len(results)) if i not in peers]
    assert [results[i]["path"] for i in others] == [by_estimate[i]["path"] for i in others]
    assert [r["rank"] for r in results] == list(range(1, len(results) + 1))


def test_search_text_prints_the_measured_lines(crawled) -> None:
    db, tmp, sha = crawled
    out = quants("search", "qwen3.6 27b", "--vram", "80", "--db", db, tmp=tmp)
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if ln.strip().startswith("measured:")]
    assert any("KLD 0.01087 (magicquant), corpus not stated;" in ln and sha in ln for ln in lines)
    assert any("99.9% KLD 1.834 (llama-perplexity)" in ln for ln in lines)
    assert "does not replace" in out.stderr  # the footer
    assert "LOW" in out.stdout and "4-5 bit heads drafting within noise" in out.stderr


def test_compare_shows_measured_in_json_and_text(crawled) -> None:
    db, tmp, _ = crawled
    out = quants("compare", "Qwen/Qwen3.6-27B", "--db", db, "--json", tmp=tmp)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    by_path = {(q["repo"], q["path"]): q for q in doc["quants"]}
    for name, kld in MQ_KLD.items():
        q = by_path[MQ, name]
        assert q["quality"] is not None
        assert [m["value"] for m in q["measured"] if m["metric"] == "mean_kld"] == [kld]
    text = quants("compare", "Qwen/Qwen3.6-27B", "--db", db, tmp=tmp)
    assert text.returncode == 0, text.stderr
    assert re.search(r"MagicQuant-GGUF +IQ4_XS .*KLD 0\.01087\n", text.stdout)
    assert f"{MQ}:" in text.stdout and "magicquant.final-survivors.json" in text.stdout


def test_web_app_shows_measured_with_its_source(crawled) -> None:
    db, tmp, sha = crawled
    with serving(db, tmp) as served:
        status, _, page = served.get("/model", {"q": "Qwen/Qwen3.6-27B"})
        assert status == 200
        link = f"https://huggingface.co/{MQ}/blob/{sha}/magicquant-manifest/"
        # KLD and PPL of each of the manifest's files in the repo, each linked to its source.
        assert page.count(f'<a class="measured" href="{link}') == 2 * len(MQ_KLD)
        assert "measured KLD 0.01087 (magicquant)" in page
        status, _, page = served.get("/", {"vram": 80, "q": "qwen3.6 27b"})
        assert status == 200 and "measured KLD 0.03127 (llama-perplexity)" in page
        status, _, page = served.get("/quant", {"repo": MQ, "path": "Qwen3.6-27B-MQ-Q8_0_1.gguf"})
        assert status == 200
        assert '<span class="mtp-reading">(at the bar: 8-bit head (6-8 bit))</span>' in page
        status, doc = served.json("/api/compare", {"q": "Qwen/Qwen3.6-27B"})
        assert status == 200
        assert any(m["metric"] == "p99.9_kld" for q in doc["quants"] for m in q["measured"])


@pytest.mark.postgres
def test_postgres_catalog_shows_the_same_measured_values(
    tmp_path,
    world_cache: FileCache,
    crawled,
) -> None:
    """The same crawl into PostgreSQL: search returns the same measured rows in the same order."""
    from tests.pg import databases

    with databases("quants_measured") as new:
        db = new()
        emulator = HubEmulator()
        populate(emulator.state, world_cache, MEASURED_WORLD)
        with emulator:
            out = quants(
                "crawl", "--endpoint", emulator.endpoint, "--db", db, "--all", "--json",
                tmp=tmp_path,
            )  # fmt: skip
        assert out.returncode == 0, out.stderr
        pg = _search((db, tmp_path, ""))
        lite = _search(crawled)

        def measured(doc: dict[str, Any]) -> dict[tuple[str, str], list[tuple[str, float]]]:
            return {
                (r["repo"], r["path"]): [(m["metric"], m["value"]) for m in r["measured"]]
                for r in doc["results"]
            }

        assert measured(pg) == measured(lite)
        assert [r["path"] for r in pg["results"]] == [r["path"] for r in lite["results"]]
