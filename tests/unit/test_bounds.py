"""The bounds and their SQL twins, tested as pairs (crawler/ranking/bounds.py).

Each SQL expression is evaluated by SQLite over a ``quants`` row holding the search columns that
crawler.ranking.columns.search_columns computes (what the crawl stores), and compared with
the Python bound it copies.
"""

from __future__ import annotations

import dataclasses
import sqlite3

import pytest

from crawler.fit import MemoryCoefficients
from crawler.fit.coefficients import coefficients
from crawler.fit.estimate import estimate
from crawler.gguf.parse import parse_header_bytes
from crawler.profile.analysis import MemoryRecord
from crawler.ranking.bounds import (
    bound_sql,
    ctx_bound_sql,
    host_lower_bound_bytes,
    lower_bound_bytes,
    margin_bound_sql,
    margin_upper_bound,
    prefilter_terms,
    ram_bound_sql,
    ram_may_fit,
    speed_bound_sql,
)
from crawler.ranking.columns import search_columns
from crawler.ranking.evaluate import evaluate
from crawler.ranking.model import Budget, RunSpec
from crawler.ranking.speed import speed_bound
from tests import synth
from tests.unit.rank_helpers import candidate, dense_hybrid, groups, moe

COEFFICIENTS = {
    "dense_hybrid": dense_hybrid(16.0),
    "dense_no_mtp": dense_hybrid(9.5, mtp=False, ctx_train=0),
    "moe": moe(2.0, 18.0),
}
SPECS = [
    RunSpec(ctx=8192),
    RunSpec(ctx=262144, type_k="q8_0", type_v="q8_0"),
    RunSpec(ctx=65536, mtp=True),
    RunSpec(ctx=32768, auto_cache=True, mtp=True),
    RunSpec(ctx=4096, cpu_moe=True),
    RunSpec(ctx=None),
]


def _row(co):
    memory = MemoryRecord(
        status="ok",
        weights_bytes=co.weights_bytes,
        mtp_weights_bytes=co.mtp_weights_bytes,
        expert_bytes=co.expert_bytes,
        kv_bytes_per_token_f16=co.kv_bytes_per_token_f16,
        fixed_bytes_f16=co.fixed_bytes_f16,
        coefficients=co.to_json(),
    )
    return search_columns(groups(6.5, 4.5), memory)


def _sql_value(expr: str, params: dict, row: dict) -> float:
    conn = sqlite3.connect(":memory:")
    try:
        cols = sorted(row)
        conn.execute(f"CREATE TABLE quants ({', '.join(cols)})")
        conn.execute(
            f"INSERT INTO quants VALUES ({', '.join('?' for _ in cols)})", [row[c] for c in cols]
        )
        (value,) = conn.execute(f"SELECT {expr} FROM quants q", params).fetchone()
        return float(value)
    finally:
        conn.close()


@pytest.mark.parametrize("name", sorted(COEFFICIENTS))
@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_bound_sql_is_lower_bound_bytes(name, spec):
    co = COEFFICIENTS[name]
    budget = Budget.from_gib(24)
    expr, params = bound_sql(spec, budget)
    in_sql = _sql_value(expr, params, _row(co))
    # SQL leaves the constant out (it is in :bound_limit = budget - constant).
    expected = lower_bound_bytes(co, spec) - prefilter_terms(spec).constant
    assert in_sql == pytest.approx(expected, rel=1e-9, abs=2.0 * len(params))
    assert params["bound_limit"] == budget.device_bytes - prefilter_terms(spec).constant


@pytest.mark.parametrize("name", sorted(COEFFICIENTS))
@pytest.mark.parametrize(
    "spec",
    [*SPECS, RunSpec(ctx=262144, auto_cache=True, mtp_auto=True), RunSpec(auto_cache=True)],
    ids=repr,
)
@pytest.mark.parametrize("gib", [8, 24, 80])
def test_margin_bound_sql_is_margin_upper_bound(name, spec, gib):
    co = COEFFICIENTS[name]
    budget = Budget.from_gib(gib)
    expr, params = margin_bound_sql(spec, budget)
    expected = margin_upper_bound(co, spec, budget) + 1  # SQL adds a byte for float rounding
    assert _sql_value(expr, params, _row(co)) == pytest.approx(expected, rel=1e-9, abs=64.0)
    assert margin_upper_bound(co, spec, budget) <= budget.device_bytes - lower_bound_bytes(co, spec)


