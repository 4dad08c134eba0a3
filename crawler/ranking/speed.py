"""Decode-speed estimate (tokens/s), pure: no I/O. An estimate, labelled so, with its basis.

Fitted on llama.cpp's measured decode times on an H200; other GPUs are extrapolated.
Details: docs/internals/ranking.md#speed
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = [
    "ACCEPTANCE_SOURCE",
    "DEFAULT_ACCEPTANCE",
    "DEFAULT_HOST_BANDWIDTH_GB_S",
    "DRAFT_N_CHOICES",
    "FASTEST_TYPE_EFFICIENCY",
    "MEASURED_GPU_BANDWIDTH_GB_S",
    "PLATFORM_EFFICIENCY",
    "PLATFORM_LAYER_S",
    "PLATFORM_MOE_LAYER_S",
    "PLATFORM_MTP_SHARE",
    "PUBLISHED_ROWS",
    "TYPE_EFFICIENCY",
    "SpeedEstimate",
    "SpeedInputs",
    "active_expert_bytes",
    "compute_ratio",
    "decode_seconds",
    "estimate_speed",
    "expected_tokens",
    "fa_kernel",
    "gpu_platform",
    "label_type_mix",
    "measured_gpu",
    "mix_efficiency",
    "mtp_cycle_seconds",
    "mtp_share",
    "per_token_acceptance",
    "type_efficiency",
]

GB = 1e9
#: Median of the published MTP acceptance rates: 0.70 (localweights 27B, RTX 3090 Ti), 0.726
#: (Qwen3.5-122B, Strix Halo), 0.789 (llama.cpp PR #22673 aggregate), 0.84 (Strata, low end),
#: 0.906 (GazTrab 27B, 16 GB card). Read as the per-token acceptance ``a`` of a^i.
DEFAULT_ACCEPTANCE = 0.789
ACCEPTANCE_SOURCE = "median of 5 published MTP acceptance rates (llama.cpp PR #22673 and cards)"
#: Host memory bandwidth for experts kept on the CPU (--cpu-moe) when none is given: dual-channel
#: DDR5-4800 peak is 76.8 GB/s; we assume ~60 GB/s reached.
DEFAULT_HOST_BANDWIDTH_GB_S = 60.0
#: The GPU the constants were measured on: NVIDIA H200 SXM, 4890 GB/s and 66.91 FP32 TFLOPS
#: (crawler/data/gpus.csv).
MEASURED_GPU_BANDWIDTH_GB_S = 4890.0
MEASURED_GPU_FP32_TFLOPS = 66.91
#: Draft lengths ``--spec-draft-n-max`` is chosen from (the measured range).
DRAFT_N_CHOICES = (1, 2, 3, 4, 5)

#: Share of peak bandwidth the decode kernels reach per weight type (fitted on uniform-type
#: files of four architectures, H200; docs/models.md). Types not measured use their class.
TYPE_EFFICIENCY: dict[str, float] = {
    "Q3_K": 0.125,
    "IQ3_XXS": 0.171,
    "IQ4_XS": 0.255,
    "Q4_0": 0.283,
    "Q4_K": 0.246,
    "Q5_K": 0.280,
    "Q6_K": 0.260,
    "Q8_0": 0.394,
    "F16": 0.394,
    "BF16": 0.394,
    "F32": 0.394,
}
#: Bits-per-weight classes for files whose type mix is unknown: below 4 bits the 2- and 3-bit
#: kernels (lookup-table and 3-bit K-quants), else the median of the 4- to 6-bit types.
LOW_BIT_EFFICIENCY = 0.155
MID_BIT_EFFICIENCY = 0.283
#: The fastest type's efficiency: the --sort speed bound's for a quant whose mix is not stored.
FASTEST_TYPE_EFFICIENCY = max(TYPE_EFFICIENCY.values())
#: Fixed cost per MoE layer, seconds (router, expert gather: fitted).
MOE_LAYER_S = 7.028e-5
#: Attention at depth on the H200, per attention layer per token of depth. A quantized cache
#: ("quant", seconds per query-head element): llama.cpp's vector kernel dequantizes K and V for
#: each query head, compute-bound (fitted on the H200's rows at 8K and 32K and the H100's, of the
#: same compute, at 64K and 258K). An f16 cache is read at the slower of the platform's share of
#: the bandwidth and, where fa_kernel picks the vector kernel, this rate ("vec", seconds per
#: cache byte on the H200's compute: fitted on its Llama-3-8B rows, 51 % of its peak); the
#: tensor-core kernel reads each KV head once for all its query heads: the read alone. Per
#: query-head element the H200's Gemma 3 12B rows at 32K cost 2.3x the Llama rows' rate, per
#: cache byte 1.1x. A quantized cache's fixed cost per attention layer: QCACHE_LAYER_S.
DEPTH_S = {"vec": 4.020e-13, "quant": 9.311e-13}
QCACHE_LAYER_S = 1.410e-5
#: A quantized cache at depth on another GPU (_layer_depth_seconds): the H200's time scaled by
#: the GPU's compute (FP32 TFLOPS ratio), plus the cache bytes read at the GPU's bandwidth over
#: what the H200's bandwidth took. The H100 SXM (the H200's compute, 0.69x its bandwidth)
#: decoded the seed's file with a q4_0 cache as fast as the H200 at 262K (24.5 tok/s against
#: 24.7), and an RTX 4090 (1.23x the H200's FP32, 0.21x its bandwidth) lost 15 % from 1K to 64K
#: tokens of a q4_0 cache on Qwen3.5-27B (docs/models.md), not the 52 % its bandwidth ratio
#: would give.
#: MTP at depth: each drafted token also attends over the cache (the MTP block's own attention
#: layer, and one more query column in each of the verify batch's attention layers), costing
#: this many attention layers' depth cost (fitted on the H100's k=3 rows at acceptance 0 and 1
#: with 64K-258K tokens in the cache).
DRAFT_DEPTH_LAYERS = 1.888
#: Experts in host memory: share of the host bandwidth reached (fitted against the default
#: 60 GB/s on the measuring machine's host).
HOST_EFF = 0.629
#: llama-server's own cost per decode step (sampling, slot bookkeeping) over llama-bench's.
SERVER_S = 3.404e-4
#: MTP: fixed cost per drafted token (the draft pass and its share of the verify batch: the two
#: scale together with k and are not separable from speed alone), and per accepted token.
DRAFT_S = 1.760e-3
ACCEPT_S = 1.064e-3
#: MTP verify: seconds per weight byte of the target pass per drafted token on the H200. Each
#: drafted token is one more column of the verify batch, and the decode kernels are bound by
#: dequantisation work per weight (TYPE_EFFICIENCY), so a column costs in proportion to the
#: weights the target reads: 0.6 ms on the dense 27B, 0.1 ms on the 3B-active MoE (a drafted
#: token costs 3.3 and 2.1 ms in all, measured at acceptance 0).
VERIFY_S = 4.028e-14
#: Other GPUs, per platform (the llama.cpp backend: "cuda" for NVIDIA and the rest, "metal" for
#: Apple): the share of peak bandwidth weight reads reach where the kernels keep up, a fixed cost
#: per trunk layer beyond the H200's and per MoE layer (seconds). Fitted (tools/fit_speed.py
#: --published) on the published rows not held out (PUBLISHED_ROWS of them: llama-bench tg128,
#: 27Bs through llama-server, with MTP for the share below). The CUDA layer cost fitted to 0
#: (llama.cpp's CUDA graphs); no published CUDA row of a MoE was fitted, so CUDA keeps the
#: H200's MoE layer cost. Metal pays 171 us per layer (command encoding; Apple GPUs are
#: compute-bound on small weights) and 23 us per MoE layer more.
PLATFORM_EFFICIENCY: dict[str, float] = {"cuda": 0.64, "metal": 0.82}
PLATFORM_LAYER_S: dict[str, float] = {"cuda": 0.0, "metal": 170.5e-6}
PLATFORM_MOE_LAYER_S: dict[str, float] = {"cuda": MOE_LAYER_S, "metal": 22.57e-6}
#: MTP on chips other than the measured one (mtp_share): the share of the H200's drafting costs
#: (DRAFT_S, ACCEPT_S, the verify column; each at the GPU's compute) a platform pays. Fitted on
#: the speed-up (each MTP row against its own MTP-off row): CUDA on one source's RTX 5090 at
#: draft lengths 1-3 (another 5090's sweep at 1-6 alone gives 0.71); Metal on an M4's 27B at 2,
#: no faster than without MTP (its K-quant kernels barely amortize a small verify batch).
PLATFORM_MTP_SHARE: dict[str, float] = {"cuda": 0.72, "metal": 3.66}
PUBLISHED_ROWS: dict[str, int] = {"cuda": 9, "metal": 9}


_LABEL_TYPE = re.compile(r"(?<![A-Z0-9])(I?Q\d_(?:K|\d|XXS|XS|S|M|NL))(?:_(S|M|L|XL))?", re.I)


def label_type_mix(label: str | None) -> tuple[tuple[str, float], ...]:
    """A type mix guessed from a quant label (``Q4_K_M``, ``UD-Q3_K_XL``, ``IQ4_XS``, ``Q8_0``),
    for files whose per-type bytes are not at hand: the named type alone; for an ``_S/_M/_L``
    mix 75 % the named type and 25 % Q6_K (llama-quantize keeps the output head and part of
    attn_v / ffn_down at 6 bits: 73 % / 27 % in the measured Q4_K_M-like Llama-3-8B); for
    ``_XL`` and Unsloth-Dynamic ``UD-`` mixes half and half (attention and linear attention kept
    at 6-8 bits: 48 % / 52 % in the measured UD-Q3_K_XL-like Qwen3.6-27B), their 2- and 3-bit
    K bulk being IQ-quants (IQ3_XXS there). Empty when the label names no type."""
    if not label:
        return ()
    m = _LABEL_TYPE.search(label)
    if m is None:
        return ()
    base, size = m.group(1).upper(), m.group(2)
    if size is None or base == "Q6_K":
        return ((base, 1.0),)
    dynamic = label.upper().startswith("UD-") or "-UD-" in label.upper() or size.upper() == "XL"
    if dynamic and base in ("Q2_K", "Q3_K"):
        base = f"IQ{base[1]}_XXS"
    high = 0.5 if dynamic else 0.25
    return ((base, 1.0 - high), ("Q6_K", high))


def type_efficiency(type_name: str | None, bits_per_weight: float | None = None) -> float:
    """Efficiency of one weight type, else of the bits-per-weight class."""
    if type_name is not None and type_name in TYPE_EFFICIENCY:
        return TYPE_EFFICIENCY[type_name]
    if type_name is not None:
        low = type_name.startswith(("IQ1", "IQ2", "IQ3", "Q2_K", "Q3_K", "TQ"))
        return LOW_BIT_EFFICIENCY if low else MID_BIT_EFFICIENCY
    if bits_per_weight is not None and bits_per_weight < 4.0:
        return LOW_BIT_EFFICIENCY
    return MID_BIT_EFFICIENCY


def mix_efficiency(
    type_mix: tuple[tuple[str, float], ...], bits_per_weight: float | None = None
) -> float:
    """The harmonic mean efficiency of a type mix (``1 / sum(share / efficiency)``), else of the
    bits-per-weight class: the kernels' rate weight_seconds_per_byte can at best reach, stored
    per quant (``quants.fit_type_eff``) for the --sort speed bound (SpeedBound)."""
    if type_mix:
        return 1.0 / sum(share / type_efficiency(t) for t, share in type_mix)
    return type_efficiency(None, bits_per_weight)


@dataclass(frozen=True, slots=True)
class SpeedInputs:
    """What one token reads and runs, for one quant in one configuration."""

    dense_bytes: int  # device weights read every token, routed experts excluded (output included)
    expert_bytes: int = 0  # all routed experts of the trunk (device or host)
    n_expert: int = 0
    n_expert_used: int = 0
    n_moe_layers: int = 0
    experts_on_host: bool = False
    kv_bytes_full: int = 0  # KV cache bytes at the configured context (kept for the record)
    recurrent_bytes: int = 0
    mtp: bool = False  # MTP drafting on (head present and loaded)
    mtp_bytes: int = 0  # the MTP block's device bytes
    mtp_expert_bytes: int = 0  # of which routed experts (a draft pass reads the active share)
    output_bytes: int = 0  # the output head, read by every draft pass
    draft_n_max: int = 3
    #: Every token routes to the same experts (the zero-weight files the constants were
    #: measured on: all router logits tie), so the verify batch reads no extra experts.
    same_experts: bool = False
    #: (ggml type, share of the weight bytes); empty: type_efficiency of the bits.
    type_mix: tuple[tuple[str, float], ...] = ()
    bits_per_weight: float | None = None
    n_layer: int = 0  # trunk layers
    n_attn: int = 0  # full-attention trunk layers (global: they see the whole depth)
    n_swa: int = 0  # sliding-window trunk layers
    swa_window: int = 0
    q_width: int = 0  # query heads x head dim of an attention layer
    gqa_ratio: int = 1  # query heads per KV head
    head_dim: int = 0  # K head dim
    kv_row_bytes: float = 0.0  # K and V bytes of one cached token in one attention layer
    cache_type: str = "f16"  # the K cache type (-ctk)
    ctx: int = 0  # tokens at the target context

    def weight_seconds_per_byte(self, bandwidth: float, platform: str = "cuda") -> float:
        """Seconds per weight byte at ``bandwidth`` (bytes/s), by the type mix: each type at
        the lesser of the platform's share of the bandwidth and the rate its kernel reached on
        the H200 (where the kernels, not the memory, set the pace)."""
        share = PLATFORM_EFFICIENCY[platform]

        def rate(eff: float) -> float:
            return min(share * bandwidth, eff * MEASURED_GPU_BANDWIDTH_GB_S * GB)

        if self.type_mix:
            return sum(share / rate(type_efficiency(t)) for t, share in self.type_mix)
        return 1.0 / rate(type_efficiency(None, self.bits_per_weight))

    @property
    def type_efficiency(self) -> float:
        """mix_efficiency of this quant's weights (a mix's shares add up to 1, so
        weight_seconds_per_byte >= 1 / min(share * bandwidth, this * the measured bandwidth))."""
        return mix_efficiency(self.type_mix, self.bits_per_weight)


@dataclass(frozen=True, slots=True)
class SpeedEstimate:
    """Estimated decode speed (tokens/s); always an estimate, never a measurement."""

    tok_s: float  # context nearly empty
    tok_s_at_ctx: float  # the target context filled
    mtp_speedup: float  # 1.0 without MTP
    bytes_per_token: int  # at an empty context, without MTP
    bandwidth_gb_s: float
    draft_n_max: int = 0  # the --spec-draft-n-max the estimate is for (0: MTP off)
    acceptance: float | None = None
    ctx: int = 0
    basis: str = ""

    def to_json(self) -> dict[str, object]:
        """JSON-friendly dict."""
        return {
            "estimate": True,
            "tok_s": round(self.tok_s, 1),
            "tok_s_at_ctx": round(self.tok_s_at_ctx, 1),
            "ctx": self.ctx,
            "mtp_speedup": round(self.mtp_speedup, 3),
            "spec_draft_n_max": self.draft_n_max,
            "mtp_acceptance": self.acceptance,
            "bytes_per_token": self.bytes_per_token,
            "bandwidth_gb_s": self.bandwidth_gb_s,
            "basis": self.basis,
        }


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens one MTP cycle yields: ``1 + a + a^2 + ... + a^k``."""
    if k <= 0:
        return 1.0
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def per_token_acceptance(mean_len: float, k: int) -> float:
    """The per-token acceptance ``a`` whose cycle of draft length ``k`` yields ``mean_len``
    tokens (llama-server's "mean len"), by bisection; clamped to [0, 1]."""
    if k <= 0 or mean_len <= 1.0:
        return 0.0
    if mean_len >= k + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens(mid, k) < mean_len else (lo, mid)
    return (lo + hi) / 2


