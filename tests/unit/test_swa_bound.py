"""The search's lower bound and its SQL twin on models with sliding-window layers, at contexts
below the window's cells (crawler/ranking/bounds.py): never above the exact estimate.

llama.cpp sizes the SWA cache at min(the context's cells, n_swa + ubatch) padded to 256
(src/llama-kv-cache-iswa.cpp), so below ``n_swa + 512`` tokens it holds fewer cells than the
catalog's fixed cache bytes (MemoryCoefficients.fixed_bytes_f16) count.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.base.errors import InvalidConfig
from crawler.fit import KVGroup, MemoryCoefficients
from crawler.fit.estimate import estimate
from crawler.ranking.bounds import bound_sql, lower_bound_bytes, prefilter_terms
from crawler.ranking.model import Budget, RunSpec
from tests.unit.rank_helpers import sql_value, stored_row

GIB = 1024**3


def swa_model(
    n_swa: int = 4096,
    *,
    swa_layers: int = 2,
    full_layers: int = 1,
    width: int = 1280,
    recurrent: bool = False,
) -> MemoryCoefficients:
    """A small Gemma-like model: ``swa_layers`` sliding-window layers of K and V ``width``
    elements per token, ``full_layers`` full-attention ones (and a recurrent state if asked)."""
    n_layer = swa_layers + full_layers + (2 if recurrent else 0)
    kv = (KVGroup(swa_layers, width, width, True, 128, 128),)
    if full_layers:
        kv += (KVGroup(full_layers, width, width, False, 128, 128),)
    return MemoryCoefficients(
        status="ok",
        architecture="gemma3",
        n_layer=n_layer,
        n_embd=width,
        n_vocab=32000,
        n_head=8,
        n_ff=4 * width,
        n_ctx_train=131072,
        weights_bytes=GIB // 2,
        host_bytes=10**8,
        kv_groups=kv,
        n_swa=n_swa,
        v_width_max=width,
        recurrent_layers=2 if recurrent else 0,
        recurrent_r=3 * 8192 if recurrent else 0,
        recurrent_s=128 * 4096 if recurrent else 0,
        conv_dim=8192 if recurrent else 0,
        q_dim=width,
    )


def _sql_bound(spec: RunSpec, co: MemoryCoefficients) -> float:
    """bound_sql over the crawl's stored columns of ``co``, plus the constant it leaves out."""
    expr, params = bound_sql(spec, Budget.from_gib(24))
    return sql_value(expr, params, stored_row(co)) + prefilter_terms(spec).constant


def test_the_reported_case_is_bounded_below_the_estimate():
    # 3 layers, 2 of them sliding-window of width 1280, n_swa 4096, ctx 4096: llama.cpp's SWA
    # cache holds 4096 cells, not pad(4096 + 512, 256) = 4608; the bound was 786,432 bytes over.
    co, spec = swa_model(), RunSpec(ctx=4096)
    total = estimate(co, spec.base_config()).total
    assert estimate(co, spec.base_config()).swa_cells == 4096
    assert lower_bound_bytes(co, spec) <= total
    assert _sql_bound(spec, co) <= total
    # ... and still counts the SWA cells where the window is full (a bound as tight as before).
    big = RunSpec(ctx=32768)
    assert estimate(co, big.base_config()).swa_cells == co.swa_cells == 4608
    assert lower_bound_bytes(co, big) == lower_bound_bytes(
        dataclasses.replace(co, n_swa=0, kv_groups=co.kv_groups[1:]), big
    ) + int(co.swa_bytes_per_cell_f16 * 4608 * prefilter_terms(big).fixed_ratio)


@settings(max_examples=300, deadline=None)
@given(
    n_swa=st.sampled_from([128, 512, 1024, 4096]),
    swa_layers=st.integers(1, 40),
    full_layers=st.integers(0, 8),
    width=st.sampled_from([256, 1024, 2048, 4096]),
    recurrent=st.booleans(),
    ctx=st.integers(1, 12_000),
    cache=st.sampled_from(["f16", "q8_0", "q4_0", "auto"]),
    ubatch=st.sampled_from([32, 128, 256, 512, 1024]),
    parallel=st.sampled_from([1, 2, 4, None]),
)
def test_the_bound_stays_below_the_estimate_at_every_context(
    n_swa, swa_layers, full_layers, width, recurrent, ctx, cache, ubatch, parallel
):
    # Contexts from 1 token to past the window's cells, any ubatch, unified or per-slot caches:
    # the Python bound and its SQL twin stay at or below every configuration's estimate.
    co = swa_model(
        n_swa, swa_layers=swa_layers, full_layers=full_layers, width=width, recurrent=recurrent
    )
    auto = cache == "auto"
    kind = "f16" if auto else cache
    spec = RunSpec(ctx=ctx, type_k=kind, type_v=kind, auto_cache=auto, ubatch=ubatch,
                   parallel=parallel)  # fmt: skip
    bound = lower_bound_bytes(co, spec)
    assert _sql_bound(spec, co) == pytest.approx(bound, rel=1e-9, abs=64.0)
    pairs = ["f16", "q8_0", "q4_0"] if auto else [kind]
    for k in pairs:
        cfg = spec.base_config().replace(type_k=k, type_v=k)
        try:
            total = estimate(co, cfg).total
        except InvalidConfig:
            continue
        assert bound <= total, (cfg, bound, total)
        assert _sql_bound(spec, co) <= total + 64.0


def test_rows_without_the_window_columns_leave_the_fixed_bytes_out():
    # A snapshot import copies no fit_swa_* column: the SQL bound cannot tell the window from
    # the recurrent state in fit_fixed_bytes, so it counts neither (still below the estimate).
    co, spec = swa_model(recurrent=True), RunSpec(ctx=1024)
    expr, params = bound_sql(spec, Budget.from_gib(24))
    row = {**stored_row(co), "fit_swa_kv_per_cell": None, "fit_swa_cells": None}
    no_fixed = lower_bound_bytes(
        dataclasses.replace(co, n_swa=0, kv_groups=co.kv_groups[1:], recurrent_layers=0), spec
    )
    assert sql_value(expr, params, row) + prefilter_terms(spec).constant == pytest.approx(
        no_fixed, abs=64.0
    )
    assert no_fixed < lower_bound_bytes(co, spec) <= estimate(co, spec.base_config()).total
