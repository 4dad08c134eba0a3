"""`quants search` / `quants compare` end to end over a catalog crawled from the Hub emulator.

The emulator serves the fixture world plus the real-size Qwen3.6-27B repo (REAL_WORLD), so the
24 GiB / 262144 search has quants on both sides of the budget. Expected sets are computed from
the catalog's stored coefficients with the memory model directly, never from search's own code
path (no SQL prefilter, no ranking).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from crawler.catalog import Catalog
from crawler.catalog.tables import MemoryModel, Quant, Repo
from crawler.fit import MemoryCoefficients, RunConfig, cheapest_cache_for, estimate
from crawler.ranking.evaluate import MTP_DECLINE_BELOW
from tests.cli import clean_env, run_quants
from tests.fixtures.shared import CrawledWorld
from tests.pg import databases
from tests.schemas import checked

GIB = 1024**3
DECLINE = MTP_DECLINE_BELOW.values()  # MTP auto's thresholds (dense, MoE)
CTX = 262144
HEADROOM = int(0.5 * GIB)


def quants(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    return run_quants(*args, env=clean_env(tmp), timeout=120)


@pytest.fixture(scope="module")
def catalog_db(tmp_path_factory, crawled_world: CrawledWorld) -> tuple[str, Path]:
    """This module's copy of the session's crawled world (WORLD, REAL_WORLD, a hostile repo)."""
    tmp = tmp_path_factory.mktemp("search-e2e")
    return crawled_world.copy(tmp), tmp


@pytest.fixture(scope="module")
def pg_catalog_db(tmp_path_factory, pg_crawled_world: CrawledWorld):
    """A copy of the same crawl in PostgreSQL (skipped without QUANTS_TEST_PG_URL)."""
    with databases("quants_search") as new:
        yield new(template=pg_crawled_world.db), tmp_path_factory.mktemp("search-e2e-pg")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def any_catalog_db(request):
    """The crawled catalog on SQLite, and on PostgreSQL when a server is configured."""
    return request.getfixturevalue("catalog_db" if request.param == "sqlite" else "pg_catalog_db")


def _stored(db: str) -> list[tuple[str, str, MemoryCoefficients]]:
    """(repo, path, coefficients) of every present quant whose memory rules are modelled."""
    with Catalog.open(db) as catalog, catalog.session() as s:
        rows = s.execute(
            select(Repo.repo_id, Quant.path, MemoryModel.coefficients)
            .join(Quant, Quant.repo_pk == Repo.id)
            .join(MemoryModel, MemoryModel.quant_id == Quant.id)
            .where(MemoryModel.status == "ok", Quant.vanished_at.is_(None))
        ).all()
    return [(r, p, MemoryCoefficients.from_json(c)) for r, p, c in rows]


def _search(catalog_db, *args: str) -> dict[str, Any]:
    db, tmp = catalog_db
    out = quants("search", *args, "--db", db, "--json", "--limit", "1000", tmp=tmp)
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = checked("search", out.stdout)
    return doc


def _keys(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(r["repo"], r["path"]) for r in doc["results"]}


def _cfg(**kw: Any) -> RunConfig:
    return RunConfig(ctx=CTX, flash_attn="on", parallel=1, **kw)


# --- the headline search -----------------------------------------------------------------------


def _usable(db: str) -> dict[tuple[str, str], bool]:
    """(repo, path) -> whether the quant's MTP head is present and preserved (catalog verdicts)."""
    with Catalog.open(db) as catalog, catalog.session() as s:
        rows = s.execute(
            select(Repo.repo_id, Quant.path, Quant.mtp_present, Quant.mtp_preserved).join(
                Quant, Quant.repo_pk == Repo.id
            )
        ).all()
    return {(r, p): bool(present and preserved) for r, p, present, preserved in rows}


@pytest.mark.parametrize("mtp", ["--no-mtp", "default"])
@pytest.mark.parametrize("cache", [("f16", "f16"), ("q8_0", "q8_0"), ("q4_0", "q4_0")])
def test_vram_24_ctx_262144_returns_exactly_the_quants_whose_estimate_fits(
    any_catalog_db, cache, mtp
):
    catalog_db = any_catalog_db
    k, v = cache
    flags = ("--no-mtp",) if mtp == "--no-mtp" else ()
    doc = _search(catalog_db, "--vram", "24", "--ctx", str(CTX), "-ctk", k, "-ctv", v, *flags)
    budget = 24 * GIB - HEADROOM
    usable = _usable(catalog_db[0])
    totals = {}
    for r, p, co in _stored(catalog_db[0]):
        # The policy by hand: MTP on where the head is usable and the run with it fits.
        with_mtp = _cfg(type_k=k, type_v=v, mtp=True)
        usable_here = mtp == "default" and usable[(r, p)] and co.mtp_available
        if usable_here and estimate(co, with_mtp).total <= budget:
            totals[(r, p)] = estimate(co, with_mtp).total
            continue
        totals[(r, p)] = estimate(co, _cfg(type_k=k, type_v=v)).total
    assert _keys(doc) == {key for key, t in totals.items() if t <= budget}
    for r in doc["results"]:
        assert r["total_bytes"] == totals[(r["repo"], r["path"])] <= budget
        assert r["margin_bytes"] == budget - r["total_bytes"]
    # documented order: quality, best first (ties by the documented tie-breaks)
    qualities = [r["quality"] for r in doc["results"]]
    assert qualities == sorted(qualities, reverse=True)
    assert [r["rank"] for r in doc["results"]] == list(range(1, len(doc["results"]) + 1))


