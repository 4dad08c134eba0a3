"""The bounds and their SQL twins, tested as pairs (crawler/ranking/bounds.py).

Each SQL expression is evaluated by SQLite over a ``quants`` row holding the search columns that
crawler.ranking.columns.search_columns computes (what the crawl stores), and compared with
the Python bound it copies.
"""

from __future__ import annotations

import dataclasses
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.base.errors import EstimateError
from crawler.fit import MemoryCoefficients
from crawler.fit.coefficients import coefficients
from crawler.fit.estimate import estimate
from crawler.fit.gpus import load_gpus
from crawler.gguf.parse import parse_header_bytes
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
)
from crawler.ranking.evaluate import evaluate, speed_inputs, speed_of, weight_bits
from crawler.ranking.model import Budget, RunSpec
from crawler.ranking.speed import (
    DRAFT_N_CHOICES,
    MOE_LAYER_S,
    PLATFORM_MOE_LAYER_S,
    expected_tokens,
)
from crawler.ranking.speed_bound import speed_bound_for, speed_bound_sql
from tests import synth
from tests.unit.rank_helpers import candidate, dense_hybrid, moe, sql_value, stored_row

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


@pytest.mark.parametrize("name", sorted(COEFFICIENTS))
@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_bound_sql_is_lower_bound_bytes(name, spec):
    co = COEFFICIENTS[name]
    budget = Budget.from_gib(24)
    expr, params = bound_sql(spec, budget)
    in_sql = sql_value(expr, params, stored_row(co))
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
    assert sql_value(expr, params, stored_row(co)) == pytest.approx(expected, rel=1e-9, abs=64.0)
    assert margin_upper_bound(co, spec, budget) <= budget.device_bytes - lower_bound_bytes(co, spec)


@pytest.mark.parametrize("name", sorted(COEFFICIENTS))
def test_ctx_bound_sql_caps_at_the_trained_context(name):
    co = COEFFICIENTS[name]
    spec, budget = RunSpec(ctx=8192), Budget.from_gib(1000)
    expr, params = ctx_bound_sql(spec, budget)
    value = sql_value(expr, params, stored_row(co))
    # A budget far above the weights: the bound is the cap (trained context, or 1 Mi unknown).
    assert value == float(co.n_ctx_train or (1 << 20))
    tight = Budget.from_gib(co.weights_bytes / 1024**3 + co.expert_bytes / 1024**3 + 1.5)
    assert sql_value(*ctx_bound_sql(spec, tight), stored_row(co)) < value


@pytest.mark.parametrize("name", sorted(COEFFICIENTS))
@pytest.mark.parametrize("mtp", [False, True])
@pytest.mark.parametrize("label", ["Q4_K_M", "UD-Q3_K_XL", "Q8_0", None])
@pytest.mark.parametrize("tier", ["gpu", "experts_cpu"])
@pytest.mark.parametrize(
    "gpu", [("GeForce RTX 4090", 1008.0), ("H200 SXM", 4890.0), ("Apple M4 Max", 546.0)]
)
def test_speed_bound_sql_is_speed_bound(name, mtp, label, tier, gpu):
    co = COEFFICIENTS[name]
    spec = RunSpec(ctx=8192, mtp=mtp, tier=tier)
    budget = Budget.from_gib(24, bandwidth_gb_s=gpu[1], gpu_name=gpu[0])
    row = stored_row(co, label)
    expr, params = speed_bound_sql(spec, budget)
    expected = speed_bound_for(spec, budget).tok_s(
        read_bytes=row["fit_read_bytes"],
        n_moe_layers=row["fit_moe_layers"],
        draft_bytes=row["fit_draft_bytes"],
        verify_experts=row["fit_verify_experts"],
        type_eff=row["fit_type_eff"],
        n_layers=row["fit_trunk_layers"],
    )
    assert sql_value(expr, params, row) == pytest.approx(expected, rel=1e-12)
    # A quant whose type efficiency is not stored (NULL) gets the fastest type's rate.
    unknown = speed_bound_for(spec, budget).tok_s(
        row["fit_read_bytes"], row["fit_moe_layers"], row["fit_draft_bytes"]
    )
    null = {**row, "fit_type_eff": None, "fit_trunk_layers": None}
    assert sql_value(expr, params, null) == pytest.approx(unknown)
    assert unknown >= expected


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
    assert sql_value(*found, stored_row(co)) == float(ram_may_fit(co, spec, budget))


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


# --- --sort speed: the stored bound against the estimate ranking makes -----------------------

