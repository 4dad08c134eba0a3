"""crawler.fit against llama.cpp's own buffers (H200 fixtures), plus properties of the model.
``quants estimate`` itself: tests/e2e/test_estimate_cli.py."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler.base.errors import InvalidConfig, NothingToEstimate, UnknownArchitecture
from crawler.fit import (
    CACHE_TYPES,
    MemoryCoefficients,
    RunConfig,
    cheapest_cache_for,
    coefficients,
    estimate,
    max_ctx,
)
from crawler.gguf.parse import GGUFHeader, TensorInfo
from tests.fixtures.llamacpp.models import config_of, load_rows, measured

MiB = 1024 * 1024
ROWS = [r for r in load_rows() if r["rc"] == 0]
MODELS = sorted({r["config"]["model"] for r in ROWS})


@pytest.fixture(scope="module")
def coeffs(measured_models) -> dict[str, MemoryCoefficients]:
    return {name: coefficients(measured_models.header(name)) for name in MODELS}


def _id(row: dict) -> str:
    c = row["config"]
    extras = "-".join(f"{k}{v}" for k, v in c.items() if k not in ("model", "ctx", "ctk", "ctv"))
    head = f"{row.get('grid', 'main')}{row['index']}-{c['model']}"
    return f"{head}-{c['ctx']}-{c['ctk']}-{c['ctv']}-{extras}"


def test_fixture_covers_the_grid():
    archs = {r["config"]["model"] for r in ROWS}
    assert {"llama", "qwen3", "gemma3", "qwen35", "deepseek2", "glm4moe"} <= archs
    assert {r["config"]["ctx"] for r in ROWS} >= {4096, 32768, 131072, 262144}
    assert len(ROWS) >= 170


@pytest.mark.parametrize("row", ROWS, ids=_id)
def test_buffers_match_llamacpp_byte_for_byte(row, coeffs):
    """Weights, KV + recurrent state and the MTP draft KV equal llama.cpp's CUDA0 buffers."""
    est = estimate(coeffs[row["config"]["model"]], config_of(row))
    got = measured(row)
    assert est.weights == got["weights"]
    assert est.kv + est.recurrent == got["context"]
    assert est.mtp_kv == got["mtp_kv"]


@pytest.mark.parametrize("row", ROWS, ids=_id)
def test_total_within_3_percent_or_256_mib(row, coeffs):
    """Total device memory (CUDA context, kernels, pools included) against what the GPU lost."""
    est = estimate(coeffs[row["config"]["model"]], config_of(row))
    used = measured(row)["used"]
    c = row["config"]
    if c.get("fa") == "off" and not c.get("fill"):
        # Without FA the cuBLAS path's KQ temporary grows as the context fills; the estimate is
        # for a full context (the "fill" rows), so a short prompt must use less.
        assert est.total >= used
        return
    assert abs(est.total - used) <= max(0.03 * used, 256 * MiB), (est.total / MiB, used / MiB)


def test_host_weights_are_the_input_embedding(coeffs):
    row = next(r for r in ROWS if r["config"]["model"] == "qwen36-27b")
    assert coeffs["qwen36-27b"].host_bytes == row["result"]["target"]["CPU_Mapped"][0]


@pytest.mark.parametrize("row", [r for r in ROWS if not r["config"].get("ncmoe")], ids=_id)
def test_host_bytes_match_pinned_buffers(row, coeffs):
    """Embedding + CUDA_Host compute + output buffers of every context, within 3% or 16 MiB."""
    est = estimate(coeffs[row["config"]["model"]], config_of(row))
    res = row["result"]
    host = res["target"]["CPU_Mapped"][0] + sum(
        res[ctx].get("CUDA_Host", [0, 0, 0])[2] for ctx in ("target", "draft") if ctx in res
    )
    host += int(sum(mib for _, mib in row["log"]["output_mib"]) * MiB)
    assert abs(est.host_bytes - host) <= max(0.03 * host, 16 * MiB), (est.host_bytes, host)


def test_mla_refuses_mixed_types_like_llamacpp(coeffs):
    failed = [r for r in load_rows() if r["rc"] != 0]
    assert failed and all(r["config"]["model"] == "deepseek2" for r in failed)
    for row in failed:
        with pytest.raises(InvalidConfig, match="equal K and V"):
            estimate(coeffs["deepseek2"], config_of(row))


def test_quantized_v_needs_flash_attention(coeffs):
    with pytest.raises(InvalidConfig, match="flash attention"):
        estimate(coeffs["llama"], RunConfig(ctx=4096, type_v="q4_0", flash_attn="off"))
    # K may be quantized without FA (llama.cpp checks only V).
    estimate(coeffs["llama"], RunConfig(ctx=4096, type_k="q4_0", flash_attn="off"))


def test_head_dim_must_divide_the_block(coeffs):
    c = coeffs["llama"]
    odd = MemoryCoefficients.from_json(
        {**c.to_json(), "kv_groups": [{**g, "k_head": 80} for g in c.to_json()["kv_groups"]]}
    )
    with pytest.raises(InvalidConfig, match="divisible by 32"):
        estimate(odd, RunConfig(ctx=4096, type_k="q8_0", flash_attn="on"))