def test_seed_default_search_lists_the_ud_q3_k_xl_with_a_quantized_cache_and_mtp(catalog_db):
    """The seed question, asked as a new user would (no cache or MTP flag, default limit)."""
    db, tmp = catalog_db
    out = quants("search", "--vram", "24", "--ctx", str(CTX), "--db", db, "--json", tmp=tmp)
    assert out.returncode == 0, out.stderr
    doc = checked("search", out.stdout)
    by_path = {(r["repo"], r["path"]): r for r in doc["results"]}
    seed = by_path[("unsloth/Qwen3.6-27B-MTP-GGUF", "Qwen3.6-27B-UD-Q3_K_XL.gguf")]
    assert seed["cache"] == {"type_k": "q4_0", "type_v": "q4_0"}
    assert seed["mtp"]["enabled"] is True and seed["bytes"]["mtp_kv"] > 0
    assert "-ctk q4_0 -ctv q4_0" in seed["command"] and "--spec-type draft-mtp" in seed["command"]
    assert seed["total_bytes"] <= 24 * GIB - HEADROOM
    # The UD-Q4_K_XL reaches 262144 only without its head: listed, MTP off.
    q4 = by_path[("unsloth/Qwen3.6-27B-MTP-GGUF", "Qwen3.6-27B-UD-Q4_K_XL.gguf")]
    assert q4["mtp"]["enabled"] is False and "draft-mtp" not in q4["command"]
    assert q4["cache"] == {"type_k": "q4_0", "type_v": "q4_0"}
    # The MTP-downgraded file (head < 6 bit) is never run with its head.
    low = by_path[("unsloth/Qwen3.6-27B-MTP-GGUF", "Qwen3.6-27B-Q4_K_M.gguf")]
    assert low["mtp"]["enabled"] is False
    assert doc["request"]["auto_cache"] is True and doc["request"]["mtp_auto"] is True
    table = quants("search", "--vram", "24", "--ctx", str(CTX), "--db", db, tmp=tmp)
    row = next(line for line in table.stdout.splitlines() if "MTP-GGUF:UD-Q3_K_XL" in line)
    assert "q4_0/q4_0" in row and " on" in row


@pytest.mark.parametrize(
    "flags,enabled", [(("--mtp",), {True}), (("--no-mtp",), {False}), ((), {True, False})]
)
def test_mtp_modes(catalog_db, flags, enabled):
    doc = _search(catalog_db, "qwen3.6 27b", "--vram", "24", "--ctx", "65536", *flags)
    seen = {r["mtp"]["enabled"] for r in doc["results"]}
    assert seen == enabled
    if flags == ("--mtp",):
        assert all(r["mtp"]["preserved"] for r in doc["results"])


def test_both_sides_of_the_24_gib_boundary_are_in_the_world(catalog_db):
    totals = [
        estimate(co, _cfg(type_k="q8_0", type_v="q8_0")).total for *_, co in _stored(catalog_db[0])
    ]
    budget = 24 * GIB - HEADROOM
    assert any(t <= budget for t in totals) and any(t > budget for t in totals)


def test_auto_cache_reaches_262144_for_the_real_27b_quants(catalog_db):
    doc = _search(catalog_db, "qwen3.6 27b", "--vram", "24", "--ctx", str(CTX), "--auto-cache")
    budget = 24 * GIB - HEADROOM
    stored = {(r, p): co for r, p, co in _stored(catalog_db[0])}
    expected = {
        key for key, co in stored.items()
        if "Qwen3.6-27B" in key[0] and cheapest_cache_for(co, _cfg(), budget, CTX) is not None
    }  # fmt: skip
    assert _keys(doc) == expected
    real = [r for r in doc["results"] if r["size_bytes"] > GIB]
    assert len(real) == 3  # the three real-size files fit only with a quantized cache
    for r in real:
        chosen = cheapest_cache_for(stored[(r["repo"], r["path"])], _cfg(), budget, CTX)
        assert chosen is not None
        assert (r["cache"]["type_k"], r["cache"]["type_v"]) == (chosen.type_k, chosen.type_v)
        assert r["cache"]["type_k"] != "f16"


def test_the_exact_boundary_through_the_cli(catalog_db):
    stored = _stored(catalog_db[0])
    repo, path, co = max(stored, key=lambda s: s[2].weights_bytes)  # a real-size file
    total = estimate(co, _cfg(type_k="q4_0", type_v="q4_0")).total
    base = ("--ctx", str(CTX), "-ctk", "q4_0", "-ctv", "q4_0", "--headroom", "0", "qwen3.6 27b")
    # GiB figures that are exactly `total` and `total - 1` bytes (x / 2**30 is exact in binary)
    inside = _search(catalog_db, "--vram", repr(total / GIB), *base)
    hit = [r for r in inside["results"] if (r["repo"], r["path"]) == (repo, path)]
    assert hit and hit[0]["margin_bytes"] == 0 and hit[0]["total_bytes"] == total
    db, tmp = catalog_db
    out = quants("search", "--vram", repr((total - 1) / GIB), *base, "--db", db, "--json",
                 "--limit", "1000", tmp=tmp)  # fmt: skip
    if out.returncode == 0:
        assert (repo, path) not in _keys(checked("search", out.stdout))
    else:
        assert out.returncode == 3


# --- query and GPU matching ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "query,must,must_not",
    [
        ("qwen3.6 27b", "Qwen3.6-27B", None),
        ("Qwen3.6-27B", "Qwen3.6-27B", None),
        ("unslth qwen3.6", "unsloth/", None),  # typo in a word
        ("qwen3.5", "Qwen3.5", "Qwen3.6"),  # digits never fuzzy
        ("gemma 12b q8_0", "gemma-3-12b", None),
    ],
)
def test_fuzzy_query(catalog_db, query, must, must_not):
    doc = _search(catalog_db, query, "--vram", "48", "--ctx", "8192")
    assert doc["results"]
    for r in doc["results"]:
        names = f"{r['repo']} {r['base_model']} {r['path']}"
        assert must.lower() in names.lower()
        if must_not:
            assert must_not.lower() not in names.lower()


def test_gpu_by_name_sets_budget_and_speed_and_says_which(catalog_db):
    db, tmp = catalog_db
    out = quants("search", "qwen3.6 27b", "--gpu", "5090 laptop", "--ctx", str(CTX),
                 "--auto-cache", "--db", db, "--json", tmp=tmp)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "GeForce RTX 5090 Laptop GPU" in out.stderr
    doc = checked("search", out.stdout)
    assert doc["gpu"]["name"] == "GeForce RTX 5090 Laptop GPU"
    assert doc["gpu"]["bandwidth_gb_s"] == 896.0
    assert doc["gpu"]["fp32_tflops"] == 31.8  # TechPowerUp's FP32 figure (attention at depth)
    assert doc["budget"]["vram_bytes"] == 24 * GIB
    for r in doc["results"]:
        assert r["tok_s"] > 0 and r["speed"]["estimate"] is True
        assert r["speed"]["tok_s_at_ctx"] <= r["tok_s"]
        assert r["speed"]["basis"] == "extrapolated from 9 published CUDA rows"