def gpu_platform(gpu_name: str | None) -> str:
    """The llama.cpp backend a GPU of crawler/data/gpus.csv decodes with: "metal" for Apple
    chips, else "cuda" (AMD and Intel GPUs take the CUDA terms: no published row of theirs
    was fitted)."""
    return "metal" if gpu_name is not None and gpu_name.startswith("Apple") else "cuda"


def measured_gpu(bandwidth_gb_s: float, platform: str) -> bool:
    return platform == "cuda" and abs(bandwidth_gb_s - MEASURED_GPU_BANDWIDTH_GB_S) < 1.0


def active_expert_bytes(expert_bytes: int, n_expert: int, n_expert_used: int) -> float:
    return expert_bytes * max(n_expert_used, 1) / n_expert if n_expert > 0 else float(expert_bytes)


def compute_ratio(fp32_tflops: float | None) -> float | None:
    """The GPU's FP32 compute over the H200's; None where it is not known."""
    if fp32_tflops is None or fp32_tflops <= 0:
        return None
    return fp32_tflops / MEASURED_GPU_FP32_TFLOPS


def depth_scale(bandwidth_gb_s: float, fp32_tflops: float | None) -> float:
    """How many times the H200's compute time attention over a quantized cache takes on a GPU:
    its compute ratio; the bandwidth ratio where the GPU's compute is not known (then the cache
    read is not added apart: _layer_depth_seconds)."""
    c = compute_ratio(fp32_tflops)
    return MEASURED_GPU_BANDWIDTH_GB_S / bandwidth_gb_s if c is None else 1.0 / c


