"""Ranking: exact fit at the boundary, filters, sort keys and tie-breaks, commands, properties."""

from __future__ import annotations

import dataclasses
import shlex

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler.base.errors import UsageError
from crawler.fit import RunConfig, estimate
from crawler.ranking.bounds import lower_bound_bytes
from crawler.ranking.commands import hf_args, lmstudio_command, ollama_command
from crawler.ranking.model import SORT_KEYS, Budget, Filters, RunSpec
from crawler.ranking.query import QueryMatcher
from crawler.ranking.rank import rank_candidates
from tests.unit.rank_helpers import GIB, candidate, dense_hybrid, moe

CTX = 262144


def _total(c, spec: RunSpec) -> int:
    return estimate(c.coefficients, spec.base_config()).total


def _budget_bytes(total: int, headroom: int = 0) -> Budget:
    return Budget(vram_bytes=total + headroom, headroom_bytes=headroom)


# --- budget ------------------------------------------------------------------------------------


def test_budget_from_gib_is_binary_and_subtracts_headroom():
    b = Budget.from_gib(24, headroom_gib=0.5)
    assert b.vram_bytes == 24 * GIB
    assert b.device_bytes == int(23.5 * GIB)


@pytest.mark.parametrize("vram,headroom", [(0, 0), (-1, 0), (8, 8), (8, -0.1)])
def test_budget_rejects_impossible_values(vram, headroom):
    with pytest.raises(UsageError):
        Budget.from_gib(vram, headroom_gib=headroom)


# --- the exact boundary ------------------------------------------------------------------------


def test_a_quant_whose_total_equals_the_budget_fits_and_one_byte_less_does_not():
    c = candidate(1, "UD-Q4_K_XL", 15.5)
    spec = RunSpec(ctx=CTX, type_k="q4_0", type_v="q4_0")
    total = _total(c, spec)
    inside = rank_candidates([c], _budget_bytes(total), spec)
    outside = rank_candidates([c], _budget_bytes(total - 1), spec)
    assert [r.candidate.quant_id for r in inside.results] == [1]
    assert inside.results[0].margin_bytes == 0
    assert inside.results[0].estimate.total == total
    assert outside.results == () and outside.too_big == 1
    assert outside.smallest_total == total


def test_only_the_quants_whose_exact_estimate_fits_are_returned():
    cands = [candidate(i, f"Q{i}", 12.0 + i) for i in range(8)]
    spec = RunSpec(ctx=CTX, type_k="q8_0", type_v="q8_0")
    budget = Budget.from_gib(24)
    fits = {c.quant_id for c in cands if _total(c, spec) <= budget.device_bytes}
    out = rank_candidates(cands, budget, spec, limit=None)
    assert {r.candidate.quant_id for r in out.results} == fits
    assert 0 < len(fits) < len(cands)  # both sides of the boundary are present
    assert out.fitting + out.too_big == len(cands)


def test_auto_cache_picks_the_least_lossy_cache_that_reaches_the_context():
    from crawler.fit import CACHE_LADDER

    cands = [candidate(i, f"Q{i}", w) for i, w in enumerate((6.0, 12.0, 15.0, 16.5, 30.0))]
    budget = Budget.from_gib(24)
    spec = RunSpec(ctx=CTX, auto_cache=True)
    out = rank_candidates(cands, budget, spec, limit=None)
    chosen = {r.candidate.quant_id: (r.config.type_k, r.config.type_v) for r in out.results}
    for c in cands:
        first = next(
            (
                (k, v)
                for k, v in CACHE_LADDER
                if estimate(c.coefficients, spec.base_config().replace(type_k=k, type_v=v)).total
                <= budget.device_bytes
            ),
            None,
        )
        assert chosen.get(c.quant_id) == first
    assert len(set(chosen.values())) >= 2  # the ladder was walked to different steps
    assert 4 not in chosen  # 30 GiB of weights fit no cache


def test_without_ctx_each_row_shows_its_largest_context_and_runs_at_it():
    c = candidate(1, "Q4_K_M", 15.5)
    budget = Budget.from_gib(24)
    r = rank_candidates([c], budget, RunSpec()).results[0]
    assert r.max_ctx and r.config.ctx == r.max_ctx
    assert r.estimate.total <= budget.device_bytes
    bigger = RunConfig(**{**_cfg_dict(r.config), "ctx": r.max_ctx + 256})
    assert estimate(c.coefficients, bigger).total > budget.device_bytes
    assert f"-c {r.max_ctx}" in r.command


def _cfg_dict(cfg: RunConfig) -> dict:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