@pytest.mark.parametrize("acceptance", ["0.05", "0.789"])
def test_mtp_auto_leaves_off_the_heads_the_estimate_finds_slower(catalog_db, acceptance):
    # MTP auto runs a usable head that fits unless its predicted speed-up is below
    # MTP_DECLINE_BELOW (dense or MoE); --mtp runs it anyway, on the same configuration, slower
    args = ("qwen3.6", "--gpu", "RTX 4090", "--ctx", "32768", "--mtp-acceptance", acceptance)
    doc = _search(catalog_db, *args)
    forced = {(r["repo"], r["path"]): r for r in _search(catalog_db, *args, "--mtp")["results"]}
    declined = [r for r in doc["results"] if r["mtp"]["declined_speedup"] is not None]
    slower = [r for r in doc["results"] if r["mtp"]["enabled"] and r["speed"]["mtp_speedup"] < 1]
    for r in declined:
        f = forced[(r["repo"], r["path"])]
        assert not r["mtp"]["enabled"] and f["mtp"]["enabled"]
        assert r["mtp"]["declined_speedup"] == f["speed"]["mtp_speedup"] < max(DECLINE)
        assert r["speed"]["mtp_speedup"] == 1 and r["tok_s"] > f["tok_s"]
        assert r["margin_bytes"] > f["margin_bytes"]  # no head, no draft cache
        assert "--spec-type" not in r["command"] and "--spec-type draft-mtp" in f["command"]
    for r in slower:  # within the model's error of break-even: the head runs
        assert min(DECLINE) <= r["speed"]["mtp_speedup"] < 1
    # at a 5 % acceptance drafting never pays (a dense 27B's one-token draft stays within the
    # error of break-even: it runs, "slower"); at the default it pays on the 27B files, and not
    # on the world's 3 MiB files, whose step is too short for the drafts' fixed costs
    faster = [r for r in doc["results"] if r["mtp"]["enabled"] and r["speed"]["mtp_speedup"] > 1]
    assert declined and (not faster) is (acceptance == "0.05")
    db, tmp = catalog_db
    out = quants("search", *args, "--db", db, "--limit", "1000", tmp=tmp)
    assert out.returncode == 0, out.stderr
    assert f"MTP left off: {len(declined)} of these rows (MTP 'slower')" in out.stderr
    assert f"(acceptance {float(acceptance):g}); --mtp runs it" in out.stderr
    assert out.stdout.count(" slower ") >= len(declined)
    assert ("MTP slower:" in out.stderr) is bool(slower)
    on = quants("search", *args, "--mtp", "--db", db, "--limit", "1000", tmp=tmp)
    assert on.returncode == 0 and "MTP left off" not in on.stderr
    assert f"MTP slower: {len(declined) + len(slower)} of these rows" in on.stderr


def test_ambiguous_gpu_is_a_usage_error_listing_choices(catalog_db):
    db, tmp = catalog_db
    out = quants("search", "--gpu", "4060 ti", "--db", db, tmp=tmp)
    assert out.returncode == 2
    assert "4060 Ti 8 GB" in out.stderr and "4060 Ti 16 GB" in out.stderr
    assert "Traceback" not in out.stderr


def test_two_gpus_fit_what_one_does_not_and_every_device_fits(catalog_db):
    args = ("qwen3.6 27b", "--ctx", "262144", "-ctk", "f16", "-ctv", "f16")
    one = _keys(_search(catalog_db, *args, "--gpu", "3090"))
    doc = _search(catalog_db, *args, "--gpu", "2x 3090")
    assert doc["budget"]["devices"] == [24 * GIB - GIB // 2, 24 * GIB]
    two = [d for d in doc["results"] if (d["repo"], d["path"]) not in one]
    assert two and all(d["total_bytes"] > 24 * GIB for d in two)  # too big for one 3090
    for d in doc["results"]:
        devs = d["devices"]
        assert len(devs) == 2 and all(x["total_bytes"] <= x["budget_bytes"] for x in devs)
        assert d["margin_bytes"] == min(x["margin_bytes"] for x in devs)
        assert sum(x["total_bytes"] for x in devs) == d["total_bytes"]
        runnable = d["loadable_by_mainline"] is not False
        assert d["command"].endswith(" -ts 24,24") if runnable else d["command"] is None
    # -ts moves layers: 3,1 puts three quarters of the slots on the first device.
    skew = _search(catalog_db, *args, "--vram", "24", "-ts", "3,1")["results"][0]["devices"]
    assert skew[0]["slots"][1] - skew[0]["slots"][0] > 2 * (
        skew[1]["slots"][1] - skew[1]["slots"][0]
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--gpu", "2x 3090", "--tier", "partial"), "every layer on the GPUs"),
        (("--gpu", "3090", "-ts", "1,1"), "-ts needs 1 proportions"),
        (("--vram", "24", "--gpu", "2x 3090"), "--gpu per device, or --vram"),
        (("--gpu", "2x m4 max"), "unified-memory"),
        (("--vram", "24", "-ts", "1,x"), "-ts takes proportions"),
    ],
)
def test_bad_several_gpu_options_are_one_line_usage_errors(catalog_db, args, says):
    db, tmp = catalog_db
    out = quants("search", *args, "--ctx", "32768", "--db", db, "--offline", tmp=tmp)
    assert out.returncode == 2, out.stderr
    assert says in out.stderr and "Traceback" not in out.stderr


