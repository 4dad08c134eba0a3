"""The --tier partial and experts_cpu margin bounds and the partial context bound
(crawler/ranking/partial_bound.py, bounds.py) against what ranking gives, over many synthetic
model shapes.

Each shape is a MemoryCoefficients with its own per-layer weights, experts, caches (full, SWA
or recurrent layers, or the older coefficients without a per-layer index) and output layer;
each search a context, cache policy, MTP mode and GPU size. The SQL twins are evaluated by
SQLite over the columns a crawl stores (tests/unit/test_bounds.py's helpers).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from crawler.base.errors import EstimateError
from crawler.fit import KVGroup, MemoryCoefficients
from crawler.fit.estimate import estimate
from crawler.ranking.bounds import (
    ctx_bound_sql,
    lower_bound_bytes,
    margin_bound_sql,
    margin_upper_bound,
)
from crawler.ranking.evaluate import evaluate, margin_of, with_max_ctx
from crawler.ranking.model import Budget, Ranked, RunSpec
from crawler.ranking.partial_bound import slot_terms
from tests.unit.rank_helpers import candidate, moe, sql_value, stored_row

MIB = 1024**2

_KINDS = ("full", "swa", "recurrent")


@st.composite
def shapes(draw: st.DrawFn) -> MemoryCoefficients:
    """A model's coefficients: 2-40 trunk layers of uneven sizes, maybe MoE, maybe an MTP
    block, full-attention, sliding-window and recurrent layers, and maybe stored before the
    per-layer fields (offload then spreads weights and caches evenly)."""
    n_layer = draw(st.integers(2, 40))
    n_nextn = draw(st.integers(0, 1))
    sizes = st.integers(1 * MIB, 900 * MIB)
    dev = draw(st.lists(sizes, min_size=n_layer, max_size=n_layer))
    moe = draw(st.booleans())
    experts = draw(st.lists(sizes, min_size=n_layer, max_size=n_layer)) if moe else []
    kinds = draw(st.lists(st.sampled_from(_KINDS), min_size=n_layer, max_size=n_layer))
    if "full" not in kinds:
        kinds[0] = "full"
    head = draw(st.sampled_from([64, 128, 256]))
    widths = {"full": draw(st.integers(1, 16)) * head, "swa": draw(st.integers(1, 16)) * head}
    groups = tuple(
        KVGroup(kinds.count(k), widths[k], widths[k], k == "swa", head, head)
        for k in ("full", "swa")
        if k in kinds
    )
    index = {g.swa: i for i, g in enumerate(groups)}
    layer_group = tuple(-1 if k == "recurrent" else index[k == "swa"] for k in kinds)
    # An MoE MTP block has routed experts of its own (counted in mtp_weights_bytes, not in
    # expert_bytes: crawler.fit.layout); --cpu-moe moves them only with MTP on.
    mtp_experts = draw(st.integers(1 * MIB, 300 * MIB)) if moe and n_nextn else 0
    output = draw(st.integers(0, 2000 * MIB))
    extra = draw(st.integers(0, 50 * MIB))
    recurrent = kinds.count("recurrent")
    embd = draw(st.sampled_from([1024, 2048, 4096, 7168]))
    co = MemoryCoefficients(
        status="ok",
        architecture="qwen35moe" if recurrent and moe else "qwen35" if recurrent else "llama",
        n_layer=n_layer,
        n_nextn=n_nextn,
        n_embd=embd,
        n_vocab=draw(st.sampled_from([32000, 151936, 248320])),
        n_head=32,
        n_ff=0 if moe else embd * 3,
        n_ff_exp=embd // 4 if moe else 0,
        n_expert=128 if moe else 0,
        n_expert_used=8 if moe else 0,
        n_ctx_train=draw(st.sampled_from([0, 8192, 32768, 131072, 262144])),
        weights_bytes=sum(dev) + output + extra,
        mtp_weights_bytes=400 * MIB if n_nextn else 0,
        expert_bytes=sum(experts),
        host_bytes=300 * MIB,
        expert_layers=tuple((il, d, d) for il, d in enumerate(experts))
        + (((n_layer, mtp_experts, mtp_experts),) if mtp_experts else ()),
        kv_groups=groups,
        mtp_kv_groups=(KVGroup(1, widths["full"], widths["full"], False, head, head),)
        if n_nextn
        else (),
        # Gemma 3's window and Gemma 2's: contexts drawn below n_swa + 512 hold fewer SWA cells
        # than fixed_bytes_f16 counts (the lower bound takes the context's cells there).
        n_swa=draw(st.sampled_from([1024, 4096])) if "swa" in kinds else 0,
        v_width_max=max(widths.values()),
        recurrent_layers=recurrent,
        recurrent_r=3 * 8192 if recurrent else 0,
        recurrent_s=128 * 4096 if recurrent else 0,
        rs_rollback=bool(recurrent),
        conv_dim=8192 if recurrent else 0,
        q_dim=32 * head,
        expert_copy_bytes=draw(st.integers(0, 300 * MIB)) if moe else 0,
        mtp_available=bool(n_nextn),
        layer_weights=tuple((il, d, d) for il, d in enumerate(dev)),
        output_weights=(output, output),
        kv_layer_group=layer_group,
        largest_layer_tensor=max(dev) // 3,
    )
    if draw(st.booleans()):
        return co
    # Stored before partial offload was modelled: no per-layer fields.
    return dataclasses.replace(
        co, layer_weights=(), output_weights=(0, 0), kv_layer_group=(), largest_layer_tensor=0
    )


def _specs(tier: Any, n_cpu_moe: Any = None) -> Any:
    """Run specs of a tier (a strategy), with --n-cpu-moe where ``n_cpu_moe`` draws one."""
    return st.builds(
        RunSpec,
        ctx=st.sampled_from([None, 4096, 32768, 131072]),
        type_k=st.sampled_from(["f16", "q8_0", "q4_0"]),
        type_v=st.sampled_from(["f16", "q8_0", "q4_0"]),
        auto_cache=st.booleans(),
        mtp_auto=st.booleans(),
        cpu_moe=st.booleans(),
        n_cpu_moe=n_cpu_moe if n_cpu_moe is not None else st.just(0),
        tier=tier,
    )


_SPECS = _specs(st.just("partial"))


def _ranked(c, spec: RunSpec, budget: Budget) -> Ranked | None:
    """What ranking keeps of ``c``: its configuration, estimate and margin (None: no fit)."""
    try:
        cfg, est = evaluate(c, spec, budget)
    except EstimateError:
        return None
    if cfg is None or est is None:
        return None
    margin, shares = margin_of(c, cfg, est, budget)
    return Ranked(0, c, cfg, est, margin, shares, None, None, None, "")


@settings(max_examples=400, deadline=None)
@given(co=shapes(), spec=_SPECS, gib=st.sampled_from([2, 4, 6, 8, 12, 16, 24, 48]))
def test_the_partial_bounds_are_never_below_what_ranking_gives(co, spec, gib):
    # --sort margin and --sort ctx stop reading the catalog on these bounds: whatever the
    # shape and the search, the margin and the largest context ranking gives never exceed
    # them, in Python and in SQL.
    budget = Budget.from_gib(gib)
    c = candidate(1, "model", 1.0, coefficients=co, mtp=co.mtp_available)
    r = _ranked(c, spec, budget)
    if r is None:
        return
    event("layer offload" if r.config.n_gpu_layers is not None else "whole or experts in RAM")
    bound = margin_upper_bound(co, spec, budget)
    assert r.margin_bytes <= bound
    row = stored_row(co)
    assert r.margin_bytes <= sql_value(*margin_bound_sql(spec, budget), row)
    max_ctx = with_max_ctx(r, spec, budget).max_ctx
    assert max_ctx is not None and max_ctx <= sql_value(*ctx_bound_sql(spec, budget), row)


@settings(max_examples=100, deadline=None)
@given(co=shapes(), spec=_SPECS, gib=st.sampled_from([4, 8, 12, 24]))
def test_the_margin_sql_is_the_python_bound(co, spec, gib):
    budget = Budget.from_gib(gib)
    expr, params = margin_bound_sql(spec, budget)
    got = sql_value(expr, params, stored_row(co))
    assert abs(got - (margin_upper_bound(co, spec, budget) + 1)) <= 64.0 + 1e-9 * abs(got)


def test_a_layer_offload_bound_is_one_layer_not_the_whole_budget():
    # A 61-layer MoE whose layers (~1.9 GiB each) do not all fit a 12 GiB GPU: ranking offloads
    # some; the bound is about one layer above that margin, not the budget less the floor.
    per = 1900 * MIB
    co = MemoryCoefficients(
        status="ok", architecture="llama", n_layer=61, n_embd=7168, n_vocab=129280, n_head=128,
        n_ff=0, n_ff_exp=2048, n_expert=256, n_expert_used=8, n_ctx_train=163840,
        weights_bytes=61 * 200 * MIB + 900 * MIB, expert_bytes=61 * per,
        host_bytes=900 * MIB, expert_layers=tuple((il, per, per) for il in range(61)),
        kv_groups=(KVGroup(61, 576, 0, False, 576, 512),), v_width_max=0, mla=True,
        q_dim=128 * 192, layer_weights=tuple((il, 200 * MIB, 200 * MIB) for il in range(61)),
        output_weights=(900 * MIB, 900 * MIB), kv_layer_group=(0,) * 61,
        largest_layer_tensor=100 * MIB, expert_copy_bytes=200 * MIB,
    )  # fmt: skip
    spec, budget = RunSpec(ctx=32768, tier="partial"), Budget.from_gib(12)
    c = candidate(1, "model", 1.0, coefficients=co, mtp=False)
    r = _ranked(c, spec, budget)
    assert r is not None and r.config.n_gpu_layers is not None and 1 < r.config.n_gpu_layers < 61
    bound = margin_upper_bound(co, spec, budget)
    loose = budget.device_bytes - lower_bound_bytes(co, spec)
    assert r.margin_bytes <= bound < loose - 8 * 1024**3
    t = slot_terms(co)
    assert t.slot_bytes == 2100 * MIB and t.resident_bytes == 900 * MIB
    assert t.slot_kv_per_token == 2 * 576
    assert bound <= t.slot_bytes + 1152 * 32768 + (1 << 20) + 1  # f16 K, no V (MLA)


# --- --tier experts_cpu: the whole model first, then its experts in RAM ------------------------

_EXPERTS_CPU_SPECS = _specs(
    st.sampled_from(["experts_cpu", "experts_cpu", "partial"]), st.sampled_from([0, 0, 0, 2])
)


def _head_row(co: MemoryCoefficients, present: bool, preserved: bool) -> dict:
    """The stored columns with the quant's two MTP verdicts (the margin bound reads them)."""
    return {**stored_row(co), "mtp_present": present, "mtp_preserved": preserved}