#: Quants of every kind the speed estimate tells apart: dense (hybrid, with and without an MTP
#: head), MoE with large and with tiny active experts (where the host's rate matters).
SPEED_SHAPES = {
    "dense_27b": lambda: dense_hybrid(16.0),
    "dense_small": lambda: dense_hybrid(1.5, mtp=False),
    "dense_small_mtp": lambda: dense_hybrid(2.5),
    "moe": lambda: moe(2.0, 18.0),
    "moe_tiny_experts": lambda: moe(6.0, 0.4),
}
#: Labels with a type mix (plain, _S/_M/_L, _XL and UD- mixes, IQ types) and without one (the
#: bits class decides).
SPEED_LABELS = (
    "Q4_K_M", "Q4_K_S", "Q5_K_M", "Q6_K", "Q8_0", "Q4_0", "IQ4_XS", "IQ3_XXS", "UD-Q3_K_XL",
    "UD-Q2_K_XL", "Q2_K", "Q3_K_L", "IQ1_S", "IQ4_NL", "BF16", "F16", "mxfp4", None,
)  # fmt: skip
SPEED_SPECS = (
    RunSpec(ctx=8192),
    RunSpec(ctx=32768, tier="experts_cpu"),
    RunSpec(ctx=32768, tier="partial"),
    RunSpec(ctx=8192, cpu_moe=True),
    RunSpec(ctx=65536, mtp=True),
    RunSpec(ctx=8192, mtp=True, spec_draft_n_max=1, mtp_acceptance=1.0),
    RunSpec(ctx=8192, mtp=True, spec_draft_n_max=5, mtp_acceptance=1.0),
    RunSpec(ctx=8192, mtp=True, spec_draft_n_max=0),
    RunSpec(ctx=8192, mtp_auto=True, spec_draft_auto=True, mtp_acceptance=0.95),
    RunSpec(ctx=32768, auto_cache=True, mtp_auto=True, spec_draft_auto=True),
    RunSpec(ctx=16384, type_k="q8_0", type_v="q8_0"),
)
_GPUS = load_gpus()


def _speed_case(shape, label, ffn_bits, spec, gpu, mtp_bits=8.5):
    """(SQL bound, the estimate's tok/s, the bound before fit_type_eff) for one quant, or None
    when it does not fit."""
    co = SPEED_SHAPES[shape]()
    c = candidate(1, label or "model", 16.0, coefficients=co, ffn_bits=ffn_bits,
                  mtp=co.mtp_available, mtp_bits=mtp_bits)  # fmt: skip
    c = dataclasses.replace(c, quant_label=label)
    budget = Budget.from_gib(
        gpu.memory_gib, ram_gib=64, bandwidth_gb_s=gpu.bandwidth_gb_s, gpu_name=gpu.name
    )
    try:
        cfg, est = evaluate(c, spec, budget)
    except EstimateError:  # llama.cpp would refuse the configuration (ranking skips it)
        return None
    if cfg is None or est is None:
        return None
    speed = speed_of(c, est, budget, acceptance=spec.mtp_acceptance,
                     choose_draft=spec.spec_draft_auto)  # fmt: skip
    assert speed is not None
    row = {**stored_row(co, label, c.groups), "mtp_present": c.mtp_present,
           "mtp_preserved": c.mtp_preserved}  # fmt: skip
    # The stored efficiency is the one of the estimate's own inputs.
    x = speed_inputs(co, cfg, bits=weight_bits(c.groups), label=label)
    assert row["fit_type_eff"] == x.type_efficiency
    bound = sql_value(*speed_bound_sql(spec, budget), row)
    return bound, speed.tok_s, _bound_before(row, spec, budget)


def _bound_before(row, spec, budget):
    """The --sort speed bound before fit_type_eff (any platform, the fastest type)."""

    def one(mtp):
        fastest = min(0.82 * budget.bandwidth_gb_s, 0.394 * 4890.0)
        if spec.cpu_moe:
            fastest = max(fastest, 0.629 * 60.0)
        tau = 0.0 if spec.cpu_moe else min(MOE_LAYER_S, *PLATFORM_MOE_LAYER_S.values())
        ks = (*DRAFT_N_CHOICES, spec.spec_draft_n_max) if mtp else (0,)
        expected = max(expected_tokens(spec.mtp_acceptance, n) for n in ks)
        seconds = row["fit_read_bytes"] / (fastest * 1e9) + row["fit_moe_layers"] * tau
        return expected / seconds * (1 + 1e-9 if row["fit_moe_layers"] else 1.0)

    if spec.mtp_auto and not spec.mtp and row["mtp_present"] and row["mtp_preserved"]:
        return max(one(True), one(False))
    return one(spec.mtp)


@settings(max_examples=300, deadline=None)
@given(
    shape=st.sampled_from(sorted(SPEED_SHAPES)),
    label=st.sampled_from(SPEED_LABELS),
    ffn_bits=st.sampled_from([2.6, 3.5, 4.5, 6.6, 8.5, 16.0]),
    spec=st.sampled_from(SPEED_SPECS),
    gpu=st.sampled_from(_GPUS),
)
def test_the_stored_speed_bound_is_never_below_the_estimate(shape, label, ffn_bits, spec, gpu):
    # --sort speed stops reading the catalog on this bound: whatever the quant, its label and
    # bits, the configuration and the GPU (its platform and bandwidth), it never undercuts the
    # tok/s ranking estimates, computed the way ranking does (evaluate, speed_of).
    case = _speed_case(shape, label, ffn_bits, spec, gpu)
    if case is not None:
        bound, estimate, _ = case
        assert bound >= estimate