def test_mtp_search_counts_the_draft_context_and_emits_the_draft_flags():
    c = candidate(1, "UD-Q4_K_XL", 14.0)
    spec = RunSpec(ctx=65536, type_k="q8_0", type_v="q8_0", mtp=True)
    r = rank_candidates([c], Budget.from_gib(24), spec, Filters(mtp=True)).results[0]
    assert r.estimate.mtp_kv > 0
    args = shlex.split(r.command)
    assert args[args.index("--spec-type") + 1] == "draft-mtp"
    assert args[args.index("--spec-draft-n-max") + 1] == "3"
    assert r.ollama is None  # Ollama has no MTP drafting


def test_cpu_moe_moves_experts_to_host_and_respects_ram():
    c = candidate(1, "Q4_K_M", 3.0, coefficients=moe(3.0, 18.0))
    spec = RunSpec(ctx=32768, cpu_moe=True)
    on_gpu = rank_candidates([c], Budget.from_gib(12), RunSpec(ctx=32768))
    offloaded = rank_candidates([c], Budget.from_gib(12, ram_gib=64), spec)
    too_little_ram = rank_candidates([c], Budget.from_gib(12, ram_gib=8), spec)
    assert on_gpu.results == ()
    assert len(offloaded.results) == 1 and "--cpu-moe" in offloaded.results[0].command
    assert too_little_ram.results == ()


def test_unknown_memory_rules_are_counted_not_ranked():
    c = candidate(1, "Q4", 10.0)
    unknown = dataclasses.replace(
        candidate(2, "Q5", 10.0),
        coefficients=dataclasses.replace(dense_hybrid(10.0), status="unknown", reason="x"),
    )
    out = rank_candidates([c, unknown], Budget.from_gib(24), RunSpec(ctx=8192))
    assert [r.candidate.quant_id for r in out.results] == [1]
    assert out.unknown_memory == 1


# --- filters -----------------------------------------------------------------------------------


def _ids(out) -> list[int]:
    return sorted(r.candidate.quant_id for r in out.results)


@pytest.mark.parametrize(
    "filters,expected",
    [
        (Filters(mtp=True), [1, 3]),
        (Filters(min_attn_bits=6), [1, 3, 4]),
        (Filters(arch="QWEN35"), [1, 2, 3, 4]),
        (Filters(author="bartowski"), [3]),
        (Filters(base="qwen3.6-27b"), [1, 2, 3, 4]),
        (Filters(base="Qwen/Qwen3.6-27B"), [1, 2, 3, 4]),
        (Filters(base="Qwen3.6"), []),
        (Filters(label="ud-q4_k_xl"), [1]),
        (Filters(loadable=True), [1, 2, 3]),
        (Filters(query="bartowski q4_k_m"), [3]),
    ],
)
def test_filters(filters, expected):
    cands = [
        candidate(1, "UD-Q4_K_XL", 10.0),
        candidate(2, "Q4_K_M", 10.0, attn_bits=4.5, mtp_bits=4.5),
        candidate(3, "Q4_K_M", 10.0, repo="bartowski/Qwen_Qwen3.6-27B-GGUF"),
        candidate(4, "IQ4_KS", 10.0, mtp=False, loadable_by_mainline=False),
    ]
    out = rank_candidates(cands, Budget.from_gib(48), RunSpec(ctx=8192), filters, limit=None)
    assert _ids(out) == expected


@pytest.mark.parametrize(
    "query,hit",
    [
        ("qwen3.6 27b", True),
        ("Qwen3.6-27B", True),
        ("qwen 3.6", True),
        ("unslth qwen3.6", True),  # a typo in a word is forgiven
        ("qwen3.6 27b ud-q4_k_xl", True),
        ("qwen3.5", False),  # digits are never fuzzy
        ("7b", False),  # "7b" is not "27B"
        ("qwen3.6 70b", False),
        ("gemma", False),
    ],
)
def test_query_matcher(query, hit):
    m = QueryMatcher(query)
    names = ("unsloth/Qwen3.6-27B-GGUF", "Qwen/Qwen3.6-27B", "Qwen3.6-27B-UD-Q4_K_XL.gguf")
    assert m.matches_names(names[0], names[1], names[2], "UD-Q4_K_XL", "qwen35") is hit


def test_query_required_substrings_are_the_tokens_with_digits():
    assert set(QueryMatcher("Qwen3.6 27B gguf").required_substrings) == {"qwen3.6", "27b"}


# --- sorting -----------------------------------------------------------------------------------


def _ranked(sort: str, cands, vram: float = 48.0):
    budget = Budget.from_gib(vram, bandwidth_gb_s=1000)
    return rank_candidates(cands, budget, RunSpec(ctx=32768), sort=sort, limit=None).results