@settings(max_examples=600, deadline=None)
@given(
    co=shapes(),
    spec=_EXPERTS_CPU_SPECS,
    gib=st.sampled_from([2, 4, 6, 8, 12, 16, 24, 48]),
    ram=st.sampled_from([None, 1, 4, 8, 16, 64]),
    present=st.booleans(),
    mtp_bits=st.sampled_from([4.5, 8.5]),
)
def test_the_experts_cpu_margin_bound_is_never_below_what_ranking_gives(
    co, spec, gib, ram, present, mtp_bits
):
    # The experts_cpu bound takes the whole model first where the tier does (_whole_first):
    # whatever the shape, --ram, the quant's MTP verdicts and the tier's own flags, the margin
    # ranking gives never exceeds it, in Python and in SQL, and both agree.
    budget = Budget.from_gib(gib, ram_gib=ram)
    c = candidate(1, "model", 1.0, coefficients=co, mtp=present, mtp_bits=mtp_bits)
    head = bool(c.mtp_present and c.mtp_preserved)
    bound = margin_upper_bound(co, spec, budget, head=head)
    row = _head_row(co, c.mtp_present, c.mtp_preserved)
    expr, params = margin_bound_sql(spec, budget)
    got = sql_value(expr, params, row)
    assert abs(got - (bound + 1)) <= 64.0 + 1e-9 * abs(got)
    r = _ranked(c, spec, budget)
    if r is None:
        return
    event(
        "layer offload"
        if r.config.n_gpu_layers is not None
        else "experts in RAM"
        if r.config.cpu_moe
        else "whole"
    )
    assert r.margin_bytes <= bound
    assert r.margin_bytes <= got