def test_partial_and_pinned_layers_fit_where_the_whole_model_does_not(catalog_db):
    """A budget below the real 27B quants' full size: -ngl auto lists them as partial runs whose
    GPU share fits; -ngl N pins N; both are absent from the all-on-GPU answer."""
    doc = _search(catalog_db, "qwen3.6 27b", "--vram", "8", "--ctx", "32768", "--tier", "partial")
    real = [d for d in doc["results"] if d["size_bytes"] > GIB]
    assert real and all(d["tier"] == "partial" and d["n_gpu_layers"] >= 1 for d in real)
    assert all(d["total_bytes"] <= 8 * GIB - GIB // 2 for d in real)
    assert all(f"-ngl {d['n_gpu_layers']}" in d["command"] for d in real)
    assert all(d["host_bytes"] > 0 for d in real)
    whole = _search(catalog_db, "qwen3.6 27b", "--vram", "8", "--ctx", "32768")["results"]
    assert not [d for d in whole if d["size_bytes"] > GIB]
    pinned = _search(catalog_db, "qwen3.6 27b", "--vram", "8", "--ctx", "32768", "-ngl", "10")
    rows = [d for d in pinned["results"] if d["size_bytes"] > GIB]
    assert rows and all(d["n_gpu_layers"] == 10 and "-ngl 10" in d["command"] for d in rows)


# --- JSON schema, filters, exit codes ------------------------------------------------------------

RESULT_KEYS = {
    "rank": int, "repo": str, "path": str, "size_bytes": int, "total_bytes": int,
    "margin_bytes": int, "max_ctx": int, "ctx": int, "bytes": dict, "mtp": dict,
    "attention": dict, "command": (str, type(None)), "cache": dict,
}  # fmt: skip


def test_json_schema(catalog_db):
    doc = _search(catalog_db, "--vram", "24", "--ctx", "32768", "--gpu", "rtx 4090")
    assert set(doc) == {
        "schema_version",
        "request",
        "budget",
        "gpu",
        "counts",
        "results",
        "unreadable",
    }
    assert doc["counts"]["fitting"] >= len(doc["results"]) > 0
    assert doc["unreadable"] == [] and doc["counts"]["unreadable"] == 0
    for r in doc["results"]:
        for key, typ in RESULT_KEYS.items():
            assert isinstance(r[key], typ), key
        for key in ("quant_label", "architecture", "quality", "tok_s", "ollama", "lm_studio"):
            assert key in r
        assert r["provenance"] == {"from": "crawl"}
        assert set(r["bytes"]) == {
            "weights",
            "kv",
            "mtp_kv",
            "recurrent",
            "compute",
            "overhead",
            "total",
        }
        assert r["bytes"]["total"] == r["total_bytes"]
        assert {"present", "preserved"} <= set(r["mtp"]) and "min_bits" in r["attention"]
        if r["command"] is None:  # a name no shell line can carry, or a file llama.cpp refuses
            hostile = any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in r["repo"] + r["path"])
            assert hostile or r["loadable_by_mainline"] is False
        elif ".gguf.part" in r["path"]:  # byte parts: downloaded, joined, run with -m
            assert r["command"].startswith(f"hf download {r['repo']} ")
            assert " && llama-server -m " in r["command"] and f"-c {r['ctx']}" in r["command"]
        else:
            assert r["command"].startswith("llama-server -hf ") and f"-c {r['ctx']}" in r["command"]
        assert r["max_ctx"] >= r["ctx"]


def test_mtp_filter_runs_the_head(catalog_db):
    doc = _search(catalog_db, "--vram", "48", "--ctx", "65536", "--mtp")
    assert doc["results"]
    for r in doc["results"]:
        assert r["mtp"]["present"] and r["mtp"]["preserved"] and r["mtp"]["enabled"]
        assert "--spec-type draft-mtp --spec-draft-n-max 3" in r["command"]
        assert r["bytes"]["mtp_kv"] > 0


def test_min_attn_bits_and_loadable_filters(catalog_db):
    doc = _search(catalog_db, "--vram", "48", "--ctx", "8192", "--min-attn-bits", "6", "--loadable")
    assert doc["results"]
    assert all(r["attention"]["min_bits"] >= 6 for r in doc["results"])
    assert all(r["loadable_by_mainline"] for r in doc["results"])


def _hint(out: subprocess.CompletedProcess[str]) -> str:
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("hint: ")]
    return line


def test_nothing_fits_exits_3_with_a_hint_naming_only_levers_not_yet_used(catalog_db):
    db, tmp = catalog_db
    out = quants("search", "--vram", "1", "--ctx", str(CTX), "--db", db, tmp=tmp)
    assert out.returncode == 3
    assert "no quant fits" in out.stderr
    assert out.stdout == ""
    # The default search already tried every cache down to q4_0: the hint does not ask for one.
    hint = _hint(out)
    assert "a smaller -c/--ctx" in hint and "quantized cache" not in hint
    # With the cache pinned at f16, quantizing it is a lever left; with no headroom, that is not.
    pinned = quants(
        "search", "--vram", "0.25", "--ctx", str(CTX), "-ctk", "f16", "-ctv", "f16",
        "--headroom", "0", "--db", db, tmp=tmp,
    )  # fmt: skip
    assert pinned.returncode == 3, pinned.stdout
    hint = _hint(pinned)
    assert "-ctk q4_0 -ctv q4_0" in hint and "--headroom" not in hint
    assert "--headroom" in _hint(out)  # the default 0.5 GiB


def test_a_query_matching_nothing_says_so_and_points_at_the_query(catalog_db):
    db, tmp = catalog_db
    out = quants("search", "zzzz-no-such-model", "--vram", "80", "--offline", "--db", db, tmp=tmp)
    assert out.returncode == 3
    assert "no quant in the catalog matches 'zzzz-no-such-model'" in out.stderr
    hint = _hint(out)
    assert "spelling" in hint and "--ctx" not in hint and "cache" not in hint


def test_too_big_counts_only_the_quants_the_query_names(catalog_db):
    import re

    from crawler.ranking.query import QueryMatcher

    db, tmp = catalog_db
    matcher = QueryMatcher("llama")  # no digit: not narrowed in SQL, only by the matcher
    with Catalog.open(db) as catalog, catalog.session() as s:
        rows = s.execute(
            select(Repo.repo_id, Quant.base_model, Repo.base_model, Quant.path, Quant.quant_label,
                   Quant.architecture)
            .join(Quant, Quant.repo_pk == Repo.id)
            .join(MemoryModel, MemoryModel.quant_id == Quant.id)
            .where(MemoryModel.status == "ok", Quant.live.is_(True))
        ).all()  # fmt: skip
    expected = sum(1 for r, qb, rb, *rest in rows if matcher.matches_names(r, qb or rb, *rest))
    everything = len(rows)
    assert 0 < expected < everything  # the world holds other models too
    out = quants("search", "llama", "--vram", "0.6", "--offline", "--db", db, tmp=tmp)
    assert out.returncode == 3, out.stdout
    m = re.search(r"(\d+) too big", out.stderr)
    assert m is not None, out.stderr
    assert int(m.group(1)) == expected


def test_an_empty_catalog_hints_at_filling_it(tmp_path):
    db = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    out = quants("search", "--vram", "24", "--db", db, tmp=tmp_path)
    assert out.returncode == 3
    assert "the catalog is empty" in out.stderr
    assert all(w in _hint(out) for w in ("quants crawl", "quants pull", "quants import"))