def test_bad_options_are_invalid_config(coeffs):
    with pytest.raises(InvalidConfig, match="unknown KV cache type"):
        estimate(coeffs["llama"], RunConfig(ctx=4096, type_k="q3_k"))
    with pytest.raises(InvalidConfig, match="MTP"):
        estimate(coeffs["llama"], RunConfig(ctx=4096, mtp=True))
    with pytest.raises(InvalidConfig):
        estimate(coeffs["llama"], RunConfig(ctx=0))


def test_both_header_readers_agree(measured_models):
    from tests.fixtures.llamacpp.models import read_header, read_header_gguf_py

    for name in ("qwen35", "deepseek2", "gemma3"):
        path = measured_models.path(name)
        assert coefficients(read_header(path)) == coefficients(read_header_gguf_py(path))


def test_json_round_trip(coeffs):
    for c in coeffs.values():
        assert MemoryCoefficients.from_json(c.to_json()) == c
        import json

        assert MemoryCoefficients.from_json(json.loads(c.dumps())) == c


def test_catalog_scalars(coeffs):
    q = coeffs["qwen36-27b"]
    # 16 full-attention layers x 4 KV heads x 256 x (K + V) x 2 bytes.
    assert q.kv_bytes_per_token_f16 == 16 * 4 * 256 * 2 * 2
    assert q.fixed_bytes_f16 == 48 * (3 * 10240 + 128 * 6144) * 4
    assert q.mtp_weights_bytes > 0 and q.expert_bytes == 0
    g = coeffs["gemma3"]
    assert g.kv_bytes_per_token_f16 == 1 * 256 * 2 * 2  # only the full layer grows with ctx
    assert g.fixed_bytes_f16 == 5 * 256 * 2 * 2 * 1024  # 5 SWA layers x 1024 cells


def _header(arch: str, meta: dict, tensors=()) -> GGUFHeader:
    md = {"general.architecture": arch, **{f"{arch}.{k}": v for k, v in meta.items()}}
    return GGUFHeader(3, md, tuple(tensors), 32, 0)


def test_unknown_architectures_are_explicit():
    base = {"block_count": 2, "embedding_length": 64, "attention.head_count": 2}
    embd = TensorInfo("token_embd.weight", (64, 100), 1, 0)
    c = coefficients(_header("rwkv7", {**base, "wkv.head_size": 64}, [embd]))
    assert c.status == "unknown" and "wkv.head_size" in (c.reason or "")
    c = coefficients(_header("jamba", {**base, "ssm.conv_kernel": 4}, [embd]))
    assert c.status == "unknown" and "recurrent" in (c.reason or "")
    c = coefficients(_header("gpt-oss", {**base, "attention.sliding_window": 128}, [embd]))
    assert c.status == "unknown" and "sliding" in (c.reason or "")
    c = coefficients(
        _header("llama", {**base}, [TensorInfo("token_embd.weight", (64, 100), 250, 0)])
    )
    assert c.status == "unknown" and "250" in (c.reason or "")
    head = TensorInfo("blk.2.nextn.eh_proj.weight", (128, 64), 1, 0)
    c = coefficients(
        _header("qwen35", {**base, "block_count": 3, "nextn_predict_layers": 1}, [embd, head])
    )
    assert c.status == "unknown" and "MTP-only" in (c.reason or "")
    c = coefficients(GGUFHeader(3, {}, (embd,), 32, 0))
    assert c.status == "unknown" and "architecture" in (c.reason or "")
    with pytest.raises(UnknownArchitecture):
        estimate(c, RunConfig(ctx=4096))
    # No tensors at all: a vocabulary file, said as such (not "rules not modelled for llama").
    c = coefficients(GGUFHeader(3, {"general.architecture": "llama"}, (), 32, 0))
    assert c.status == "unknown" and c.reason == "vocabulary only, no tensors"
    with pytest.raises(NothingToEstimate, match="vocabulary only, no tensors"):
        estimate(c, RunConfig(ctx=4096))


def test_command_describes_the_config():
    cmd = RunConfig(
        ctx=262144,
        type_k="q4_0",
        type_v="q4_0",
        flash_attn="on",
        mtp=True,
        spec_draft_n_max=3,
        type_k_draft="q4_0",
        model_path="m.gguf",
    )
    from crawler.fit import command

    text = command(cmd)
    assert text.startswith("llama-server -m m.gguf -c 262144 -ngl 999 -fa on -ctk q4_0 -ctv q4_0")
    assert "-np 1" in text and "--spec-type draft-mtp --spec-draft-n-max 3 -ctkd q4_0" in text
    assert "-np" not in command(RunConfig(ctx=4096, parallel=None))
    assert "--n-cpu-moe 4" in command(RunConfig(ctx=4096, n_cpu_moe=4))


