"""Speed model: its terms one at a time (the fit against measurements: test_speed_fit.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.ranking.speed import (
    DEFAULT_ACCEPTANCE,
    DEPTH_S,
    DRAFT_DEPTH_LAYERS,
    MEASURED_GPU_BANDWIDTH_GB_S,
    MOE_LAYER_S,
    PLATFORM_EFFICIENCY,
    PLATFORM_MTP_SHARE,
    SERVER_S,
    SpeedInputs,
    decode_seconds,
    depth_scale,
    estimate_speed,
    expected_tokens,
    fa_kernel,
    label_type_mix,
    mtp_cycle_seconds,
    mtp_share,
    type_efficiency,
)
from crawler.ranking.speed_bound import read_bytes_floor, speed_bound, verify_experts_floor

GB = 1e9


def test_dense_decode_is_bytes_over_the_type_efficiency_plus_the_server_step():
    x = SpeedInputs(dense_bytes=int(10 * GB), type_mix=(("Q4_K", 1.0),))
    s = estimate_speed(x, MEASURED_GPU_BANDWIDTH_GB_S)
    t = 10 * GB / (type_efficiency("Q4_K") * MEASURED_GPU_BANDWIDTH_GB_S * GB) + SERVER_S
    assert s.tok_s == pytest.approx(1 / t)
    assert s.mtp_speedup == 1.0 and s.tok_s_at_ctx == s.tok_s  # no depth asked for
    # a slower type of the same bytes is slower; without a mix, bits below 4 pick the slow class
    q3 = estimate_speed(dataclasses.replace(x, type_mix=(("Q3_K", 1.0),)), 4890.0)
    assert q3.tok_s < s.tok_s
    low = estimate_speed(SpeedInputs(dense_bytes=int(10 * GB), bits_per_weight=3.5), 4890.0)
    mid = estimate_speed(SpeedInputs(dense_bytes=int(10 * GB), bits_per_weight=4.8), 4890.0)
    assert low.tok_s < mid.tok_s


def test_moe_reads_only_the_active_experts_and_pays_per_layer():
    dense = estimate_speed(SpeedInputs(dense_bytes=int(20 * GB)), 936)
    x = SpeedInputs(
        dense_bytes=int(1 * GB), expert_bytes=int(19 * GB), n_expert=256, n_expert_used=8,
        n_moe_layers=40,
    )  # fmt: skip
    moe = estimate_speed(x, 936)
    assert moe.bytes_per_token == int(1 * GB + 19 * GB * 8 / 256)
    assert moe.tok_s > 3 * dense.tok_s
    no_fixed = estimate_speed(dataclasses.replace(x, n_moe_layers=0), 936)
    assert 1 / moe.tok_s - 1 / no_fixed.tok_s == pytest.approx(40 * MOE_LAYER_S)


def test_depth_is_slower_a_quantized_cache_more_so_and_host_experts_are_slower():
    x = SpeedInputs(dense_bytes=int(14 * GB), n_layer=32, n_attn=32, q_width=4096, ctx=32768,
                    gqa_ratio=4, head_dim=128, kv_row_bytes=4096.0)  # fmt: skip
    f16 = estimate_speed(x, 4890.0)
    q4 = estimate_speed(dataclasses.replace(x, cache_type="q4_0"), 4890.0)
    assert f16.tok_s_at_ctx < f16.tok_s
    assert q4.tok_s_at_ctx < f16.tok_s_at_ctx and q4.tok_s < f16.tok_s
    # sliding-window layers see at most their window
    swa = dataclasses.replace(x, n_attn=8, n_swa=24, swa_window=1024)
    full8 = dataclasses.replace(x, n_attn=8)
    assert estimate_speed(full8, 4890.0).tok_s_at_ctx > estimate_speed(swa, 4890.0).tok_s_at_ctx
    on_gpu = SpeedInputs(
        dense_bytes=int(2 * GB), expert_bytes=int(18 * GB), n_expert=128, n_expert_used=8
    )
    on_host = dataclasses.replace(on_gpu, experts_on_host=True)
    assert estimate_speed(on_host, 896).tok_s < estimate_speed(on_gpu, 896).tok_s


def test_attention_at_depth_on_another_gpu_scales_with_compute_plus_the_cache_read():
    h200, h100, rtx4090 = 4890.0, 3360.0, 1010.0  # the H100 has the H200's FP32 (66.91 TFLOPS)
    assert depth_scale(h200, 66.91) == 1.0 and depth_scale(h100, 66.91) == 1.0
    # a card of the H200's bandwidth with half its compute takes twice the compute time
    assert depth_scale(h200, 66.91 / 2) == pytest.approx(2.0)
    assert depth_scale(rtx4090, 82.58) == pytest.approx(66.91 / 82.58)
    # compute not known: the bandwidth ratio
    assert depth_scale(h100, None) == pytest.approx(h200 / h100)
    x = SpeedInputs(dense_bytes=int(14 * GB), n_attn=16, q_width=6144, cache_type="q4_0",
                    kv_row_bytes=1152.0)  # fmt: skip
    depth = 131072

    def at_depth(bw: float, tf: float | None, y: SpeedInputs = x) -> float:
        return decode_seconds(y, bw, depth, fp32_tflops=tf) - decode_seconds(
            y, bw, 0, fp32_tflops=tf
        )

    # on the H200 the cache read is in the fitted terms: the row bytes change nothing there
    assert at_depth(h200, 66.91) == pytest.approx(at_depth(h200, 66.91, replace(x, kv_row_bytes=0)))
    # on the H100 the same compute, plus the cache bytes at its bandwidth over the H200's
    read = 16 * depth * 1152.0 * (1 / h100 - 1 / h200) / GB
    assert at_depth(h100, 66.91) == pytest.approx(at_depth(h200, 66.91) + read)
    # far less than scaling the whole by bandwidth (the rule where compute is not known)
    assert at_depth(h100, 66.91) < at_depth(h100, None)
    assert at_depth(h100, None) == pytest.approx(at_depth(h200, 66.91) * h200 / h100)


def test_the_flash_attention_kernel_follows_llama_cpps_choice():
    # ggml_cuda_get_best_fattn_kernel, one query over an f16 cache on Ada Lovelace or newer
    assert fa_kernel(4, 128, 131072) == "vec"  # Llama-3-8B: 4 query heads per KV head
    assert fa_kernel(2, 256, 32768) == "vec"  # Gemma 3
    assert fa_kernel(6, 256, 0) == "mma"  # Qwen3.6-27B: 256-wide heads
    assert fa_kernel(7, 128, 4096) == "vec"  # Qwen2.5-7B below 8192 tokens
    assert fa_kernel(7, 128, 8192) == "mma"


def test_an_f16_cache_at_depth_costs_its_bytes_at_the_slower_of_kernel_and_memory():
    llama = SpeedInputs(dense_bytes=int(14 * GB), n_attn=32, q_width=4096, gqa_ratio=4,
                        head_dim=128, kv_row_bytes=4096.0)  # fmt: skip
    depth = 32768

    def at_depth(y: SpeedInputs, bw: float, tf: float | None) -> float:
        return decode_seconds(y, bw, depth, fp32_tflops=tf) - decode_seconds(
            y, bw, 0, fp32_tflops=tf
        )

    cache = 32 * depth * 4096.0
    # the H200: the vector kernel's own rate (slower than the platform's share of bandwidth)
    assert DEPTH_S["vec"] > 1 / (PLATFORM_EFFICIENCY["cuda"] * 4890.0 * GB)
    assert at_depth(llama, 4890.0, 66.91) == pytest.approx(cache * DEPTH_S["vec"])
    # twice the bytes per token (Gemma 3's 256-wide heads), twice the time: not the query width
    wide = replace(llama, kv_row_bytes=8192.0)
    assert at_depth(wide, 4890.0, 66.91) == pytest.approx(2 * at_depth(llama, 4890.0, 66.91))
    # a GPU of little bandwidth: the read at the platform's share (an NVIDIA GB10: 273 GB/s,
    # 31 FP32 TFLOPS); were its compute not known, the kernel's H200 rate at the bandwidth ratio
    read = cache / (PLATFORM_EFFICIENCY["cuda"] * 273.0 * GB)
    assert at_depth(llama, 273.0, 31.0) == pytest.approx(read)
    by_bw = cache * DEPTH_S["vec"] * 4890.0 / 273.0
    assert at_depth(llama, 273.0, None) == pytest.approx(max(read, by_bw))
    # the tensor-core kernel (Qwen3.6-27B's heads): the read alone, on the H200 too
    qwen = replace(llama, n_attn=16, q_width=6144, gqa_ratio=6, head_dim=256)
    assert at_depth(qwen, 4890.0, 66.91) == pytest.approx(
        16 * depth * 4096.0 / (PLATFORM_EFFICIENCY["cuda"] * 4890.0 * GB)
    )


def test_a_drafted_token_attends_over_the_cache():
    x = SpeedInputs(dense_bytes=int(14 * GB), n_attn=16, q_width=6144, cache_type="q4_0",
                    mtp=True, mtp_bytes=int(0.5 * GB), ctx=262144)  # fmt: skip
    grow = [
        mtp_cycle_seconds(x, 4890.0, 3, 0.0, d) - mtp_cycle_seconds(x, 4890.0, 0, 0.0, d)
        for d in (0, 131072, 262144)
    ]
    per_layer = 131072 * 6144 * DEPTH_S["quant"]  # one layer over 128K tokens, the H200
    assert grow[1] - grow[0] == pytest.approx(3 * DRAFT_DEPTH_LAYERS * per_layer)
    assert grow[2] - grow[1] == pytest.approx(grow[1] - grow[0])
    # the estimate at the target context counts it
    est = estimate_speed(x, 4890.0, acceptance=0.0)
    assert est.tok_s_at_ctx == pytest.approx(1 / mtp_cycle_seconds(x, 4890.0, 3, 0.0, 262144))


def test_expected_tokens_per_cycle():
    # alpha 0: every draft rejected, one token per cycle; alpha 1: k + 1 tokens.
    assert expected_tokens(0.0, 3) == pytest.approx(1.0)
    assert expected_tokens(1.0, 3) == pytest.approx(4.0)
    assert expected_tokens(0.8, 0) == 1.0
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)


def test_mtp_cycle_costs_grow_with_the_draft_length_and_moe_pays_extra_experts():
    x = SpeedInputs(
        dense_bytes=int(13.9 * GB), mtp=True, mtp_bytes=int(0.29 * GB), output_bytes=int(GB)
    )
    c = [mtp_cycle_seconds(x, 896, k, DEFAULT_ACCEPTANCE) for k in range(0, 5)]
    assert c == sorted(c) and len(set(c)) == 5
    moe = dataclasses.replace(
        x, dense_bytes=int(2 * GB), expert_bytes=int(12 * GB), n_expert=256, n_expert_used=8
    )
    plain = dataclasses.replace(moe, n_expert=0, n_expert_used=0, expert_bytes=0,
                                dense_bytes=int(2 * GB + 12 * GB * 8 / 256))  # fmt: skip
    extra_moe = mtp_cycle_seconds(moe, 896, 3, 0.8) - mtp_cycle_seconds(moe, 896, 0, 0.8)
    extra_plain = mtp_cycle_seconds(plain, 896, 3, 0.8) - mtp_cycle_seconds(plain, 896, 0, 0.8)
    assert extra_moe > extra_plain


def test_the_measured_chip_pays_every_drafting_cost_other_chips_their_platform_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the H200 and the H100 SXM (its compute: 66.91 FP32 TFLOPS) pay the measured costs; an RTX
    # 3090 (35.58) and a GPU of unknown compute CUDA's share; a Metal chip Metal's
    assert mtp_share(4890.0, "cuda", 66.91) == mtp_share(3360.0, "cuda", 66.91) == 1.0
    assert mtp_share(936.2, "cuda", 35.58) == mtp_share(273.0, "cuda", None) < 1.0
    assert mtp_share(936.2, "cuda", 35.58) == PLATFORM_MTP_SHARE["cuda"]
    # another chip of the same FP32 figure (an RTX PRO 5000 Blackwell: 66.94) is not the H100
    assert mtp_share(1340.0, "cuda", 66.94) == PLATFORM_MTP_SHARE["cuda"]
    assert mtp_share(400.0, "metal", None) == PLATFORM_MTP_SHARE["metal"]
    # the share scales the drafting costs past the draft's weight read, nothing else
    x = SpeedInputs(dense_bytes=int(13.9 * GB), mtp=True, mtp_bytes=int(0.29 * GB))

    def extra(share: float) -> float:
        monkeypatch.setitem(PLATFORM_MTP_SHARE, "cuda", share)
        cycle = mtp_cycle_seconds(x, 936.2, 3, 0.8, fp32_tflops=35.58)
        return cycle - mtp_cycle_seconds(x, 936.2, 0, 0.8, fp32_tflops=35.58)

    read = extra(0.0)
    assert read > 0
    assert extra(0.5) - read == pytest.approx(0.5 * (extra(1.0) - read))


@settings(max_examples=400, deadline=None)
@given(
    dense=st.integers(1, 10**12),
    experts=st.integers(0, 10**12),
    n_expert=st.sampled_from([0, 8, 64, 128, 256]),
    used=st.integers(1, 16),
    layers=st.integers(1, 100),
    recurrent=st.integers(0, 10**9),
    mtp_bytes=st.integers(0, 10**10),
    output_bytes=st.integers(0, 10**10),
    mtp=st.booleans(),
    on_host=st.booleans(),
    k=st.integers(0, 8),
    bandwidth=st.floats(50, 8000),
    platform=st.sampled_from(["cuda", "metal"]),
    label=st.sampled_from(
        ["Q4_K_M", "UD-Q3_K_XL", "Q2_K_S", "IQ4_XS", "Q8_0", "Q6_K", "F16", None]
    ),
    bits=st.one_of(st.none(), st.floats(1.0, 32.0)),
    host_maybe=st.booleans(),
    n_layer=st.integers(0, 128),
    acceptance=st.floats(0.0, 1.0),
    choose=st.booleans(),
    fp32=st.one_of(st.none(), st.floats(1.0, 400.0)),
)
def test_the_sort_bound_is_never_below_the_estimate(
    dense, experts, n_expert, used, layers, recurrent, mtp_bytes, output_bytes, mtp, on_host, k,
    bandwidth, platform, label, bits, host_maybe, n_layer, acceptance, choose, fp32,
):  # fmt: skip
    # --sort speed stops reading the catalog on this bound: it must never undercut the estimate.
    moe = n_expert > 0 and experts > 0
    x = SpeedInputs(
        dense_bytes=dense,
        expert_bytes=experts if moe else 0,
        n_expert=n_expert if moe else 0,
        n_expert_used=min(used, n_expert) if moe else 0,
        n_moe_layers=layers if moe else 0,
        experts_on_host=on_host and moe,
        recurrent_bytes=recurrent,
        mtp=mtp,
        mtp_bytes=mtp_bytes,
        output_bytes=output_bytes,
        draft_n_max=k,
        type_mix=label_type_mix(label),
        bits_per_weight=bits,
        n_layer=n_layer,
    )
    est = estimate_speed(
        x, bandwidth, platform=platform, acceptance=acceptance, choose_draft=choose,
        fp32_tflops=fp32,
    )  # fmt: skip
    read = read_bytes_floor(dense, x.expert_bytes, x.n_expert, x.n_expert_used, recurrent)
    verify = verify_experts_floor(read, x.expert_bytes, x.n_expert, x.n_expert_used)
    # experts_on_host: they may be in host memory (the bound then holds either way)
    host = x.experts_on_host or host_maybe
    # any platform and compute, and the GPU's own
    for where, compute in ((None, None), (platform, fp32)):
        b = speed_bound(bandwidth, mtp=mtp, draft_n_max=k, experts_on_host=host,
                        acceptance=acceptance, platform=where, fp32_tflops=compute)  # fmt: skip
        # the quant's own weight rate, and the fastest type's (its type mix not stored)
        draft = mtp_bytes + output_bytes
        own = b.tok_s(read, x.n_moe_layers, draft, verify, x.type_efficiency, n_layer)
        fastest = b.tok_s(read, x.n_moe_layers, draft, verify)
        assert fastest >= own >= est.tok_s