def test_table_output_has_the_columns_and_a_command_per_row(catalog_db):
    db, tmp = catalog_db
    out = quants("search", "--vram", "24", "--ctx", "8192", "--gpu", "rtx 4090", "--limit", "5",
                 "--db", db, tmp=tmp)  # fmt: skip
    assert out.returncode == 0, out.stderr
    header = out.stdout.splitlines()[0]
    for col in (
        "quant",
        "size",
        "total",
        "margin",
        "max ctx",
        "MTP",
        "attn bits",
        "quality",
        "tok/s",
    ):
        assert col in header
    assert out.stdout.count("llama-server -hf ") == 5
    # the estimate says what it rests on: the RTX 4090 is extrapolated from published rows
    assert "ESTIMATE (empty / full context): extrapolated from" in out.stderr
    assert "published CUDA rows" in out.stderr


def test_np_minus_one_is_llama_servers_default_slots(catalog_db):
    """-np -1 (as estimate takes it): llama-server's own default, 4 slots sharing one unified
    cache; the command leaves -np out, and the estimate counts 4 sequences' buffers."""
    args = ("qwen3.6 27b", "--vram", "48", "--ctx", "8192", "-ctk", "f16", "-ctv", "f16")
    one = {(r["repo"], r["path"]): r for r in _search(catalog_db, *args, "-np", "1")["results"]}
    auto = {(r["repo"], r["path"]): r for r in _search(catalog_db, *args, "-np", "-1")["results"]}
    assert auto and set(auto) <= set(one)
    for key, r in auto.items():
        if r["loadable_by_mainline"] is False:  # no command for a file llama.cpp refuses
            assert r["command"] is None and one[key]["command"] is None
            continue
        assert " -np " not in r["command"] and " -np 1" in one[key]["command"]
        assert r["total_bytes"] >= one[key]["total_bytes"]


def test_a_watch_search_matches_the_cli_json(catalog_db):
    from crawler.base.config import Settings
    from crawler.cli.search_cmd import search_options
    from crawler.crawl.watch import search_results, watch_request

    args = ["qwen3.6", "--vram", "24", "--ctx", "32768", "--limit", "1000"]
    options = search_options(args)
    assert options == {"query": "qwen3.6", "vram": 24.0, "ctx": 32768, "limit": 1000}
    with Catalog.open(catalog_db[0]) as catalog:
        results = search_results(catalog, watch_request(Settings(), options))
    assert [(r["repo"], r["path"]) for r in results] == [
        (r["repo"], r["path"]) for r in _search(catalog_db, *args[:-2])["results"]
    ]


# --- compare -------------------------------------------------------------------------------------


def test_compare_lines_up_one_base_models_quants(any_catalog_db):
    catalog_db = any_catalog_db
    db, tmp = catalog_db
    out = quants("compare", "qwen3.6 27b", "--db", db, "--json", tmp=tmp)
    assert out.returncode == 0, out.stderr
    doc = checked("compare", out.stdout)
    assert doc["base_model"] == "Qwen/Qwen3.6-27B"
    sizes = [q["size_bytes"] for q in doc["quants"]]
    assert sizes == sorted(sizes) and len(sizes) >= 5
    mtp_bits = {q["mtp"]["min_bits"] for q in doc["quants"] if q["mtp"]["present"]}
    assert {4.0, 8.0} <= mtp_bits  # one uploader keeps the head at 8 bit, another at 4
    for q in doc["quants"]:
        assert {"attn", "ffn"} <= set(q["groups"])
        assert {"bpw", "min_bits", "max_bits"} == set(q["groups"]["attn"])
    table = quants("compare", "Qwen/Qwen3.6-27B", "--db", db, tmp=tmp)
    assert "LOW 4" in table.stdout and "ok 8" in table.stdout


def test_compare_with_an_ambiguous_query_lists_the_base_models(catalog_db):
    db, tmp = catalog_db
    out = quants("compare", "qwen", "--db", db, tmp=tmp)
    assert out.returncode == 2 and "several base models" in out.stderr


def _compare_both_ways(db: str, monkeypatch) -> tuple[dict, dict, list[str]]:
    """compare's answers for every base model's names with the exact-name shortcut and with
    the fuzzy scan of every quant (the shortcut switched off), and the queries it took."""
    from crawler.base.errors import UsageError
    from crawler.catalog import comparison
    from crawler.catalog.comparison import load_comparison
    from crawler.ranking.query import QueryMatcher

    def answer(reader, query):
        try:
            c = load_comparison(reader, query)
        except UsageError as exc:
            return str(exc)
        return c.base_model, [(q.repo_id, q.path, q.quality, q.groups) for q in c.quants]

    with Catalog.open(db) as catalog, catalog.reader() as reader:
        bases = sorted({b for (b,) in reader.rows("SELECT base_model FROM repos") if b})
        queries = [q for b in bases for q in (b, b.upper(), b.rsplit("/", 1)[-1], f" {b} ")] + [
            "qwen3.6 27b",
            "no-such-model-9b",
        ]
        shortcut = {q: answer(reader, q) for q in queries}
        taken = [q for q in queries if comparison._exact_base(reader, q, QueryMatcher(q))]
        with monkeypatch.context() as m:
            m.setattr(comparison, "_exact_base", lambda *_: None)
            scanned = {q: answer(reader, q) for q in queries}
    assert len(bases) >= 2 and len(taken) >= len(bases)
    assert sum(len(a[1]) for a in shortcut.values() if isinstance(a, tuple)) > 10
    return shortcut, scanned, taken


def test_compare_by_exact_base_name_answers_as_the_fuzzy_scan(any_catalog_db, monkeypatch):
    # A query naming one base model exactly is read through the base-model indexes
    # (comparison._exact_base); it must give exactly what the fuzzy scan of every quant gives,
    # for each base model of the crawl, named in full, by its name after the owner, and in
    # another case, and for queries that name none of them.
    shortcut, scanned, _ = _compare_both_ways(any_catalog_db[0], monkeypatch)
    assert shortcut == scanned