def mtp_share(bandwidth_gb_s: float, platform: str, fp32_tflops: float | None) -> float:
    """The share of the H200's drafting costs a GPU pays (PLATFORM_MTP_SHARE): all of them on
    the measured chip, the H200 or the H100 SXM (its die at its clocks: its compute, 3360 GB/s)."""
    c = compute_ratio(fp32_tflops)
    h100 = c is not None and abs(c - 1) < 0.01 and abs(bandwidth_gb_s - 3360.0) < 1.0
    return 1.0 if measured_gpu(bandwidth_gb_s, platform) or h100 else PLATFORM_MTP_SHARE[platform]


def fa_kernel(gqa_ratio: int, head_dim: int, depth: int) -> str:
    """The flash-attention kernel llama.cpp's CUDA backend runs for one decode query over an f16
    cache on an Ada Lovelace or newer GPU (ggml_cuda_get_best_fattn_kernel in
    ggml/src/ggml-cuda/fattn.cu): the vector kernel ("vec"), but with more than 4 query heads
    per KV head and 256-wide heads or 8192 or more cached tokens the tensor-core kernel
    ("mma"), which reads each KV head once for all of its query heads."""
    return "mma" if gqa_ratio > 4 and (head_dim >= 256 or depth >= 8192) else "vec"


