"""The SVG charts (crawler.charts): escaping, ticks, the Pareto front, heatmap and memory data."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from crawler.charts import (
    ScatterPoint,
    heatmap_svg,
    layer_group_bits,
    memory_curves,
    memory_svg,
    pareto_front,
    quant_group_bits,
    scatter_svg,
    stack_svg,
)
from crawler.charts.svg import esc, nice_ticks
from crawler.fit import KVGroup, MemoryCoefficients, RunConfig, estimate, max_ctx

HOSTILE = "<script>alert(1)</script>\x1b[31m&\"'\u202e\x00"
GIB = 1024**3


def _parse(svg: str) -> ET.Element:
    return ET.fromstring(svg.split("?>", 1)[-1])  # well-formed XML or this raises


def test_hostile_text_is_character_data_in_every_chart() -> None:
    hm = quant_group_bits([(HOSTILE, [("attn", 4, 8), ("ffn", 3, 4)])])
    charts = [
        heatmap_svg(hm, title=HOSTILE, row_axis=HOSTILE),
        scatter_svg([ScatterPoint(HOSTILE, 10 * GIB, 50.0)], title=HOSTILE),
        memory_svg([], title=HOSTILE),
    ]
    for svg in [*charts, stack_svg(charts, title=HOSTILE)]:
        assert "<script" not in svg and "\x1b" not in svg and "\x00" not in svg
        root = _parse(svg)
        assert not [e for e in root.iter() if e.tag.endswith("script")]
        titles = [e.text for e in root.iter() if e.tag.endswith("title")]
        assert any(t and "<script>alert(1)</script>" in t for t in titles)


def test_esc_escapes_markup_and_quotes() -> None:
    assert esc('<a href="x">\'&') == "&lt;a href=&quot;x&quot;&gt;&#x27;&amp;"


@given(st.floats(-1e6, 1e6), st.floats(0.001, 1e6))
def test_nice_ticks_cover_the_range_in_round_steps(lo: float, span: float) -> None:
    hi = lo + span
    ticks = nice_ticks(lo, hi)
    assert 2 <= len(ticks) <= 12
    assert all(lo - 1e-6 * span <= t <= hi + 1e-6 * span for t in ticks)
    assert ticks == sorted(ticks)


@given(st.lists(st.tuples(st.integers(1, 100), st.floats(0, 100)), min_size=1, max_size=30))
def test_pareto_front_is_exactly_the_non_dominated_points(raw) -> None:
    points = [ScatterPoint(f"q{i}", s, q) for i, (s, q) in enumerate(raw)]
    front = pareto_front(points)

    def dominated(p: ScatterPoint) -> bool:
        return any(
            o.size_bytes <= p.size_bytes
            and o.quality >= p.quality
            and (o.size_bytes, o.quality) != (p.size_bytes, p.quality)
            for o in points
        )

    assert all(not dominated(p) for p in front)
    kept = {(p.size_bytes, p.quality) for p in front}
    assert all((p.size_bytes, p.quality) in kept for p in points if not dominated(p))


@dataclass(frozen=True)
class Row:
    layer: int | None
    group: str
    bits: int | None
    is_matrix: bool


def test_layer_group_bits_takes_min_and_max_of_matrices_only() -> None:
    rows = [
        Row(0, "attn", 8, True),
        Row(0, "attn", 6, True),
        Row(0, "ffn", 4, True),
        Row(0, "norm", 32, False),  # 1-D: not a weight matrix
        Row(1, "ffn", 5, True),
        Row(None, "output", 6, True),  # not in a block
    ]
    hm = layer_group_bits(rows)
    assert hm.row_labels == ("blk.0", "blk.1")
    assert hm.col_labels == ("attn", "ffn")
    assert hm.cells == (((6, 8), (4, 4)), (None, (5, 5)))
    svg = heatmap_svg(hm, title="t", row_axis="layer")
    assert svg.count('class="cell"') == 3 and "6-8" in svg


def _coeffs() -> MemoryCoefficients:
    return MemoryCoefficients(
        status="ok",
        architecture="llama",
        weights_bytes=8 * GIB,
        host_bytes=GIB // 2,
        n_layer=32,
        n_head=32,
        n_ctx_train=131072,
        n_embd=4096,
        n_vocab=128256,
        kv_groups=(
            KVGroup(count=32, k_width=1024, v_width=1024, swa=False, k_head=128, v_head=128),
        ),
    )


def test_memory_curves_are_the_estimates_and_max_ctx_of_the_fit_model() -> None:
    co = _coeffs()
    base = RunConfig(ctx=4096, flash_attn="on")
    budget = 12 * GIB
    curves = memory_curves(co, base, budget_bytes=budget)
    assert [(c.type_k, c.type_v) for c in curves] == [("f16", "f16"), ("q8_0", "q8_0"),
                                                     ("q4_0", "q4_0")]  # fmt: skip
    for c in curves:
        cfg = base.replace(type_k=c.type_k, type_v=c.type_v)
        assert all(total == estimate(co, cfg.replace(ctx=ctx)).total for ctx, total in c.points)
        assert c.max_ctx == max_ctx(co, cfg, budget)
        totals = [t for _, t in c.points]
        assert totals == sorted(totals)  # more context, more memory
    assert curves[2].max_ctx >= curves[1].max_ctx >= curves[0].max_ctx
    svg = memory_svg(curves, budget_bytes=budget, standalone=True)
    root = _parse(svg)
    assert svg.count('class="curve"') == 3 and 'class="budget"' in svg
    assert svg.count('class="maxctx"') == sum(1 for c in curves if c.max_ctx)
    assert "prefers-color-scheme: dark" in svg and root.tag.endswith("svg")
    assert "context (tokens, log scale)" in svg and "device memory (GiB)" in svg