def test_compare_shortcut_finds_quants_that_inherit_the_repos_base_model(
    catalog_db, tmp_path, monkeypatch
):
    # A quant without its own base model belongs to its repo's: half the quants lose theirs
    # (where it equals the repo's, so the names and the search text stay the same).
    import shutil
    import sqlite3

    copy = tmp_path / "inherited.sqlite"
    shutil.copy(catalog_db[0].removeprefix("sqlite:///"), copy)
    with sqlite3.connect(copy) as conn:
        changed = conn.execute(
            "UPDATE quants SET base_model = NULL WHERE id % 2 = 0 AND base_model ="
            " (SELECT r.base_model FROM repos r WHERE r.id = quants.repo_pk)"
        ).rowcount
    assert changed > 5
    shortcut, scanned, _ = _compare_both_ways(f"sqlite:///{copy}", monkeypatch)
    assert shortcut == scanned


def test_stored_quality_score_is_the_python_models_score(any_catalog_db):
    # The streamed search orders by quants.quality_score, stored at crawl time; it must be the
    # score crawler.ranking.quality computes from the loaded groups (what ranking shows), exactly.
    from crawler.catalog.candidates import materializer
    from crawler.catalog.ordered import stream_candidates
    from crawler.profile.groups import GroupStats
    from crawler.ranking.model import Budget, Filters, RunSpec
    from crawler.ranking.quality import QualityInputs, estimate_quality

    spec, budget = RunSpec(ctx=4096), Budget.from_gib(1000)
    with Catalog.open(any_catalog_db[0]) as catalog, catalog.reader() as reader:
        streamed = list(stream_candidates(reader, spec, budget, Filters(), "quality"))
        full = materializer(reader)(streamed)
    hints = {c.quant_id: c.quality_hint for c in streamed}
    assert len(hints) == len(full) > 10
    scores = [c.quality_hint for c in streamed]
    known = [x for x in scores if x is not None]
    assert known == sorted(known, reverse=True) and scores[: len(known)] == known
    for c in full:
        assert c.groups  # completed by the materializer
        co = c.coefficients
        groups = tuple(GroupStats(g.name, g.n_params, g.n_bytes, g.bpw) for g in c.groups)
        q = estimate_quality(
            QualityInputs(
                groups=groups,
                n_expert=co.n_expert,
                n_expert_used=co.n_expert_used,
                n_embd=co.n_embd,
                n_vocab=co.n_vocab,
            )
        )
        assert q is not None and hints[c.quant_id] == q.score


_SEARCH_COLUMNS = (
    "SELECT q.id, q.live, q.quality_score, q.fit_weights_bytes, q.fit_expert_bytes,"
    " q.fit_mtp_bytes, q.fit_kv_per_token, q.fit_fixed_bytes, m.n_expert, m.n_expert_used,"
    " m.n_embd, m.n_vocab, m.mtp_available, q.search_text, q.fit_mtp_kv_per_token,"
    " q.fit_read_bytes, q.fit_moe_layers, q.fit_ctx_train, q.fit_ubatch_bytes, q.fit_draft_bytes,"
    " q.fit_verify_experts, q.fit_type_eff, q.fit_trunk_layers, q.fit_slot_bytes,"
    " q.fit_slot_kv_per_token, q.fit_resident_bytes, q.fit_swa_kv_per_cell, q.fit_swa_cells"
    " FROM quants q LEFT JOIN memory_models m ON m.quant_id = q.id ORDER BY q.id"
)


def _search_columns(db: str) -> list[tuple[Any, ...]]:
    with Catalog.open(db) as catalog:
        return catalog.query_readonly(_SEARCH_COLUMNS)[1]


def _copy(catalog_db, tmp_path: Path) -> str:
    import shutil

    src = Path(catalog_db[0].removeprefix("sqlite:///"))
    shutil.copy(src, tmp_path / "copy.sqlite")
    return f"sqlite:///{tmp_path / 'copy.sqlite'}"


def test_search_columns_are_consistent_with_the_rows_they_copy(catalog_db):
    from crawler.profile.groups import GroupStats
    from crawler.ranking.columns import draft_head_bytes, fit_extras

    rows = _search_columns(catalog_db[0])
    with Catalog.open(catalog_db[0]) as catalog:
        coefficients = {
            qid: json.loads(text or "null")
            for qid, text in catalog.query_readonly(
                "SELECT quant_id, CAST(coefficients AS TEXT) FROM memory_models"
            )[1]
        }
        heads: dict[int, list[tuple[str, int]]] = {}
        stats: dict[int, list[GroupStats]] = {}
        for qid, name, n_params, n_bytes, bpw in catalog.query_readonly(
            "SELECT quant_id, group_name, n_params, n_bytes, bpw FROM tensor_groups"
            " ORDER BY quant_id, group_name"
        )[1]:
            heads.setdefault(qid, []).append((name, n_bytes))
            stats.setdefault(qid, []).append(GroupStats(name, n_params, n_bytes, bpw))
        _, truth = catalog.query_readonly(
            "SELECT q.id, q.vanished_at IS NULL AND r.vanished_at IS NULL, m.status,"
            " m.weights_bytes, m.kv_bytes_per_token_f16, r.repo_id,"
            " coalesce(q.base_model, r.base_model), q.path, q.quant_label, q.architecture"
            " FROM quants q"
            " JOIN repos r ON r.id = q.repo_pk LEFT JOIN memory_models m ON m.quant_id = q.id"
            " ORDER BY q.id"
        )
    assert len(rows) == len(truth) > 10
    assert any(t[2] == "ok" for t in truth)
    for row, (qid, live, status, weights, kv, *names) in zip(rows, truth, strict=True):
        label = names[3]
        assert row[0] == qid and bool(row[1]) == bool(live)
        assert row[13] == " ".join((n or "").lower() for n in names)
        if status == "ok":
            assert (row[3], row[6]) == (weights, kv) and row[3] is not None
            head = draft_head_bytes(heads.get(qid, []))
            extras = fit_extras(coefficients[qid], head, label=label, groups=stats.get(qid, []))
            assert row[14:28] == tuple(extras.values())
            assert row[21] is not None  # the speed bound's weight rate (fit_type_eff)
            assert row[23] is not None and row[23] > 0  # the largest layer (fit_slot_bytes)
        else:
            assert row[3:8] == (None,) * 5 and row[14:28] == (None,) * 14


def _downgraded(catalog_db, tmp_path, revision: str) -> tuple[str, Any]:
    """A copy of the crawled catalog taken down to ``revision``, and its search columns before."""
    from alembic import command

    db = _copy(catalog_db, tmp_path)
    expected = _search_columns(db)
    with Catalog.open(db) as catalog:
        command.downgrade(catalog._alembic_config(), revision)
        assert catalog.current_revision() == revision
    return db, expected