# ---- properties ---------------------------------------------------------------------------------

NAMES = ["llama", "qwen35", "gemma3", "deepseek2", "glm4moe", "qwen36-27b"]
EQUAL_KV = [("f16", "f16"), ("q8_0", "q8_0"), ("q5_1", "q5_1"), ("q4_0", "q4_0")]
prop = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@prop
@given(
    name=st.sampled_from(NAMES),
    ctx=st.integers(1, 300_000),
    extra=st.integers(1, 50_000),
    np_=st.sampled_from([1, 2, 4, None]),
    mtp=st.booleans(),
)
def test_monotone_in_ctx(coeffs, name, ctx, extra, np_, mtp):
    c = coeffs[name]
    cfg = RunConfig(ctx=ctx, parallel=np_, mtp=mtp and c.mtp_available, flash_attn="on")
    a, b = estimate(c, cfg), estimate(c, cfg.replace(ctx=ctx + extra))
    assert b.total >= a.total and b.kv >= a.kv and b.mtp_kv >= a.mtp_kv


@prop
@given(name=st.sampled_from(NAMES), ctx=st.integers(256, 300_000), i=st.integers(0, 2))
def test_monotone_in_cache_bits(coeffs, name, ctx, i):
    c = coeffs[name]
    (k1, v1), (k2, v2) = EQUAL_KV[i], EQUAL_KV[i + 1]
    hi = estimate(c, RunConfig(ctx=ctx, type_k=k1, type_v=v1, flash_attn="on"))
    lo = estimate(c, RunConfig(ctx=ctx, type_k=k2, type_v=v2, flash_attn="on"))
    assert CACHE_TYPES[k1].bits > CACHE_TYPES[k2].bits
    assert lo.kv <= hi.kv


@prop
@given(
    name=st.sampled_from(NAMES), budget_mib=st.integers(500, 40_000), kv=st.sampled_from(EQUAL_KV)
)
def test_max_ctx_is_the_largest_that_fits(coeffs, name, budget_mib, kv):
    c = coeffs[name]
    cfg = RunConfig(ctx=1, type_k=kv[0], type_v=kv[1], flash_attn="on")
    budget = budget_mib * MiB
    n = max_ctx(c, cfg, budget, limit=1 << 19)
    if n == 0:
        assert estimate(c, cfg).total > budget
        return
    assert estimate(c, cfg.replace(ctx=n)).total <= budget
    if n < 1 << 19:
        assert estimate(c, cfg.replace(ctx=n + 1)).total > budget


def test_qwen36_27b_at_262144_on_24_gib(coeffs):
    """The motivating case: -ctk q4_0 alone does not fit 24 GiB; quantizing V too does."""
    c = coeffs["qwen36-27b"]
    budget = 24 * 1024 * MiB
    k_only = estimate(c, RunConfig(ctx=262144, type_k="q4_0", flash_attn="on"))
    assert k_only.total > budget
    assert k_only.kv == 16 * 262144 * (576 + 2048)  # q4_0 K + f16 V, 4 heads x 256
    best = cheapest_cache_for(c, RunConfig(ctx=1, type_k="q4_0", flash_attn="on"), budget, 262144)
    assert best is not None and best.type_v != "f16"
    assert estimate(c, best).total <= budget


# ---- the CLI, end to end ------------------------------------------------------------------------


@prop
@given(
    name=st.sampled_from(NAMES),
    ctx=st.integers(1, 300_000),
    cache=st.sampled_from([*EQUAL_KV, "auto"]),
    mtp=st.booleans(),
    cpu_moe=st.booleans(),
)
def test_search_lower_bound_never_exceeds_the_estimate(coeffs, name, ctx, cache, mtp, cpu_moe):
    # The catalog's SQL prefilter drops quants above crawler.ranking.bounds.lower_bound_bytes, and
    # the streamed sorts stop on bounds derived from it: on every measured architecture it must
    # stay at or below the exact estimate of each configuration the search can pick.
    from crawler.ranking.bounds import lower_bound_bytes
    from crawler.ranking.model import RunSpec

    c = coeffs[name]
    mtp = mtp and c.mtp_available
    auto = cache == "auto"
    k, v = ("f16", "f16") if auto else cache
    spec = RunSpec(ctx=ctx, type_k=k, type_v=v, auto_cache=auto, mtp=mtp, cpu_moe=cpu_moe)
    base = spec.base_config()
    pairs = [("f16", "f16"), ("q8_0", "q8_0"), ("q4_0", "q4_0")] if auto else [(k, v)]
    drafts = pairs if auto and mtp else [(base.type_k_draft, base.type_v_draft)]
    bound = lower_bound_bytes(c, spec)
    for tk, tv in pairs:
        for dk, dv in drafts:
            cfg = base.replace(type_k=tk, type_v=tv, type_k_draft=dk, type_v_draft=dv)
            try:
                total = estimate(c, cfg).total
            except InvalidConfig:
                continue
            assert bound <= total, (name, cfg, bound, total)