def _a3b(experts_gib: float) -> MemoryCoefficients:
    """A Qwen3.6-35B-A3B-like MoE quant: little besides its routed experts, an MTP block."""
    return dataclasses.replace(moe(0.3, experts_gib), n_nextn=1, mtp_weights_bytes=20 * MIB)


@pytest.mark.parametrize("ram", [None, 64])
def test_a_moe_that_fits_whole_is_bounded_by_its_whole_margin(ram):
    # A 6 GiB MoE quant on a 12 GiB GPU at 32k: the tier keeps it whole (margin ~3.7 GiB). The
    # bound before assumed its experts in RAM (~9.6 GiB, above a 1B dense quant's margin, so
    # the search read every copy of it first); now it is at most its experts' 6 GiB.
    co = _a3b(6.0)
    spec = RunSpec(ctx=32768, tier="experts_cpu", auto_cache=True, mtp_auto=True)
    budget = Budget.from_gib(12, ram_gib=ram)
    c = candidate(1, "IQ1_S", 1.0, coefficients=co, mtp=True, mtp_bits=4.5)  # head not kept
    r = _ranked(c, spec, budget)
    assert r is not None and not r.config.cpu_moe
    bound = margin_upper_bound(co, spec, budget, head=False)
    in_ram = budget.device_bytes - lower_bound_bytes(co, spec)
    assert r.margin_bytes <= bound <= co.expert_bytes < in_ram - 3 * 1024**3
    row = _head_row(co, True, False)
    assert sql_value(*margin_bound_sql(spec, budget), row) == pytest.approx(bound + 1, abs=64)
    # A head that may draft, with --ram: the experts-in-RAM bound stays (_whole_first).
    drafts = margin_upper_bound(co, spec, budget, head=True)
    assert (drafts == bound) if ram is None else drafts > in_ram - 1024**3
    assert sql_value(*margin_bound_sql(spec, budget), _head_row(co, True, True)) == (
        pytest.approx(drafts + 1, abs=64)
    )