def test_migrations_0003_and_0004_fill_what_the_crawl_stores(catalog_db, tmp_path):
    # Down to 0002 (the columns dropped), up again: the backfills must equal the crawl's values.
    from crawler.crawl.catalogs import open_catalog

    db, expected = _downgraded(catalog_db, tmp_path, "0002")
    with open_catalog(db):  # migrated back to head as every command opens it
        pass
    assert _search_columns(db) == expected


def test_migration_0013_fills_the_speed_type_efficiency(catalog_db, tmp_path):
    # A catalog at 0012 has no fit_type_eff; opened as every command opens it, it gets the
    # crawl's values and shapes that carry them.
    from crawler.catalog.candidates import SHAPE_COLUMNS
    from crawler.crawl.catalogs import open_catalog

    db, expected = _downgraded(catalog_db, tmp_path, "0012_search_shape_size")

    with open_catalog(db) as catalog:
        _, shapes = catalog.query_readonly(
            "SELECT search_shape, fit_type_eff FROM quants WHERE fit_type_eff IS NOT NULL"
        )
    assert _search_columns(db) == expected
    at = SHAPE_COLUMNS.index("fit_type_eff")
    assert shapes and all(
        # (the database writes 15 significant digits)
        len(shape.split("|")) == len(SHAPE_COLUMNS)
        and float(shape.split("|")[at]) == pytest.approx(eff, rel=1e-13)
        for shape, eff in shapes
    )


def test_migration_0014_fills_the_partial_slot_bytes(catalog_db, tmp_path):
    # A catalog at 0013 has no fit_slot_bytes (nor its kin); opened as every command opens it,
    # it gets the crawl's values and shapes that carry them.
    from crawler.catalog.candidates import SHAPE_COLUMNS
    from crawler.crawl.catalogs import open_catalog

    db, expected = _downgraded(catalog_db, tmp_path, "0013_speed_type_eff")
    with contextlib.closing(sqlite3.connect(db.removeprefix("sqlite:///"))) as conn:
        (before,) = conn.execute("SELECT search_shape FROM quants LIMIT 1").fetchone()
    assert len(before.split("|")) == len(SHAPE_COLUMNS) - 5  # the shapes of 0013
    with open_catalog(db) as catalog:
        _, shapes = catalog.query_readonly(
            "SELECT search_shape, fit_slot_bytes, fit_slot_kv_per_token, fit_resident_bytes"
            " FROM quants WHERE fit_slot_bytes IS NOT NULL"
        )
    assert _search_columns(db) == expected
    at = SHAPE_COLUMNS.index("fit_slot_bytes")
    assert shapes and all(
        shape.split("|")[at : at + 3] == [str(slot), str(kv), str(resident)]
        for shape, slot, kv, resident in shapes
    )


def test_migration_0016_fills_the_swa_window_cells(catalog_db, tmp_path):
    # A catalog at 0015 has no fit_swa_kv_per_cell nor fit_swa_cells; opened as every command
    # opens it, it gets the crawl's values, shapes that carry them, and a memory bound that
    # reads them.
    from crawler.catalog.candidates import SHAPE_COLUMNS
    from crawler.crawl.catalogs import open_catalog

    db, expected = _downgraded(catalog_db, tmp_path, "0015_search_shape_grams")
    with contextlib.closing(sqlite3.connect(db.removeprefix("sqlite:///"))) as conn:
        (before,) = conn.execute("SELECT search_shape FROM quants LIMIT 1").fetchone()
        columns = {row[1] for row in conn.execute("PRAGMA table_info(quants)")}
    assert len(before.split("|")) == len(SHAPE_COLUMNS) - 2  # the shapes of 0015
    assert not {"fit_swa_kv_per_cell", "fit_swa_cells"} & columns
    with open_catalog(db) as catalog:
        _, shapes = catalog.query_readonly(
            "SELECT search_shape, fit_swa_kv_per_cell, fit_swa_cells FROM quants"
            " WHERE fit_swa_cells IS NOT NULL"
        )
    assert _search_columns(db) == expected
    at = SHAPE_COLUMNS.index("fit_swa_kv_per_cell")
    assert shapes and all(
        shape.split("|")[at : at + 2] == [str(per_cell), str(cells)]
        for shape, per_cell, cells in shapes
    )
    # The crawled catalog holds Gemma 3 quants: their window is stored.
    assert any(cells > 0 and per_cell > 0 for _, per_cell, cells in shapes)


def test_reprofile_recomputes_the_search_columns(catalog_db, tmp_path):
    from crawler.crawl.reprofile import reprofile

    db = _copy(catalog_db, tmp_path)
    expected = _search_columns(db)
    with Catalog.open(db) as catalog, catalog.engine.begin() as conn:
        # reprofile reads the stored headers of live quants: corrupt exactly those.
        kept = "SELECT quant_id FROM tensor_tables JOIN quants ON id = quant_id WHERE live"
        n = conn.exec_driver_sql(
            "UPDATE quants SET quality_score = 1.0, fit_weights_bytes = 1, search_text = 'x'"
            f" WHERE id IN ({kept})"
        ).rowcount
        conn.exec_driver_sql(
            f"UPDATE memory_models SET n_expert = 99, mtp_available = NULL"
            f" WHERE quant_id IN ({kept})"
        )
    assert n > 10
    with Catalog.open(db) as catalog:
        reprofile(catalog)
    assert _search_columns(db) == expected


def test_sort_speed_needs_a_gpu_and_orders_by_tok_s(catalog_db):
    db, tmp = catalog_db
    out = quants("search", "--vram", "24", "--sort", "speed", "--db", db, tmp=tmp)
    assert out.returncode == 2 and "--gpu" in out.stderr
    doc = _search(catalog_db, "--gpu", "rtx 4090", "--ctx", "8192", "--sort", "speed")
    speeds = [r["tok_s"] for r in doc["results"]]
    assert speeds == sorted(speeds, reverse=True) and len(speeds) > 3
    # an Apple chip takes the Metal terms (a cost per layer): the catalog's speed bound, the
    # same for every platform, still never undercuts an estimate, so the order holds
    doc = _search(catalog_db, "--gpu", "m2 max", "--ctx", "8192", "--sort", "speed")
    speeds = [r["tok_s"] for r in doc["results"]]
    assert speeds == sorted(speeds, reverse=True) and len(speeds) > 3
    assert {r["speed"]["basis"] for r in doc["results"]} == {
        "extrapolated from 9 published Metal rows"
    }