def test_every_sort_key_orders_best_first():
    from datetime import UTC, datetime

    cands = [
        candidate(1, "Q3_K", 11.0, ffn_bits=3.5, downloads=10),
        candidate(2, "Q6_K", 21.0, ffn_bits=6.56, downloads=5),
        candidate(3, "Q4_K", 15.0, ffn_bits=4.5, downloads=99,
                  last_modified=datetime(2026, 12, 1, tzinfo=UTC)),
    ]  # fmt: skip
    order = {s: [r.candidate.quant_id for r in _ranked(s, cands)] for s in SORT_KEYS}
    assert order["quality"] == [2, 3, 1]
    assert order["speed"] == [1, 3, 2]
    assert order["size"] == [2, 3, 1]
    assert order["margin"] == [1, 3, 2]
    assert order["ctx"] == [2, 3, 1]  # all reach the trained context at 48 GiB: quality decides
    assert [r.candidate.quant_id for r in _ranked("ctx", cands, vram=28)] == [1, 3, 2]
    assert order["downloads"] == [3, 1, 2]
    assert order["updated"][0] == 3


def test_ties_break_by_quality_then_repo_and_path():
    a = candidate(1, "Q4_K_M", 15.0, repo="b/X-GGUF", downloads=7)
    b = candidate(2, "Q4_K_M", 15.0, repo="a/X-GGUF", downloads=7)
    c = candidate(3, "Q4_K_M", 15.0, repo="a/X-GGUF", ffn_bits=5.0, downloads=7)
    results = _ranked("downloads", [a, b, c])
    # same downloads: higher quality first (3), then repo_id ascending (a/ before b/)
    assert [r.candidate.quant_id for r in results] == [3, 2, 1]
    assert [r.rank for r in results] == [1, 2, 3]


def test_copies_of_one_memory_model_share_a_speed_only_where_their_own_inputs_agree():
    from crawler.ranking.evaluate import speed_of

    co = dense_hybrid(15.0)
    same = [candidate(i, "Q4_K_M", 15.0, repo=f"u{i}/X-GGUF", coefficients=co) for i in (1, 2)]
    other_label = candidate(3, "IQ4_XS", 15.0, repo="u3/X-GGUF", coefficients=co)
    # a label without a type: the bits per weight pick the class
    by_bits = [
        candidate(
            4 + i, "custom", 15.0, repo=f"u{4 + i}/X", attn_bits=b, ffn_bits=b, coefficients=co
        )
        for i, b in enumerate((4.5, 2.5))
    ]
    # the H200's bandwidth: the weight types' own rates decide (on slower GPUs the bus does)
    budget = Budget.from_gib(48.0, bandwidth_gb_s=4890)
    out = rank_candidates([*same, other_label, *by_bits], budget, RunSpec(ctx=32768),
                          sort="speed", limit=None)  # fmt: skip
    speeds = {r.candidate.quant_id: r for r in out.results}
    assert speeds[1].estimate is speeds[2].estimate  # one estimate for the copies
    assert speeds[1].speed is speeds[2].speed  # and one speed
    for r in out.results:  # each row's speed is what its own inputs give
        assert r.speed == speed_of(r.candidate, r.estimate, budget)
    assert speeds[3].speed != speeds[1].speed and speeds[4].speed != speeds[5].speed


def test_unknown_sort_key_is_a_usage_error():
    with pytest.raises(UsageError):
        rank_candidates([], Budget.from_gib(8), RunSpec(), sort="best")


def test_limit_keeps_the_best():
    cands = [candidate(i, f"Q{i}", 8.0 + i, ffn_bits=3 + i * 0.5) for i in range(6)]
    out = rank_candidates(cands, Budget.from_gib(48), RunSpec(ctx=8192), limit=2)
    assert len(out.results) == 2
    # sorted by quality before estimating: the 4 others could not rank higher, never estimated
    assert out.fitting == 2 and out.unevaluated == 4
    full = rank_candidates(cands, Budget.from_gib(48), RunSpec(ctx=8192), limit=None)
    assert full.fitting == 6 and full.unevaluated == 0
    assert [r.candidate.quant_id for r in out.results] == [5, 4]


# --- commands ----------------------------------------------------------------------------------