def test_a_moe_whose_experts_must_go_to_ram_keeps_its_bound():
    # 18 GiB of experts on a 12 GiB GPU: the whole model never fits, the experts go to RAM and
    # the margin is the experts_cpu tier's; the bound is that tier's, not the experts' bytes.
    co = moe(2.0, 18.0)
    spec = RunSpec(ctx=32768, tier="experts_cpu", auto_cache=True)
    budget = Budget.from_gib(12)
    c = candidate(1, "Q4_K_M", 1.0, coefficients=co, mtp=False)
    r = _ranked(c, spec, budget)
    assert r is not None and r.config.cpu_moe
    bound = margin_upper_bound(co, spec, budget)
    assert r.margin_bytes <= bound == margin_upper_bound(co, spec, budget, head=True)
    assert bound < co.expert_bytes


def test_experts_sent_to_ram_by_a_near_miss_keep_almost_their_bytes_as_margin():
    # The whole model misses the GPU by 1 MiB at its cheapest cache step: the experts go to RAM
    # and free nearly their bytes (less the near miss, the f16 cache's extra and the expert
    # copy area), so the bound's expert_bytes term is within a few hundred MiB of the margin.
    co = dataclasses.replace(moe(2.0, 8.0), expert_copy_bytes=64 * MIB)
    spec = RunSpec(ctx=4096, tier="experts_cpu", auto_cache=True)
    cheapest = spec.base_config().replace(type_k="q4_0", type_v="q4_0", flash_attn="on")
    budget = Budget(vram_bytes=estimate(co, cheapest).total - MIB, headroom_bytes=0)
    c = candidate(1, "Q4_K_M", 1.0, coefficients=co, mtp=False)
    r = _ranked(c, spec, budget)
    assert r is not None and r.config.cpu_moe and r.config.type_k == "f16"
    bound = margin_upper_bound(co, spec, budget)
    assert co.expert_bytes - 300 * MIB < r.margin_bytes <= bound <= co.expert_bytes