def test_the_stored_speed_bound_is_tighter_than_the_fastest_type_bound():
    # Every quant on every fourth GPU, by default and with MTP: the bound with the quant's own
    # weight rate and the GPU's platform is never looser than the one before it, and much
    # closer to the estimate (the search estimates fewer quants).
    before, after = [], []
    for shape in SPEED_SHAPES:
        for label in SPEED_LABELS:
            for spec in (RunSpec(ctx=8192), RunSpec(ctx=65536, mtp=True)):
                for gpu in _GPUS[::4]:
                    case = _speed_case(shape, label, 4.5, spec, gpu)
                    if case is None:
                        continue
                    bound, estimate, old = case
                    assert estimate <= bound <= old
                    before.append(old / estimate)
                    after.append(bound / estimate)
    assert len(after) > 500
    assert statistics.median(after) < 1.1 < 1.3 < statistics.median(before)


def test_experts_that_may_stay_in_host_memory_are_bounded_at_the_host_rate():
    # A MoE with tiny routed experts that only fits with them in RAM (--tier experts_cpu): the
    # estimate reads them at the host's rate and pays no MoE layer cost, which the bound before
    # (experts on the GPU, with the MoE layer cost) undercut.
    # On an H200 (Q8_0 reads at the same rate in both bounds) with 8 GiB the experts must go.
    gpu = dataclasses.replace(next(g for g in _GPUS if g.name == "H200 NVL"), memory_gib=8.0)
    spec = RunSpec(ctx=32768, tier="experts_cpu")
    case = _speed_case("moe_tiny_experts", "Q8_0", 8.5, spec, gpu)
    assert case is not None
    bound, estimate, old = case
    assert old < estimate <= bound
    roomy = _speed_case(
        "moe_tiny_experts", "Q8_0", 8.5, spec, dataclasses.replace(gpu, memory_gib=9.0)
    )
    assert roomy is not None and roomy[1] < estimate <= roomy[0]  # experts on the GPU: slower


@pytest.mark.parametrize("parallel", [1, 2, 3, 4, None])
@pytest.mark.parametrize("ctx", [512, 3072, 12000, 65536])
def test_the_mask_term_of_per_slot_caches_stays_below_the_estimate(parallel, ctx):
    # With --parallel N each slot's FA mask spans its own cells (ctx / N), not the context's:
    # a small model, whose estimate has little above the bound's floor, shows it (the bound
    # was 8.8 MB above the estimate at 12,000 tokens and 4 slots).
    from crawler.fit import KVGroup

    co = MemoryCoefficients(
        status="ok", architecture="llama", n_layer=1, n_embd=256, n_vocab=32000, n_head=8,
        n_ff=1024, n_ctx_train=131072, weights_bytes=1 << 29, host_bytes=10**8,
        kv_groups=(KVGroup(1, 256, 256, False, 128, 128),), v_width_max=256, q_dim=256,
    )  # fmt: skip
    spec = RunSpec(ctx=ctx, parallel=parallel)
    assert lower_bound_bytes(co, spec) <= estimate(co, spec.base_config()).total


# --- the keys the shape reads take from the shape listing ------------------------------------


@pytest.mark.parametrize(
    "spec, ram",
    [
        (RunSpec(ctx=32768), None),
        (RunSpec(ctx=32768, tier="experts_cpu", auto_cache=True, mtp_auto=True), 64),
        (RunSpec(ctx=32768, tier="partial", auto_cache=True, mtp_auto=True), None),
        (RunSpec(ctx=None, tier="partial"), 16),
        (RunSpec(ctx=65536, mtp=True, cpu_moe=True), None),
    ],
    ids=repr,
)
def test_the_margin_and_ctx_keys_read_only_exact_shape_columns(spec, ram):
    # crawler.catalog.ordered reads a margin or ctx run's key from its shapes (_EXACT_KEYS):
    # true only while those bounds read integer and boolean shape columns, which the shape text
    # holds exactly (a float may be rounded to 15 digits there). Speed reads floats.
    import re

    import sqlalchemy as sa

    from crawler.catalog.candidates import SHAPE_COLUMNS
    from crawler.catalog.tables import Quant

    def columns(expr: str) -> set[str]:
        return set(re.findall(r"\bq\.(\w+)", expr))

    budget = Budget.from_gib(12, ram_gib=ram, bandwidth_gb_s=360.0)
    read = columns(margin_bound_sql(spec, budget)[0]) | columns(ctx_bound_sql(spec, budget)[0])
    assert read and read <= set(SHAPE_COLUMNS)
    types = {c: type(Quant.__table__.c[c].type) for c in read}
    assert all(t in (sa.BigInteger, sa.Boolean) for t in types.values()), types
    speed = columns(speed_bound_sql(spec, budget)[0])
    assert any(type(Quant.__table__.c[c].type) is sa.Float for c in speed)
