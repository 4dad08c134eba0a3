"""The bounds and their SQL twins, tested as pairs (crawler/ranking/bounds.py).

Each SQL expression is evaluated by SQLite over a ``quants`` row holding the search columns that
crawler.ranking.columns.search_columns computes (what the crawl stores), and compared with
the Python bound it copies.
"""

from __future__ import annotations

import sqlite3

import pytest

from crawler.profile.analysis import MemoryRecord
from crawler.ranking.bounds import (
    bound_sql,
    ctx_bound_sql,
    lower_bound_bytes,
    margin_bound_sql,
    margin_upper_bound,
    prefilter_terms,
    speed_bound_sql,
)
from crawler.ranking.columns import search_columns
from crawler.ranking.model import Budget, RunSpec
from crawler.ranking.speed import speed_bound
from tests.unit.rank_helpers import dense_hybrid, groups, moe

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
