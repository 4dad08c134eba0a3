"""The decode-speed model against the measured H200 rows (tests/fixtures/llamacpp/speed*).

The constants in crawler/ranking/speed.py were fitted (tools/fit_speed.py) on the rows
tests.fixtures.llamacpp.speed.held_out leaves in; the held-out rows never entered the fit. Each
bound below is the issue's target or the errors the fit reached; changing any term of the model
(any constant set to 0 or doubled) breaks one of them.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from crawler.ranking import speed
from crawler.ranking.evaluate import MTP_DECLINE_BELOW
from crawler.ranking.speed import SpeedInputs, estimate_speed, expected_tokens
from tests.fixtures.llamacpp.speed import (
    PublishedRow,
    Row,
    depth_fit,
    held_out,
    inputs,
    mtp_pairs,
    predict,
    predict_published,
    published_depth_pairs,
    published_mtp_pairs,
    published_rows,
    rows,
)


def _errors(pick: bool) -> list[float]:
    return [abs(predict(r) / r.measured - 1) for r in rows() if held_out(r) is pick]


def _p90(xs: list[float]) -> float:
    return sorted(xs)[int(0.9 * (len(xs) - 1) + 0.5)]


def _kind(x: SpeedInputs) -> str:
    """The kind of model MTP_DECLINE_BELOW has a threshold for."""
    return "moe" if x.n_expert else "dense"


def _mtp_speedup_errors(kind: str | None = None) -> list[float]:
    """Points of speed-up error at a known acceptance: (pred - measured) of tok/s over the
    same server's MTP-off tok/s, for the held-out acceptances (not 0 or 1); of one ``kind``
    of model or all."""
    return [
        predict(r) / predict(b) - r.measured / b.measured
        for r, b in mtp_pairs()
        if kind in (None, _kind(r.x))
    ]


#: The errors the fit reached (tools/fit_speed.py), rounded up: fitted rows, held-out rows
#: (the targets are median 15 % / p90 30 %), MTP speed-up points at a known acceptance (the
#: acceptance each run's counts show; the target is 10 points: met by 7 of the 9 held-out rows;
#: missed by the MoE row at k=3 a=0.789, 13 points under, and by the seed's file with 128K
#: tokens in its cache on the H100, 13 points under: docs/models.md "Speed model").
FIT_MEDIAN, FIT_P90, FIT_MAX = 0.03, 0.065, 0.145
HELD_MEDIAN, HELD_P90 = 0.045, 0.14
SERVER_MAX = 0.05  # fitted llama-server rows (MTP off and on; the H100's k=3 a=1 at 64K: -4 %)
MTP_POINTS, MTP_TARGET, MTP_WITHIN = 0.14, 0.10, 7


def _within_bounds() -> bool:
    fit, held = _errors(False), _errors(True)
    mtp = _mtp_speedup_errors()
    return (
        statistics.median(fit) <= FIT_MEDIAN
        and _p90(fit) <= FIT_P90
        and max(fit) <= FIT_MAX
        and statistics.median(held) <= HELD_MEDIAN
        and _p90(held) <= HELD_P90
        and max(abs(e) for e in mtp) <= MTP_POINTS
        and sum(abs(e) <= MTP_TARGET for e in mtp) >= MTP_WITHIN
        and max(_server_errors()) <= SERVER_MAX
    )


def _server_errors() -> list[float]:
    return [abs(predict(r) / r.measured - 1) for r in rows() if r.server and not held_out(r)]


def test_rows_are_split_and_cover_every_term() -> None:
    all_rows = rows()
    fit = [r for r in all_rows if not held_out(r)]
    held = [r for r in all_rows if held_out(r)]
    assert len(fit) >= 50 and len(held) >= 50
    # every term is measured by some fitting row
    assert any(r.depth > 0 and r.raw["ctk"] == "f16" for r in fit)
    assert any(r.depth > 0 and r.raw["ctk"] == "q4_0" for r in fit)
    assert any(r.x.experts_on_host for r in fit)
    assert any(r.k > 0 and r.alpha == 0.0 for r in fit)
    assert any(r.k > 0 and r.alpha == 1.0 for r in fit)
    # the H100's rows at 64K and 258K: without MTP with the H200's rows (the same compute),
    # with MTP for the drafting depth term
    assert {r.depth for r in fit if depth_fit(r)} == {65536, 258048}
    assert {(r.k, r.alpha) for r in fit if depth_fit(r)} == {(0, 0.0), (3, 0.0), (3, 1.0)}
    # and held-out rows cover other files, caches, acceptances and an architecture at depth
    assert {r.raw["recipe"] for r in held} >= {"q4_k_m_like", "ud_q3_k_xl_like"}
    assert any(r.raw["ctk"] == "q8_0" for r in held)
    assert any(r.raw["model"] == "gemma3-12b" and r.depth > 0 for r in held)
    # and the other GPU at a depth no depth term was fitted at, with and without MTP
    assert {r.k for r in held if "gpu" in r.raw and r.depth == 131072} >= {0, 3}


def test_fitted_and_held_out_errors_hold() -> None:
    fit, held = _errors(False), _errors(True)
    assert statistics.median(fit) <= FIT_MEDIAN, statistics.median(fit)
    assert _p90(fit) <= FIT_P90 and max(fit) <= FIT_MAX, (_p90(fit), max(fit))
    # within the targets for measured H200 rows held out from fitting (15 % / 30 %)
    assert statistics.median(held) <= HELD_MEDIAN, statistics.median(held)
    assert _p90(held) <= HELD_P90, _p90(held)
    assert max(_server_errors()) <= SERVER_MAX


def test_mtp_speedup_at_known_acceptance() -> None:
    errs = _mtp_speedup_errors()
    assert len(errs) >= 4
    assert max(abs(e) for e in errs) <= MTP_POINTS, errs
    # the 10-point target: every held-out dense row at an empty context (k=2..5, a=0.6..0.85,
    # f16 and a 262K q4_0 cache), the seed's file with 64K and 258K tokens in its cache and the
    # MoE row at k=1; not the MoE row at k=3 a=0.789, nor the seed's file at 128K
    assert sum(abs(e) <= MTP_TARGET for e in errs) >= MTP_WITHIN, errs


@contextmanager
def _mutated(name: str, factor: float) -> Iterator[None]:
    if name.startswith("eff "):
        key = name[4:]
        saved = speed.TYPE_EFFICIENCY[key]
        speed.TYPE_EFFICIENCY[key] = saved * factor if factor else 1e-3  # "0": almost none
        try:
            yield
        finally:
            speed.TYPE_EFFICIENCY[key] = saved
    elif name.startswith("DEPTH_S "):
        table, key = getattr(speed, name.split()[0]), name.split()[1]
        saved = table[key]
        table[key] = saved * factor
        try:
            yield
        finally:
            table[key] = saved
    else:
        saved = getattr(speed, name)
        setattr(speed, name, saved * factor if factor or name != "HOST_EFF" else 1e-3)
        try:
            yield
        finally:
            setattr(speed, name, saved)


TERMS = [
    *(f"eff {t}" for t in ("Q3_K", "IQ3_XXS", "IQ4_XS", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q8_0")),
    "MOE_LAYER_S", "QCACHE_LAYER_S", "SERVER_S", "DRAFT_S", "ACCEPT_S", "VERIFY_S", "HOST_EFF",
    "DEPTH_S vec", "DEPTH_S quant", "DRAFT_DEPTH_LAYERS",
]  # fmt: skip


@pytest.mark.parametrize("term", TERMS)
@pytest.mark.parametrize("factor", [0.0, 2.0])
def test_mutating_any_term_breaks_the_bounds(term: str, factor: float) -> None:
    assert _within_bounds()
    with _mutated(term, factor):
        assert not _within_bounds(), f"{term} x{factor} left every bound intact"


def _row(label_part: str) -> Row:
    return next(r for r in rows() if label_part in r.label)


def test_seed_setup_and_its_range() -> None:
    # the seed: Qwen3.6-27B UD-Q3_K_XL-shaped, -c 262144 -ctk q4_0 -ctv q4_0; measured through
    # llama-server at an empty context: 65.1 tok/s without MTP, 102.3 with k=3 at a=0.789.
    x = inputs("qwen36-27b", "ud_q3_k_xl_like", "q4_0", mtp=True, k=3)
    x = SpeedInputs(**{**{f: getattr(x, f) for f in x.__slots__}, "ctx": 262144})
    off = estimate_speed(SpeedInputs(**{**{f: getattr(x, f) for f in x.__slots__}, "mtp": False}),
                         4890.0)  # fmt: skip
    on = estimate_speed(x, 4890.0, acceptance=0.789)
    assert off.tok_s == pytest.approx(65.1, rel=0.15)
    assert on.tok_s == pytest.approx(102.3, rel=0.15)
    assert on.tok_s_at_ctx < on.tok_s and off.tok_s_at_ctx < off.tok_s
    assert off.basis.startswith("measured GPU class")
    assert estimate_speed(x, 1008.0).basis.startswith("extrapolated")


def test_draft_length_is_chosen_by_predicted_speed() -> None:
    x = inputs("qwen36-27b", "ud_q3_k_xl_like", mtp=True, k=3)
    low = estimate_speed(x, 4890.0, acceptance=0.3, choose_draft=True)
    high = estimate_speed(x, 4890.0, acceptance=0.95, choose_draft=True)
    assert low.draft_n_max < high.draft_n_max
    for est, a in ((low, 0.3), (high, 0.95)):
        for k in speed.DRAFT_N_CHOICES:  # the chosen one is the fastest of the choices
            other = estimate_speed(
                SpeedInputs(**{**{f: getattr(x, f) for f in x.__slots__}, "draft_n_max": k}),
                4890.0, acceptance=a,
            )  # fmt: skip
            assert est.tok_s >= other.tok_s - 1e-9
    assert expected_tokens(1.0, 3) == 4.0 and expected_tokens(0.0, 3) == 1.0


# Published llama-bench rows of other GPUs (tests/fixtures/llamacpp/speed-published.jsonl): the
# per-platform terms are fitted (tools/fit_speed.py --published) on the rows not held out.

#: The issue's target for held-out published rows (median), the errors the fit reached on them
#: (rounded up), and each platform's sum of squared relative errors on its fitting rows (the
#: fit's optimum, 1 % above): any change of a fitted term raises one of them.
PUBLISHED_TARGET = 0.25
PUBLISHED_HELD_MEDIAN, PUBLISHED_FIT_MEDIAN = 0.13, 0.06
PUBLISHED_SSE = {"cuda": 0.0476 * 1.01, "metal": 0.1941 * 1.01}


def _published_errors(held: bool) -> list[float]:
    # the fitted MTP rows fit the MTP share by their speed-up: _published_speedup_points
    return [abs(predict_published(r) / r.measured - 1) for r in published_rows()
            if r.held_out is held and (held or not r.k)]  # fmt: skip


def _published_sse(platform: str) -> float:
    # the fit's objective: relative errors of the seconds per token
    return sum((r.measured / predict_published(r) - 1) ** 2 for r in published_rows()
               if r.platform == platform and not r.held_out and not r.k)  # fmt: skip


#: The published MTP rows' speed-up errors the fit reached (points, rounded up): the fitted
#: rows' sum of squares (the fit's optimum, 1 % above), the held-out rows' median and largest.
PUBLISHED_MTP_SSE, PUBLISHED_MTP_MEDIAN, PUBLISHED_MTP_MAX = 0.00976 * 1.01, 0.073, 0.501


def _published_within_bounds() -> bool:
    fit_pts = _published_speedup_points(held=False)
    held_pts = [abs(e) for e in _published_speedup_points(held=True)]
    return (
        statistics.median(_published_errors(True)) <= PUBLISHED_HELD_MEDIAN
        and statistics.median(_published_errors(False)) <= PUBLISHED_FIT_MEDIAN
        and all(_published_sse(p) <= b for p, b in PUBLISHED_SSE.items())
        and sum(e * e for e in fit_pts) <= PUBLISHED_MTP_SSE
        and statistics.median(held_pts) <= PUBLISHED_MTP_MEDIAN
        and max(held_pts) <= PUBLISHED_MTP_MAX
    )


def _mtp_fit_sources(platform: str) -> set[str]:
    return {r.raw["source"] for r in published_rows()
            if r.platform == platform and r.k and not r.held_out}  # fmt: skip


def test_published_rows_are_cited_split_and_counted() -> None:
    pub = published_rows()
    assert all(r.raw["source"].startswith("https://") for r in pub)
    for p in ("cuda", "metal"):
        fit = [r for r in pub if r.platform == p and not r.held_out]
        held = [r for r in pub if r.platform == p and r.held_out]
        assert len(fit) == speed.PUBLISHED_ROWS[p] and len(held) >= 4
        # held out by GPU, model or source: no held-out row has a fitting row of the same GPU,
        # model and source (MTP rows apart: the share's fitting rows are another source's)
        fitted = {(r.raw["gpu"], r.raw["model"], r.raw["source"]) for r in fit if not r.k}
        assert not any((r.raw["gpu"], r.raw["model"], r.raw["source"]) in fitted
                       for r in held if not r.k)  # fmt: skip
    # each platform's MTP share is fitted on one source's MTP rows; CUDA's held-out MTP rows
    # are other sources'
    assert all(len(_mtp_fit_sources(p)) == 1 for p in ("cuda", "metal"))
    held_cuda = {r.raw["source"] for r in pub if r.platform == "cuda" and r.k and r.held_out}
    assert len(held_cuda) >= 2 and not held_cuda & _mtp_fit_sources("cuda")
    assert {r.raw["model"] for r in pub} >= {"llama2-7b", "qwen3-30b-a3b", "qwen35-27b"}
    assert any(r.x.n_moe_layers for r in pub if r.held_out)


def test_published_held_out_rows_meet_the_target() -> None:
    held = _published_errors(True)
    assert len(held) >= 12
    assert statistics.median(held) <= PUBLISHED_TARGET, statistics.median(held)
    assert _published_within_bounds(), (
        statistics.median(held), statistics.median(_published_errors(False)),
        {p: _published_sse(p) for p in PUBLISHED_SSE},
    )  # fmt: skip


def test_published_rows_at_depth_follow_compute_not_bandwidth() -> None:
    # an RTX 4090 (1.23x the H200's FP32, 0.21x its bandwidth) through llama-server with 1K to
    # 64K tokens of a q4_0 cache: held out, as every published row at depth
    deep = [r for r in published_rows() if r.depth and r.raw["ctk"] == "q4_0"]
    assert len(deep) >= 10 and all(r.held_out for r in deep)
    assert {r.depth for r in deep} >= {1024, 65536}
    errs = [predict_published(r) / r.measured - 1 for r in deep]
    assert max(abs(e) for e in errs) <= 0.05, errs
    # the attention term scaled by the bandwidth ratio instead (as where a GPU's compute is not
    # known) predicts the deepest rows (llama-server, 64K) far too slow
    for r in (r for r in deep if r.depth == 65536):
        by_bw = 1 / speed.decode_seconds(r.x, r.bandwidth_gb_s, r.depth, server=True)
        assert by_bw / r.measured - 1 < -0.25


def test_an_f16_cache_at_depth_costs_its_bytes_not_the_query_width() -> None:
    # the H200's Gemma 3 12B rows at 8K and 32K of an f16 cache (held out: sliding-window layers,
    # 256-wide heads, 2 query heads per KV head): the slowdown from an empty context within 2
    # points of the measured one
    base = _row("gemma3-12b q4_k_m_like f16 d0 (pass 3)")
    for depth in (8192, 32768):
        deep = _row(f"gemma3-12b q4_k_m_like f16 d{depth} (pass 3)")
        assert held_out(deep)
        pred, measured = predict(deep) / predict(base), deep.measured / base.measured
        assert abs(pred - measured) <= 0.02, (depth, pred, measured)
    # per query-head element, as a quantized cache is costed, the fitted Llama-3-8B rate gives
    # Gemma 3 less than half its measured cost at 32K (the last row of the loop)
    llama = _row("llama8b q4_k_m_like f16 d32768 (pass 3)").x
    per_q = speed.DEPTH_S["vec"] * llama.kv_row_bytes / llama.q_width
    x = base.x
    by_q = (x.n_attn * 32768 + x.n_swa * x.swa_window) * x.q_width * per_q
    assert by_q < 0.5 * (1 / deep.measured - 1 / base.measured)


def test_published_f16_rows_at_depth_follow_the_cache_read() -> None:
    # an NVIDIA GB10 (DGX Spark, 273 GB/s) through llama-bench with 4K to 32K tokens of an f16
    # cache (llama.cpp's benches/dgx-spark.md): held out. Its weight reads reach more of its
    # bandwidth than the CUDA share, so each row is taken against the same model's empty-context
    # row: the slowdown within 4 points at every depth.
    spark = [r for r in published_rows() if r.raw["gpu"] == "DGX Spark (GB10)"]
    assert len(spark) == 15 and all(r.held_out for r in spark)
    pairs = [(r, b) for r, b in published_depth_pairs() if r.raw["gpu"] == "DGX Spark (GB10)"]
    assert len(pairs) == 12 and all(b.depth == 0 for _r, b in pairs)
    for r, b in pairs:
        pred = predict_published(r) / predict_published(b)
        assert abs(pred - r.measured / b.measured) <= 0.04, (r.label, pred)


def _published_speedup_points(
    held: bool, fp32: bool = True, kind: str | None = None
) -> list[float]:
    """Points of MTP speed-up error of the published MTP rows held out (or fitted), each
    against its own source's MTP-off row, with the GPU's compute or (``fp32`` False) without
    it; of one ``kind`` of model or all."""
    out = []
    for r, b in published_mtp_pairs():
        if r.held_out is not held or kind not in (None, _kind(r.x)):
            continue
        if fp32:
            pred = predict_published(r) / predict_published(b)
        else:
            cycle = speed.mtp_cycle_seconds(r.x, r.bandwidth_gb_s, r.k, r.alpha)
            pred = (
                expected_tokens(r.alpha, r.k) / cycle * speed.decode_seconds(b.x, b.bandwidth_gb_s)
            )
        out.append(pred - r.measured / b.measured)
    return out


def test_mtp_auto_leaves_a_head_off_only_below_every_error_seen() -> None:
    """MTP auto's thresholds (crawler.ranking.evaluate.MTP_DECLINE_BELOW) are 1 less the largest
    under-prediction of a speed-up on the MTP rows of each kind (dense, MoE) at a known
    acceptance, measured (between 0 and 1) or published, fitted or held out: a head it leaves off
    would be slower even at that error."""
    errs = {
        kind: _mtp_speedup_errors(kind)
        + [e for held in (True, False) for e in _published_speedup_points(held, kind=kind)]
        for kind in MTP_DECLINE_BELOW
    }
    assert len(errs["dense"]) >= 25 and len(errs["moe"]) >= 3
    for kind, below in MTP_DECLINE_BELOW.items():
        assert 1 - below >= -min(errs[kind]) > 1 - below - 0.01, (kind, min(errs[kind]))


def _held_mtp_rows() -> list[PublishedRow]:
    return [r for r, _b in published_mtp_pairs() if r.held_out]


def test_published_mtp_speedups_on_consumer_gpus() -> None:
    # held out: another RTX 5090's sweep at draft lengths 1-6, two files on an RTX 3090 at 2, an
    # RTX 4090 on a Windows desktop at 2 and 4, a V100 in a server at 1-4 and 6 and a MoE
    # (Qwen3.6-35B-A3B) on an RTX 5060 Ti at 2, each at the draft acceptance reported (CUDA's
    # share is fitted on a sixth source: an RTX 5090 at 1-3), and an Apple M4 at 2 with an 8K
    # context (Metal's is fitted on its run at 32K). Within 10 points on 9 of the 17: the
    # 3090's 2-bit file 17 under (its MTP-off row is predicted 14 % too fast), the 4090's 16
    # and 33 over (its drafts cost more than the H200's), the V100's 11-14 under at k=1-4 (its
    # MTP-off row 7 % too fast), the MoE 50 under (1.47x measured): docs/models.md
    held = _published_speedup_points(held=True)
    assert len(held) >= 17
    assert sum(abs(e) <= 0.10 for e in held) >= 9, held
    assert max(abs(e) for e in held) <= PUBLISHED_MTP_MAX, held
    assert statistics.median(abs(e) for e in held) <= PUBLISHED_MTP_MEDIAN, held
    assert len(_published_speedup_points(held=False)) >= 3
    # the H200's drafting costs at the GPU's compute (share 1) put the eight Linux desktop rows
    # 0-32 points under (median 16); scaled by bandwidth (as where the GPU's compute is not
    # known) the 5090s' 59-74 under
    with _platform_mutated(speed.PLATFORM_MTP_SHARE, "cuda", 1 / speed.PLATFORM_MTP_SHARE["cuda"]):
        full = _published_speedup_points(held=True)
        by_bw = _published_speedup_points(held=True, fp32=False)
    linux = [e for e, r in zip(full, _held_mtp_rows(), strict=True)
             if r.raw["gpu"].startswith("GeForce") and "Windows" not in r.raw["note"]]  # fmt: skip
    assert len(linux) == 9
    assert statistics.median(abs(e) for e in linux) > 0.15 and max(linux) < 0.01
    rtx5090 = [e for e, r in zip(by_bw, _held_mtp_rows(), strict=True)
               if r.raw["gpu"] == "GeForce RTX 5090"]  # fmt: skip
    assert min(rtx5090) < -0.55 and statistics.median(abs(e) for e in rtx5090) > 0.3


@contextmanager
def _platform_mutated(table: dict[str, float], key: str, factor: float) -> Iterator[None]:
    saved = table[key]
    table[key] = saved * factor
    try:
        yield
    finally:
        table[key] = saved


PLATFORM_TERMS = [
    ("PLATFORM_EFFICIENCY", "cuda"), ("PLATFORM_EFFICIENCY", "metal"),
    ("PLATFORM_LAYER_S", "metal"), ("PLATFORM_MOE_LAYER_S", "metal"),
    ("PLATFORM_MTP_SHARE", "cuda"), ("PLATFORM_MTP_SHARE", "metal"),
]  # fmt: skip


@pytest.mark.parametrize(("table", "key"), PLATFORM_TERMS)
@pytest.mark.parametrize("factor", [0.0, 2.0])
def test_mutating_a_platform_term_breaks_the_published_bounds(
    table: str, key: str, factor: float
) -> None:
    assert _published_within_bounds()
    values = getattr(speed, table)
    with _platform_mutated(
        values, key, factor if factor or table != "PLATFORM_EFFICIENCY" else 1e-3
    ):
        assert not _published_within_bounds(), f"{table}[{key}] x{factor} left the bounds intact"


def test_the_h200_keeps_its_measured_terms_and_other_gpus_say_so() -> None:
    x = inputs("llama8b", "q4_k_m_like")
    h200 = estimate_speed(x, 4890.0)
    # the measured GPU pays no platform layer cost: raising it leaves the H200 estimate alone
    with _platform_mutated(speed.PLATFORM_LAYER_S, "cuda", 0.0):
        speed.PLATFORM_LAYER_S["cuda"] = 1e-3
        assert estimate_speed(x, 4890.0).tok_s == h200.tok_s
        assert estimate_speed(x, 1008.0).tok_s < 1 / 0.032  # 32 layers x 1 ms
    assert h200.basis.startswith("measured")
    metal = estimate_speed(x, 400.0, platform=speed.gpu_platform("Apple M2 Max"))
    assert metal.basis == "extrapolated from 9 published Metal rows"
    assert estimate_speed(x, 936.2).basis == "extrapolated from 9 published CUDA rows"
    assert speed.gpu_platform("GeForce RTX 3090") == "cuda" and speed.gpu_platform(None) == "cuda"


def test_rows_between_0_and_1_run_at_the_acceptance_their_counts_show() -> None:
    # each cycle yields its accepted drafts and one token: the mean length the run reached
    between = [r for r in rows() if r.k and r.raw["alpha"] not in (0.0, 1.0)]
    assert len(between) >= 9
    for r in between:
        n, kept = r.raw["predicted_n"], r.raw["draft_n_accepted"]
        assert expected_tokens(r.alpha, r.k) == pytest.approx(n / (n - kept))
        assert r.alpha != r.raw["alpha"] and abs(r.alpha - r.raw["alpha"]) < 0.09