def _cache_class(cache_type: str) -> str:
    return "f16" if cache_type in ("f16", "bf16", "f32") else "quant"


def _layer_depth_seconds(
    x: SpeedInputs, depth: int, bandwidth_gb_s: float, fp32_tflops: float | None, platform: str
) -> float:
    """One attention layer's attention over ``depth`` tokens of cache, per token. An f16 cache:
    its bytes at the slower of the platform's share of the bandwidth and, for the vector
    kernel, the H200's rate scaled by depth_scale (as weight_seconds_per_byte reads weights).
    A quantized cache: the H200's time scaled by depth_scale, and with the GPU's compute known
    the cache bytes' read time at its bandwidth over the H200's (part of the H200's fitted
    time)."""
    scale = depth_scale(bandwidth_gb_s, fp32_tflops)
    if _cache_class(x.cache_type) == "f16":
        per_byte = 1.0 / (PLATFORM_EFFICIENCY[platform] * bandwidth_gb_s * GB)
        if fa_kernel(x.gqa_ratio, x.head_dim, depth) == "vec":
            per_byte = max(per_byte, DEPTH_S["vec"] * scale)
        return depth * x.kv_row_bytes * per_byte
    s = depth * x.q_width * DEPTH_S["quant"] * scale
    if compute_ratio(fp32_tflops) is not None:
        extra = 1.0 / bandwidth_gb_s - 1.0 / MEASURED_GPU_BANDWIDTH_GB_S
        s += depth * x.kv_row_bytes * extra / GB
    return s