def test_llama_server_command_has_the_checked_flags():
    c = candidate(1, "UD-Q4_K_XL", 15.5)
    spec = RunSpec(ctx=CTX, type_k="q4_0", type_v="q4_0")
    r = rank_candidates([c], Budget.from_gib(24), spec).results[0]
    args = shlex.split(r.command)
    assert args[:3] == ["llama-server", "-hf", "unsloth/Qwen3.6-27B-MTP-GGUF:UD-Q4_K_XL"]
    for flag, value in (("-c", str(CTX)), ("-ctk", "q4_0"), ("-ctv", "q4_0"), ("-fa", "on")):
        assert args[args.index(flag) + 1] == value
    assert args[args.index("-np") + 1] == "1"
    assert "--no-mmproj" in args and "--spec-type" not in args


def test_hf_args_fall_back_to_the_file_when_the_label_is_ambiguous():
    # llama.cpp takes the first file matching "Q4_K_M[.-]"; the UD file matches it too.
    siblings = ["M-Q4_K_M.gguf", "M-UD-Q4_K_M.gguf", "mmproj-F16.gguf"]
    assert hf_args("o/r", "M-Q4_K_M.gguf", "Q4_K_M", siblings) == [
        "-hf", "o/r", "-hff", "M-Q4_K_M.gguf",
    ]  # fmt: skip
    assert hf_args("o/r", "M-UD-Q4_K_M.gguf", "UD-Q4_K_M", siblings) == ["-hf", "o/r:UD-Q4_K_M"]
    assert hf_args("o/r", "M-Q8_0.gguf", None, siblings) == ["-hf", "o/r", "-hff", "M-Q8_0.gguf"]
    # the second shard of another split quant is not a model file llama.cpp would pick
    split = ["A/M-Q4_K_M-00001-of-00002.gguf", "A/M-Q4_K_M-00002-of-00002.gguf"]
    assert hf_args("o/r", split[0], "Q4_K_M", split) == ["-hf", "o/r:Q4_K_M"]


def test_ollama_and_lm_studio_only_where_they_can_express_the_config():
    q8 = RunConfig(ctx=32768, type_k="q8_0", type_v="q8_0", flash_attn="on")
    mixed = q8.replace(type_v="f16")
    f16 = q8.replace(type_k="f16", type_v="f16")
    ollama = ollama_command("o/r", "Q4_K_M", q8)
    assert ollama is not None and "OLLAMA_KV_CACHE_TYPE=q8_0" in ollama
    assert "OLLAMA_CONTEXT_LENGTH=32768" in ollama and "hf.co/o/r:Q4_K_M" in ollama
    assert ollama_command("o/r", "Q4_K_M", mixed) is None
    assert ollama_command("o/r", "Q4_K_M", q8.replace(mtp=True)) is None
    assert lmstudio_command("o/r", q8) is None
    lms = lmstudio_command("o/r", f16)
    assert lms is not None and "--context-length 32768" in lms and "--gpu max" in lms


# --- properties --------------------------------------------------------------------------------


@st.composite
def _cands(draw):
    n = draw(st.integers(1, 6))
    out = []
    for i in range(n):
        w = draw(st.floats(0.5, 40.0))
        is_moe, has_mtp = draw(st.booleans()), draw(st.booleans())
        co = moe(w / 4, w) if is_moe else dense_hybrid(w, mtp=has_mtp)
        out.append(candidate(i, f"Q{i}", w, coefficients=co, mtp=co.mtp_available))
    return out


_CACHES = st.sampled_from(["f16", "q8_0", "q4_0"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cands=_cands(),
    vram=st.floats(2.0, 80.0),
    ctx=st.one_of(st.none(), st.integers(1, 300_000)),
    tk=_CACHES,
    tv=_CACHES,
    auto=st.booleans(),
    mtp=st.booleans(),
)
def test_no_result_ever_exceeds_the_budget_and_none_that_fits_is_missed(
    cands, vram, ctx, tk, tv, auto, mtp
):
    budget = Budget.from_gib(vram, headroom_gib=0.25)
    spec = RunSpec(ctx=ctx, type_k=tk, type_v=tv, auto_cache=auto, mtp=mtp)
    filters = Filters(mtp=mtp)
    out = rank_candidates(cands, budget, spec, filters, limit=None)
    for r in out.results:
        assert r.estimate.total <= budget.device_bytes
        assert r.margin_bytes == budget.device_bytes - r.estimate.total
        assert estimate(r.candidate.coefficients, r.config).total == r.estimate.total
    if not auto and ctx is not None:
        expected = {
            c.quant_id
            for c in cands
            if filters.accepts(c) and _total(c, spec) <= budget.device_bytes
        }
        assert {r.candidate.quant_id for r in out.results} == expected
    # the SQL prefilter's bound never exceeds the exact estimate, so it never drops a fit
    for c in cands:
        if filters.accepts(c):
            cfgs = [spec.base_config()]
            if auto:
                cfgs = [cfgs[0].replace(type_k="q4_0", type_v="q4_0")]
            for cfg in cfgs:
                assert (
                    lower_bound_bytes(c.coefficients, spec) <= estimate(c.coefficients, cfg).total
                )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cands=_cands(),
    vram=st.floats(4.0, 80.0),
    sort=st.sampled_from(SORT_KEYS),
    limit=st.integers(1, 4),
)
def test_early_stop_returns_the_same_top_rows_as_a_full_ranking(cands, vram, sort, limit):
    # materialize() sees only the candidates that are estimated; the answer must not change.
    seen: list[int] = []

    def materialize(batch):
        seen.extend(c.quant_id for c in batch)
        return batch

    budget = Budget.from_gib(vram, bandwidth_gb_s=900)
    spec = RunSpec(ctx=32768)
    full = rank_candidates(cands, budget, spec, sort=sort, limit=None)
    lazy = rank_candidates(cands, budget, spec, sort=sort, limit=limit, materialize=materialize)
    assert [r.candidate.quant_id for r in lazy.results] == [
        r.candidate.quant_id for r in full.results[:limit]
    ]
    assert lazy.unevaluated == len(cands) - len(seen)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cands=_cands(), vram=st.floats(4.0, 80.0), limit=st.integers(1, 4))