@pytest.mark.parametrize("name", sorted(COEFFICIENTS))
def test_ctx_bound_sql_caps_at_the_trained_context(name):
    co = COEFFICIENTS[name]
    spec, budget = RunSpec(ctx=8192), Budget.from_gib(1000)
    expr, params = ctx_bound_sql(spec, budget)
    value = _sql_value(expr, params, _row(co))
    # A budget far above the weights: the bound is the cap (trained context, or 1 Mi unknown).
    assert value == float(co.n_ctx_train or (1 << 20))
    tight = Budget.from_gib(co.weights_bytes / 1024**3 + co.expert_bytes / 1024**3 + 1.5)
    assert _sql_value(*ctx_bound_sql(spec, tight), _row(co)) < value


@pytest.mark.parametrize("name", sorted(COEFFICIENTS))
@pytest.mark.parametrize("mtp", [False, True])
def test_speed_bound_sql_is_speed_bound(name, mtp):
    co = COEFFICIENTS[name]
    spec = RunSpec(ctx=8192, mtp=mtp)
    budget = Budget.from_gib(24, bandwidth_gb_s=1008.0)
    row = _row(co)
    expr, params = speed_bound_sql(spec, budget)
    b = speed_bound(1008.0, mtp=mtp, draft_n_max=spec.spec_draft_n_max, experts_on_host=False)
    expected = b.tok_s(
        read_bytes=row["fit_read_bytes"],
        n_moe_layers=row["fit_moe_layers"],
        draft_bytes=row["fit_draft_bytes"],
        verify_experts=row["fit_verify_experts"],
    )
    assert _sql_value(expr, params, row) == pytest.approx(expected, rel=1e-9)


def test_speed_bound_sql_needs_the_bandwidth():
    with pytest.raises(ValueError, match="bandwidth"):
        speed_bound_sql(RunSpec(), Budget.from_gib(24))


# --- --ram: the host-memory bound of --cpu-moe / --tier experts_cpu ----------------------------

_MOE_ARCHS = ("qwen3moe", "qwen35moe", "glm4moe", "deepseek2")
_RECIPES = {
    "q4_k_m": synth.q4_k_m_like,
    "q8_0": synth.q8_0,
    "ud_q3_k_xl": synth.ud_q3_k_xl_like,
    "bf16": synth.bf16,
}


def _real_coefficients(arch: str, size: str, recipe: str) -> MemoryCoefficients:
    header = parse_header_bytes(synth.header_bytes(synth.preset(arch, size), _RECIPES[recipe]()))
    co = coefficients(header)
    assert co.status == "ok" and co.expert_bytes > 0
    return co


@pytest.mark.parametrize("recipe", sorted(_RECIPES))
@pytest.mark.parametrize("size", ["tiny", "real"])
@pytest.mark.parametrize("arch", _MOE_ARCHS)
def test_host_lower_bound_is_below_every_cpu_moe_estimate(arch, size, recipe):
    """The bound never exceeds the host bytes llama.cpp's layout gives the experts: tiny models
    (their tensors' padding is largest next to their bytes) and real-sized ones, per recipe."""
    co = _real_coefficients(arch, size, recipe)
    bound = host_lower_bound_bytes(co)
    trunk_host = sum(h for il, _d, h in co.expert_layers if il < co.n_layer)
    assert 0 < bound <= trunk_host
    for spec in (
        RunSpec(ctx=512, cpu_moe=True, ubatch=1),
        RunSpec(ctx=32768, cpu_moe=True, type_k="q4_0", type_v="q4_0"),
        RunSpec(ctx=262144, cpu_moe=True, mtp=co.mtp_available),
    ):
        assert bound <= estimate(co, spec.base_config()).host_bytes