def decode_seconds(
    x: SpeedInputs,
    bandwidth_gb_s: float,
    depth: int = 0,
    *,
    host_bandwidth_gb_s: float = DEFAULT_HOST_BANDWIDTH_GB_S,
    server: bool = True,
    platform: str = "cuda",
    fp32_tflops: float | None = None,
) -> float:
    """Seconds of one decode step (no MTP) at ``depth`` tokens of context on a GPU of
    ``platform`` (the measured H200's own terms at its bandwidth, else the platform's)."""
    bw = bandwidth_gb_s * GB
    per_byte = x.weight_seconds_per_byte(bw, platform)
    measured = measured_gpu(bandwidth_gb_s, platform)
    active = active_expert_bytes(x.expert_bytes, x.n_expert, x.n_expert_used)
    device = x.dense_bytes + 2 * x.recurrent_bytes + (0.0 if x.experts_on_host else active)
    s = device * per_byte
    if x.experts_on_host:
        s += active / (HOST_EFF * host_bandwidth_gb_s * GB)
    else:
        s += x.n_moe_layers * (MOE_LAYER_S if measured else PLATFORM_MOE_LAYER_S[platform])
    if not measured:
        s += x.n_layer * PLATFORM_LAYER_S[platform]
    if depth > 0:
        # global layers see the whole depth, sliding-window layers at most their window
        s += x.n_attn * _layer_depth_seconds(x, depth, bandwidth_gb_s, fp32_tflops, platform)
        window = min(depth, x.swa_window or depth)
        s += x.n_swa * _layer_depth_seconds(x, window, bandwidth_gb_s, fp32_tflops, platform)
    if _cache_class(x.cache_type) == "quant":
        s += (x.n_attn + x.n_swa) * QCACHE_LAYER_S
    if server:
        s += SERVER_S
    return s