@pytest.mark.parametrize("sort", ["quality", "size", "downloads", "updated"])
def test_a_short_limit_gives_the_head_of_the_full_ranking(any_catalog_db, sort):
    args = ("--vram", "24", "--ctx", "65536", "--auto-cache", "--sort", sort)
    db, tmp = any_catalog_db
    out = quants("search", *args, "--limit", "3", "--db", db, "--json", tmp=tmp)
    assert out.returncode == 0, out.stderr
    head = [(r["repo"], r["path"]) for r in checked("search", out.stdout)["results"]]
    full = [(r["repo"], r["path"]) for r in _search(any_catalog_db, *args)["results"]]
    assert head == full[:3]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--ctx", "8192"], "--vram"),  # no budget
        (["--vram", "8", "--sort", "best"], "--sort"),
        (["--vram", "8", "--auto-cache", "-ctk", "q8_0"], "--auto-cache"),
        (["--vram", "8", "-ctk", "q3_k"], "cache type"),
        (["--vram", "8", "--ram", "64"], "--cpu-moe"),
        (["--vram"], "search options"),  # the parser's own error
    ],
)
def test_bad_search_options_are_one_line_usage_errors(catalog_db, argv, message):
    from crawler.base.errors import UsageError
    from crawler.cli.search_cmd import request_from_argv
    from crawler.crawl.watch import search_results

    with Catalog.open(catalog_db[0]) as catalog, pytest.raises(UsageError, match=message):
        search_results(catalog, request_from_argv(argv))
    db, tmp = catalog_db
    out = quants("search", *argv, "--db", db, tmp=tmp)
    assert out.returncode == 2 and "Traceback" not in out.stderr


# --- tiers ------------------------------------------------------------------------------------


def test_tier_partial_lists_the_27b_with_ngl_auto_and_a_speed(catalog_db):
    from crawler.fit.offload import estimate_offload

    gpu = ("--gpu", "rtx 3060 12 gb")
    doc = _search(catalog_db, "qwen3.6 27b", "--vram", "12", "--ctx", "65536", *gpu,
                  "--tier", "partial")  # fmt: skip
    stored = {(r, p): co for r, p, co in _stored(catalog_db[0])}
    budget = 12 * GIB - HEADROOM
    partial = [r for r in doc["results"] if r["tier"] == "partial"]
    assert partial, "the real-size 27B quants do not fit 12 GB whole"
    for r in partial:
        n = r["n_gpu_layers"]
        assert f"-ngl {n}" in r["command"] and r["mtp"]["enabled"] is False
        co = stored[(r["repo"], r["path"])]
        cfg = _cfg(type_k=r["cache"]["type_k"], type_v=r["cache"]["type_v"]).replace(ctx=65536)
        assert r["total_bytes"] == estimate_offload(co, cfg, n).total <= budget
        assert estimate_offload(co, cfg, n + 1).total > budget  # -ngl auto: the most that fit
        assert r["host_bytes"] > r["size_bytes"] // 4  # the CPU layers are in RAM
        assert r["tok_s"] > 0
    gpu_only = _search(catalog_db, "qwen3.6 27b", "--vram", "12", "--ctx", "65536")
    assert all(r["tier"] == "gpu" for r in gpu_only["results"])
    assert {(r["repo"], r["path"]) for r in gpu_only["results"]} < _keys(doc)
    # a partial row is slower than the same quant would be on the GPU: host bandwidth
    fast = {
        (r["repo"], r["path"]): r
        for r in _search(
            catalog_db, "qwen3.6 27b", "--vram", "80", "--ctx", "65536", "--gpu", "rtx 3060 12 gb"
        )["results"]
    }
    for r in partial:
        assert r["tok_s"] < fast[(r["repo"], r["path"])]["tok_s"]


def test_bad_tier_is_a_usage_error(catalog_db):
    db, tmp = catalog_db
    out = quants("search", "--vram", "24", "--tier", "cloud", "--db", db, tmp=tmp)
    assert out.returncode == 2 and "--tier must be one of" in out.stderr


def test_search_on_unified_memory_says_not_measured(catalog_db):
    db, tmp = catalog_db
    out = quants("search", "--gpu", "m4 max", "--ctx", "8192", "--db", db, "--json", tmp=tmp)
    assert out.returncode == 0, out.stderr
    assert "not measured on this backend" in checked("search", out.stdout)["gpu"]["note"]
    table = quants("search", "--gpu", "m4 max", "--ctx", "8192", "--db", db, tmp=tmp)
    assert "not measured on this backend" in table.stderr


def test_vision_search_keeps_only_repos_with_a_projector_and_adds_it(catalog_db):
    from crawler.fit.vision import projector_bytes

    plain = _search(catalog_db, "--vram", "48", "--ctx", "8192", "--no-mtp")
    vision = _search(catalog_db, "--vram", "48", "--ctx", "8192", "--no-mtp", "--vision")
    alias = _search(catalog_db, "--vram", "48", "--ctx", "8192", "--no-mtp", "--mmproj")
    assert vision["results"] and _keys(vision) == _keys(alias) and _keys(vision) < _keys(plain)
    with Catalog.open(catalog_db[0]) as catalog, catalog.session() as s:
        from crawler.catalog.tables import File

        with_proj = {
            r for (r,) in s.execute(
                select(Repo.repo_id).join(File, File.repo_pk == Repo.id)
                .where(File.kind == "mmproj", File.vanished_at.is_(None))
            ).all()
        }  # fmt: skip
    assert {r["repo"] for r in vision["results"]} <= with_proj
    assert {r["repo"] for r in plain["results"]} - with_proj  # some were dropped
    base = {(r["repo"], r["path"]): r for r in plain["results"]}
    for r in vision["results"]:
        extra = projector_bytes(r["projector_bytes"])
        assert r["total_bytes"] == base[(r["repo"], r["path"])]["total_bytes"] + extra
        assert "--no-mmproj" not in r["command"]
    # -hf would fetch a projector unless told not to; a joined byte-part file runs with -m.
    hf = [r["command"] for r in plain["results"] if r["command"] and " -hf " in r["command"]]
    assert hf and all("--no-mmproj" in c for c in hf)