def test_a_presorted_stream_is_read_only_until_ranking_can_stop(cands, vram, limit):
    from crawler.ranking.model import EARLY_STOP_SORTS
    from crawler.ranking.rank import pre_key

    budget, spec = Budget.from_gib(vram), RunSpec(ctx=32768)
    for sort in EARLY_STOP_SORTS:
        # the catalog sends quality as a hint: computed here as ranking would
        big = Budget.from_gib(1e4)
        hinted = []
        for c in cands:
            score = rank_candidates([c], big, spec).results[0].quality.score
            hinted.append(dataclasses.replace(c, quality_hint=score))
        ordered = sorted(hinted, key=lambda c, s=sort: pre_key(s, c))
        read: list[int] = []

        def stream(items=ordered, read=read):
            for c in items:
                read.append(c.quant_id)
                yield c

        full = rank_candidates(hinted, budget, spec, sort=sort, limit=None)
        lazy = rank_candidates(stream(), budget, spec, sort=sort, limit=limit, presorted=True)
        assert [r.candidate.quant_id for r in lazy.results] == [
            r.candidate.quant_id for r in full.results[:limit]
        ]
        assert lazy.considered <= len(read) <= len(cands)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cands=_cands(), copies=st.integers(1, 4), vram=st.floats(4.0, 80.0), limit=st.integers(1, 6))
def test_bounded_sorts_stop_early_and_return_the_head_of_a_full_ranking(cands, copies, vram, limit):
    # The tightest bound a catalog can send is the value itself, and identical copies (same
    # coefficients, quality, size, downloads; only repo and path differ) tie on everything the
    # stream knows: ranking may skip or stop only where the full ranking agrees.
    from crawler.ranking.model import BOUNDED_SORTS
    from crawler.ranking.rank import pre_key

    budget = Budget.from_gib(vram, bandwidth_gb_s=1008.0)
    spec = RunSpec(ctx=32768)
    pool = [
        dataclasses.replace(c, quant_id=c.quant_id * 10 + k, repo_id=f"u{k}/{c.repo_id}")
        for c in cands
        for k in range(copies)
    ]
    full_by_quality = rank_candidates(pool, Budget.from_gib(1e4), spec, limit=None)
    scores = {r.candidate.quant_id: r.quality.score for r in full_by_quality.results}
    for sort in BOUNDED_SORTS:
        full = rank_candidates(pool, budget, spec, sort=sort, limit=None)
        value = {
            r.candidate.quant_id: {
                "speed": r.speed.tok_s,
                "margin": r.margin_bytes,
                "ctx": r.max_ctx,
            }[sort]
            for r in full.results
        }
        top = max(value.values(), default=1.0)
        hinted = [
            dataclasses.replace(
                c, quality_hint=scores[c.quant_id], bound_hint=value.get(c.quant_id, top)
            )
            for c in pool
        ]
        # the stream's order: the bound and quality, ties in the order worst for an early stop
        ordered = sorted(
            hinted, key=lambda c, s=sort: (pre_key(s, c), [-ord(x) for x in c.repo_id])
        )
        lazy = rank_candidates(iter(ordered), budget, spec, sort=sort, limit=limit, presorted=True)
        assert [r.candidate.quant_id for r in lazy.results] == [
            r.candidate.quant_id for r in full.results[:limit]
        ], sort