def mtp_cycle_seconds(
    x: SpeedInputs,
    bandwidth_gb_s: float,
    k: int,
    alpha: float,
    depth: int = 0,
    platform: str = "cuda",
    fp32_tflops: float | None = None,
) -> float:
    """Seconds of one MTP cycle: target pass, ``k`` drafts (each attending over the cache at
    depth), verify and accepted-token costs."""
    t0 = decode_seconds(x, bandwidth_gb_s, depth, platform=platform, fp32_tflops=fp32_tflops)
    if k <= 0:
        return t0
    bw = bandwidth_gb_s * GB
    c = compute_ratio(fp32_tflops)
    idle = x.mtp_expert_bytes * (1.0 - x.n_expert_used / x.n_expert) if x.n_expert > 0 else 0.0
    read = x.mtp_bytes - idle + x.output_bytes
    q8 = SpeedInputs(0, type_mix=(("Q8_0", 1.0),)).weight_seconds_per_byte(bw, platform)
    active = active_expert_bytes(x.expert_bytes, x.n_expert, x.n_expert_used)
    target = x.dense_bytes + (0.0 if x.experts_on_host else active)
    # the fixed costs are work the H200 did at its compute (unknown compute: the bandwidth ratio
    # for the verify column, the H200's time for the rest), at the platform's share of them
    share = mtp_share(bandwidth_gb_s, platform, fp32_tflops)
    fixed = share if c is None else share / c
    slow = share * (MEASURED_GPU_BANDWIDTH_GB_S / bandwidth_gb_s if c is None else 1.0 / c)
    draft = read * q8 + DRAFT_S * fixed + target * VERIFY_S * slow
    draft += DRAFT_DEPTH_LAYERS * _layer_depth_seconds(
        x, depth, bandwidth_gb_s, fp32_tflops, platform
    )
    extra = 0.0
    if x.n_expert > 0 and x.n_expert_used > 0 and not x.experts_on_host and not x.same_experts:
        p = x.n_expert_used / x.n_expert
        distinct = (1.0 - (1.0 - p) ** (k + 1)) / p
        extra = active * (distinct - 1.0) * x.weight_seconds_per_byte(bw, platform)
    accepted = expected_tokens(alpha, k) - 1.0
    return t0 + k * draft + extra + accepted * ACCEPT_S * fixed


