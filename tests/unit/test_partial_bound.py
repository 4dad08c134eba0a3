"""The --tier partial margin and context bounds (crawler/ranking/partial_bound.py, bounds.py)
against what ranking gives, over many synthetic model shapes.

Each shape is a MemoryCoefficients with its own per-layer weights, experts, caches (full, SWA
or recurrent layers, or the older coefficients without a per-layer index) and output layer;
each search a context, cache policy, MTP mode and GPU size. The SQL twins are evaluated by
SQLite over the columns a crawl stores (tests/unit/test_bounds.py's helpers).
"""

from __future__ import annotations

import dataclasses

from hypothesis import event, given, settings
from hypothesis import strategies as st

from crawler.base.errors import EstimateError
from crawler.fit import KVGroup, MemoryCoefficients
from crawler.ranking.bounds import (
    ctx_bound_sql,
    lower_bound_bytes,
    margin_bound_sql,
    margin_upper_bound,
)
from crawler.ranking.evaluate import evaluate, margin_of, with_max_ctx
from crawler.ranking.model import Budget, Ranked, RunSpec
from crawler.ranking.partial_bound import slot_terms
from tests.unit.rank_helpers import candidate, sql_value, stored_row

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
        expert_layers=tuple((il, d, d) for il, d in enumerate(experts)),
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


_SPECS = st.builds(
    RunSpec,
    ctx=st.sampled_from([None, 4096, 32768, 131072]),
    type_k=st.sampled_from(["f16", "q8_0", "q4_0"]),
    type_v=st.sampled_from(["f16", "q8_0", "q4_0"]),
    auto_cache=st.booleans(),
    mtp_auto=st.booleans(),
    cpu_moe=st.booleans(),
    tier=st.just("partial"),
)


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