def test_host_lower_bound_without_expert_layers_is_zero():
    """Coefficients that list no expert layers: the estimate moves no expert to the host."""
    co = dataclasses.replace(moe(2.0, 18.0), expert_layers=())
    assert host_lower_bound_bytes(co) == 0
    assert estimate(co, RunSpec(ctx=4096, cpu_moe=True).base_config()).host_bytes < 1 << 30


_RAM_SPECS = [
    RunSpec(ctx=32768, tier="experts_cpu"),
    RunSpec(ctx=32768, tier="experts_cpu", auto_cache=True, mtp=True),
    RunSpec(ctx=4096, cpu_moe=True),
    RunSpec(ctx=4096, cpu_moe=True, tier="experts_cpu"),
    RunSpec(ctx=32768, tier="partial"),  # layer offload: no host bound
    RunSpec(ctx=32768, tier="experts_cpu", n_cpu_moe=10),  # some experts only: no host bound
    RunSpec(ctx=32768),  # gpu tier, experts on the GPU: nothing on the host to bound
]


@pytest.mark.parametrize("name", sorted(COEFFICIENTS))
@pytest.mark.parametrize("spec", _RAM_SPECS, ids=repr)
@pytest.mark.parametrize("vram, ram", [(12, 8), (12, 24), (12, 64), (24, 8), (48, 16), (12, None)])
def test_ram_bound_sql_is_ram_may_fit(name, spec, vram, ram):
    co = COEFFICIENTS[name]
    budget = Budget.from_gib(vram, ram_gib=ram)
    found = ram_bound_sql(spec, budget)
    if found is None:  # no --ram, or a tier the rule does not bound
        assert ram_may_fit(co, spec, budget)
        return
    assert _sql_value(*found, _row(co)) == float(ram_may_fit(co, spec, budget))


def test_ram_may_fit_never_excludes_a_quant_that_fits():
    """Against the search's own choice (crawler.ranking.evaluate): a quant ram_may_fit excludes
    has no configuration within the device and --ram (hand-made and header-built MoE
    coefficients, every rule, budgets around their expert bytes); and it does exclude some."""
    cases = [
        *COEFFICIENTS.values(),
        *(_real_coefficients(arch, "real", r) for arch in _MOE_ARCHS for r in ("q4_k_m", "q8_0")),
    ]
    excluded = 0
    for spec in _RAM_SPECS:
        for vram, ram in [(12, 8), (12, 17), (12, 19), (12, 64), (24, 8), (48, 16), (80, 300)]:
            budget = Budget.from_gib(vram, ram_gib=ram)
            for i, co in enumerate(cases):
                if spec.mtp and not co.mtp_available:
                    continue  # --mtp lists only quants with a head (Filters.mtp)
                if not ram_may_fit(co, spec, budget):
                    excluded += 1
                    c = candidate(i, "Q4_K_M", 0.0, coefficients=co, mtp=co.mtp_available)
                    cfg, _est = evaluate(c, spec, budget)
                    assert cfg is None, (i, spec, vram, ram)
    assert excluded >= 20


def test_ram_may_fit_excludes_moe_beyond_the_host():
    co = COEFFICIENTS["moe"]  # 18 GiB of experts, 2 GiB of the rest
    spec = RunSpec(ctx=32768, tier="experts_cpu")
    assert not ram_may_fit(co, spec, Budget.from_gib(12, ram_gib=16))
    assert ram_may_fit(co, spec, Budget.from_gib(12, ram_gib=19))
    assert ram_may_fit(co, spec, Budget.from_gib(48, ram_gib=16))  # fits the GPU whole
    assert ram_may_fit(co, spec, Budget.from_gib(12))  # no --ram
    assert not ram_may_fit(co, RunSpec(ctx=4096, cpu_moe=True), Budget.from_gib(48, ram_gib=16))