def _basis(bandwidth_gb_s: float, platform: str) -> str:
    if measured_gpu(bandwidth_gb_s, platform):
        return "measured GPU class (H200, llama.cpp 0c1e57098)"
    name = "Metal" if platform == "metal" else "CUDA"
    return f"extrapolated from {PUBLISHED_ROWS[platform]} published {name} rows"


def estimate_speed(
    x: SpeedInputs,
    bandwidth_gb_s: float,
    *,
    host_bandwidth_gb_s: float = DEFAULT_HOST_BANDWIDTH_GB_S,
    acceptance: float = DEFAULT_ACCEPTANCE,
    choose_draft: bool = False,
    platform: str = "cuda",
    fp32_tflops: float | None = None,
) -> SpeedEstimate:
    """Estimated decode tokens/s at an empty and at the target context (``x.ctx``) on a GPU
    of ``platform`` (gpu_platform) with ``fp32_tflops`` of compute (None: not known).

    With MTP on and ``choose_draft`` the draft length is the one of DRAFT_N_CHOICES with
    the highest predicted tok/s at an empty context; else ``x.draft_n_max``.
    """

    def step(depth: int) -> float:
        return decode_seconds(x, bandwidth_gb_s, depth, host_bandwidth_gb_s=host_bandwidth_gb_s,
                              platform=platform, fp32_tflops=fp32_tflops)  # fmt: skip

    def cycle(n: int, depth: int = 0) -> float:
        return mtp_cycle_seconds(x, bandwidth_gb_s, n, acceptance, depth, platform, fp32_tflops)

    t0, t_ctx = step(0), step(x.ctx)

    k = x.draft_n_max if x.mtp else 0
    if x.mtp and choose_draft:
        k = max(DRAFT_N_CHOICES, key=lambda n: expected_tokens(acceptance, n) / cycle(n))
    active = active_expert_bytes(x.expert_bytes, x.n_expert, x.n_expert_used)
    if k > 0:
        e = expected_tokens(acceptance, k)
        tok = e / cycle(k)
        tok_ctx = e / cycle(k, x.ctx)
        speedup = tok * t0
    else:
        tok, tok_ctx, speedup = 1.0 / t0, 1.0 / t_ctx, 1.0
    return SpeedEstimate(
        tok_s=tok if t0 > 0 else math.inf,
        tok_s_at_ctx=tok_ctx if t_ctx > 0 else math.inf,
        mtp_speedup=speedup,
        bytes_per_token=int(x.dense_bytes + 2 * x.recurrent_bytes + active),
        bandwidth_gb_s=bandwidth_gb_s,
        draft_n_max=k,
        acceptance=acceptance if k > 0 else None,
        ctx=x.ctx,
        basis=_basis(bandwidth_gb_s, platform),
    )
