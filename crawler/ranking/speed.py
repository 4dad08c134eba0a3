"""Decode-speed estimate (tokens/s) from memory bandwidth (pure: no I/O). An estimate, labelled so.

Token generation on a GPU is memory-bound: each token reads every weight it multiplies once, plus
the KV cache written so far. The model:

``t_token = bytes_read / (EFFICIENCY * bandwidth) + n_moe_layers * MOE_LAYER_SECONDS``

* ``bytes_read``: device weights except the routed experts (dense models: all of them; the input
  embedding stays in host memory and only one row is read), plus ``n_expert_used / n_expert`` of
  the routed experts (shared experts are dense weights), plus the recurrent state (read and
  written), plus the KV cache at the context reached (``tok_s`` at an empty context,
  ``tok_s_at_ctx`` with the whole context filled). With ``--cpu-moe`` the routed experts are read
  from host memory at ``host_bandwidth``.
* ``EFFICIENCY`` (share of peak bandwidth llama.cpp reaches) and ``MOE_LAYER_SECONDS`` (fixed cost
  per MoE layer: routing, many small expert matmuls) are fitted on the published measurements in
  OBSERVATIONS; calibration_report gives the errors.
* MTP drafting (when enabled and the head is present): with draft length ``k`` and acceptance
  ``alpha``, a cycle yields ``E = (1 - alpha^(k+1)) / (1 - alpha)`` tokens and costs one target
  pass over ``k + 1`` tokens plus ``k`` draft passes. The draft pass reads the MTP block and the
  output head (``shared_head_head`` falls back to ``output``); the verify pass costs
  ``1 + k * VERIFY_OVERHEAD`` decodes (fitted), and for MoE the extra distinct experts the ``k + 1``
  tokens route to. ``alpha`` defaults to DEFAULT_ACCEPTANCE, the median published rate.

Sources: ``shared/reference/quant-ecosystem.md`` section 5 (MTP speeds and acceptance rates) and
section 1 (Qwen3.5-35B-A3B speeds on an RTX 3090); GPU bandwidths from ``crawler/data/gpus.csv``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

__all__ = [
    "DEFAULT_ACCEPTANCE",
    "OBSERVATIONS",
    "SpeedBound",
    "SpeedCalibration",
    "SpeedEstimate",
    "SpeedInputs",
    "calibration_report",
    "estimate_speed",
    "mtp_speedup",
    "read_bytes_floor",
    "speed_bound",
    "verify_experts_floor",
]

GB = 1e9
#: Median of the published MTP acceptance rates: 0.70 (localweights 27B, RTX 3090 Ti), 0.726
#: (Qwen3.5-122B, Strix Halo), 0.789 (llama.cpp PR #22673 aggregate), 0.84 (Strata, low end),
#: 0.906 (GazTrab 27B, 16 GB card).
DEFAULT_ACCEPTANCE = 0.789
#: Host memory bandwidth for experts kept on the CPU (--cpu-moe) when none is given: dual-channel
#: DDR5-4800 peak is 76.8 GB/s; we assume ~60 GB/s reached.
DEFAULT_HOST_BANDWIDTH_GB_S = 60.0


@dataclass(frozen=True, slots=True)
class SpeedInputs:
    """Bytes per token of one quant in one configuration (from the memory model and profile)."""

    dense_bytes: int  # device weights read every token, routed experts excluded (output included)
    expert_bytes: int = 0  # all routed experts of the trunk (device or host)
    n_expert: int = 0
    n_expert_used: int = 0
    n_moe_layers: int = 0
    experts_on_host: bool = False
    kv_bytes_full: int = 0  # KV cache bytes at the configured context
    recurrent_bytes: int = 0
    mtp: bool = False  # MTP drafting on (head present and loaded)
    mtp_bytes: int = 0  # the MTP block's device bytes
    output_bytes: int = 0  # the output head, read by every draft pass
    draft_n_max: int = 3


@dataclass(frozen=True, slots=True)
class SpeedEstimate:
    """Estimated decode speed (tokens/s); always an estimate, never a measurement."""

    tok_s: float  # context nearly empty
    tok_s_at_ctx: float  # the whole configured context filled
    mtp_speedup: float  # 1.0 without MTP
    bytes_per_token: int  # at an empty context, without MTP
    bandwidth_gb_s: float

    def to_json(self) -> dict[str, object]:
        """JSON-friendly dict."""
        return {
            "estimate": True,
            "tok_s": round(self.tok_s, 1),
            "tok_s_at_ctx": round(self.tok_s_at_ctx, 1),
            "mtp_speedup": round(self.mtp_speedup, 3),
            "bytes_per_token": self.bytes_per_token,
            "bandwidth_gb_s": self.bandwidth_gb_s,
        }


@dataclass(frozen=True, slots=True)
class Observation:
    """A published decode speed with what is known of the setup."""

    label: str
    source: str
    bandwidth_gb_s: float
    dense_gb: float  # weights read per token, GB (estimated from the named quant)
    expert_active_gb: float
    n_moe_layers: int
    tok_s: float
    tok_s_mtp: float | None = None
    acceptance: float | None = None


#: Calibration points. Bytes per token are our estimates from the named quant (stated here).
OBSERVATIONS: tuple[Observation, ...] = (
    Observation(
        "Qwen3.6-27B IQ4_XS+Q8 nextn, RTX 3090 Ti (48 -> 73 tok/s, ~70% accept)",
        "localweights/Qwen3.6-27B-MTP-IMAT-IQ4_XS-Q8nextn-GGUF card (quant-ecosystem.md s.5)",
        1010.0,
        # 26.9B trunk params less the 1.27B host-side embedding at IQ4_XS 4.25 bpw (+ output).
        13.9,
        0.0,
        0,
        48.0,
        73.0,
        0.70,
    ),
    Observation(
        "Qwen3.6-27B UD-IQ3_XXS+MTP, 16 GB card (53 -> 76 tok/s, 90.6% accept)",
        "GazTrab/Qwen3.6-27B-MTP-UD-IQ3_XXS-GGUF card (quant-ecosystem.md s.5)",
        0.0,  # card not named: used for the MTP ratio only
        11.9,
        0.0,
        0,
        53.0,
        76.0,
        0.906,
    ),
    Observation(
        "seed: 24 GB laptop card (RTX 5090 Laptop, 896 GB/s), 65 -> 80 tok/s with MTP",
        "the project's seed observation (issue #6); model and quant not recorded",
        0.0,  # model unknown: used for the MTP ratio only, acceptance assumed = default
        13.9,
        0.0,
        0,
        65.0,
        80.0,
        None,
    ),
    Observation(
        "Qwen3.5-35B-A3B iq4_nl (Mungert), RTX 3090: ~143 tok/s",
        "u/StrikeOner sweep, r/LocalLLaMA 2026-03 (quant-ecosystem.md s.1)",
        936.2,
        # ~1.6B always-active params (attention, shared experts, output) at ~4.5 bpw.
        0.95,
        # 256 experts x 40 layers, 8 used: ~1.0B active routed params at 4.5 bpw.
        0.57,
        40,
        143.0,
    ),
    Observation(
        "Qwen3.5-35B-A3B UD-Q3_K_XL, RTX 3090: ~105 tok/s",
        "u/StrikeOner sweep, r/LocalLLaMA 2026-03 (quant-ecosystem.md s.1)",
        936.2,
        1.25,  # dynamic quant keeps attention and shared experts at Q8_0
        0.45,
        40,
        105.0,
    ),
)


@dataclass(frozen=True, slots=True)
class SpeedCalibration:
    """Fitted constants and their errors on OBSERVATIONS."""

    efficiency: float
    moe_layer_seconds: float
    verify_overhead: float
    errors: tuple[tuple[str, float], ...]  # (label, predicted/measured - 1)

    def rows(self) -> Iterable[tuple[str, str]]:
        """(metric, value) rows for a table."""
        yield "bandwidth efficiency (fitted)", f"{self.efficiency:.2f}"
        yield "fixed cost per MoE layer (fitted)", f"{self.moe_layer_seconds * 1e6:.0f} us"
        yield "verify overhead per drafted token (fitted)", f"{self.verify_overhead:.2f} decodes"
        for label, err in self.errors:
            yield label, f"{err:+.0%}"


def _expected_tokens(alpha: float, k: int) -> float:
    if k <= 0:
        return 1.0
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def mtp_speedup(
    *,
    alpha: float,
    k: int,
    draft_ratio: float,
    verify_overhead: float,
    expert_share: float = 0.0,
    n_expert: int = 0,
    n_expert_used: int = 0,
) -> float:
    """Tokens/s with MTP over tokens/s without, for one verify-and-draft cycle.

    ``draft_ratio`` = bytes of one draft pass / bytes of one target decode; ``expert_share`` = the
    routed experts' share of a target decode's bytes (MoE: ``k + 1`` tokens touch more experts).
    """
    if k <= 0:
        return 1.0
    extra_experts = 0.0
    if expert_share > 0 and n_expert > 0 and n_expert_used > 0:
        p = n_expert_used / n_expert
        distinct = (1.0 - (1.0 - p) ** (k + 1)) / p  # experts touched, per expert of one token
        extra_experts = expert_share * (distinct - 1.0)
    cost = 1.0 + k * verify_overhead + extra_experts + k * draft_ratio
    return _expected_tokens(alpha, k) / cost


def _fit() -> SpeedCalibration:
    # Efficiency from the dense point with a named card; MoE layer cost from the MoE points.
    dense = [o for o in OBSERVATIONS if o.bandwidth_gb_s and not o.n_moe_layers]
    eff = sum(o.tok_s * o.dense_gb * GB / (o.bandwidth_gb_s * GB) for o in dense) / len(dense)
    moe = [o for o in OBSERVATIONS if o.bandwidth_gb_s and o.n_moe_layers]
    taus = [
        (1.0 / o.tok_s - (o.dense_gb + o.expert_active_gb) * GB / (eff * o.bandwidth_gb_s * GB))
        / o.n_moe_layers
        for o in moe
    ]
    tau = max(0.0, sum(taus) / len(taus))
    # Verify overhead: least squares on the MTP ratios (grid; the function is smooth and 1-D).
    # Draft pass of a 27B: MTP block (~0.29 GB at Q8_0) + output head (~1.0 GB at Q6_K) over the
    # observation's target bytes.
    mtp = [o for o in OBSERVATIONS if o.tok_s_mtp]

    def sse(v: float) -> float:
        total = 0.0
        for o in mtp:
            pred = mtp_speedup(
                alpha=o.acceptance or DEFAULT_ACCEPTANCE,
                k=3,
                draft_ratio=1.3 / o.dense_gb,
                verify_overhead=v,
            )
            total += (pred / (o.tok_s_mtp / o.tok_s) - 1.0) ** 2  # type: ignore[operator]
        return total

    v = min((i / 1000 for i in range(0, 1001)), key=sse)
    errors = []
    for o in OBSERVATIONS:
        if o.bandwidth_gb_s:
            t = (o.dense_gb + o.expert_active_gb) * GB / (eff * o.bandwidth_gb_s * GB)
            t += o.n_moe_layers * tau
            errors.append((f"{o.label}: tok/s", (1.0 / t) / o.tok_s - 1.0))
        if o.tok_s_mtp:
            pred = mtp_speedup(
                alpha=o.acceptance or DEFAULT_ACCEPTANCE,
                k=3,
                draft_ratio=1.3 / o.dense_gb,
                verify_overhead=v,
            )
            errors.append((f"{o.label}: MTP speed-up", pred / (o.tok_s_mtp / o.tok_s) - 1.0))
    return SpeedCalibration(eff, tau, v, tuple(errors))


@cache
def calibration_report() -> SpeedCalibration:
    """The fitted constants and per-observation errors (cached)."""
    return _fit()


def estimate_speed(
    x: SpeedInputs,
    bandwidth_gb_s: float,
    *,
    host_bandwidth_gb_s: float = DEFAULT_HOST_BANDWIDTH_GB_S,
    acceptance: float = DEFAULT_ACCEPTANCE,
) -> SpeedEstimate:
    """Estimated decode tokens/s of one quant on a GPU with ``bandwidth_gb_s``."""
    cal = calibration_report()
    bw = cal.efficiency * bandwidth_gb_s * GB
    host_bw = cal.efficiency * host_bandwidth_gb_s * GB
    active_experts = _active_expert_bytes(x.expert_bytes, x.n_expert, x.n_expert_used)
    dense = x.dense_bytes + 2 * x.recurrent_bytes  # the recurrent state is read and written
    seconds = dense / bw + x.n_moe_layers * cal.moe_layer_seconds
    seconds += active_experts / (host_bw if x.experts_on_host else bw)
    seconds_full = seconds + x.kv_bytes_full / bw
    speedup = 1.0
    if x.mtp and x.draft_n_max > 0:
        target = dense + active_experts
        speedup = mtp_speedup(
            alpha=acceptance,
            k=x.draft_n_max,
            draft_ratio=(x.mtp_bytes + x.output_bytes) / max(target, 1),
            verify_overhead=cal.verify_overhead,
            expert_share=active_experts / max(target, 1),
            n_expert=x.n_expert,
            n_expert_used=x.n_expert_used,
        )
        speedup = max(speedup, 0.0)
    return SpeedEstimate(
        tok_s=speedup / seconds if seconds > 0 else math.inf,
        tok_s_at_ctx=speedup / seconds_full if seconds_full > 0 else math.inf,
        mtp_speedup=speedup,
        bytes_per_token=int(dense + active_experts),
        bandwidth_gb_s=bandwidth_gb_s,
    )


def _active_expert_bytes(expert_bytes: int, n_expert: int, n_expert_used: int) -> float:
    return expert_bytes * max(n_expert_used, 1) / n_expert if n_expert > 0 else float(expert_bytes)


def read_bytes_floor(
    dense_bytes: int, expert_bytes: int, n_expert: int, n_expert_used: int, recurrent_bytes: int
) -> int:
    """The bytes estimate_speed reads per token at an empty context (dense weights, the
    recurrent state twice, the active share of the routed experts), rounded down. The catalog
    stores it (``quants.fit_read_bytes``) so ``--sort speed`` can walk quants fastest first."""
    active = _active_expert_bytes(expert_bytes, n_expert, n_expert_used)
    return int(dense_bytes + 2 * recurrent_bytes + math.floor(active))


@dataclass(frozen=True, slots=True)
class SpeedBound:
    """The per-request factors of an upper bound of estimate_speed's ``tok_s``, built
    from a quant's stored scalars (``--sort speed`` orders the catalog by it in SQL)::

        tok_s <= speedup / (read_bytes / bw + n_moe_layers * moe_layer_seconds)
        speedup = expected / (base_cost + draft_n_max * draft_bytes / (read_bytes + 1)
                              + verify_experts)

    ``read_bytes`` is read_bytes_floor (at most the bytes a token reads, more than the
    target decode's bytes less one), ``bw`` the faster bandwidth in use, ``draft_bytes`` what a
    draft pass reads (the MTP block and the output head), ``verify_experts``
    verify_experts_floor (counted from ``draft_n_max`` VERIFY_EXPERTS_K on, where
    it is a floor of mtp_speedup's extra experts). Without MTP ``expected`` and
    ``base_cost`` are 1 and a dense quant's bound is its estimate, computed with the same
    floating-point steps.
    """

    bw: float  # bytes/s
    moe_layer_seconds: float
    expected: float
    base_cost: float
    draft_n_max: int

    def tok_s(
        self, read_bytes: int, n_moe_layers: int, draft_bytes: int, verify_experts: float = 0.0
    ) -> float:
        """The bound for one quant (what ``crawler.ranking.bounds.speed_bound_sql`` computes).

        With routed experts the estimate adds their bytes in a separate float step, so the bound
        is raised by MOE_BOUND_SLACK to stay above it whatever the rounding.
        """
        seconds = read_bytes / self.bw + n_moe_layers * self.moe_layer_seconds
        cost = self.base_cost + self.draft_n_max * draft_bytes / (read_bytes + 1)
        if self.draft_n_max >= VERIFY_EXPERTS_K:
            cost += verify_experts
        slack = MOE_BOUND_SLACK if n_moe_layers > 0 else 1.0
        return math.inf if seconds <= 0 else (self.expected / cost) / seconds * slack


#: The draft length verify_experts_floor is computed for (llama.cpp's default).
VERIFY_EXPERTS_K = 3


def verify_experts_floor(
    read_bytes: int, expert_bytes: int, n_expert: int, n_expert_used: int
) -> float:
    """A floor of mtp_speedup's ``extra_experts`` (the experts the ``k + 1`` verified
    tokens touch beyond one token's) for any draft length ``k >= VERIFY_EXPERTS_K``: the touched
    experts grow with ``k``, and the routed experts' share of a decode is at least their active
    bytes (rounded down) over ``read_bytes + 1`` (read_bytes_floor). 0 for dense quants."""
    if n_expert <= 0 or n_expert_used <= 0 or expert_bytes <= 0:
        return 0.0
    p = n_expert_used / n_expert
    distinct = (1.0 - (1.0 - p) ** (VERIFY_EXPERTS_K + 1)) / p
    share = math.floor(_active_expert_bytes(expert_bytes, n_expert, n_expert_used)) / (
        read_bytes + 1
    )
    return share * (distinct - 1.0)


#: Relative slack of SpeedBound for MoE quants (far above float rounding, far below
#: any difference the ranking shows).
MOE_BOUND_SLACK = 1.0 + 1e-9


def speed_bound(
    bandwidth_gb_s: float,
    *,
    mtp: bool,
    draft_n_max: int,
    experts_on_host: bool = False,
    host_bandwidth_gb_s: float = DEFAULT_HOST_BANDWIDTH_GB_S,
    acceptance: float = DEFAULT_ACCEPTANCE,
) -> SpeedBound:
    """The SpeedBound for one GPU and configuration (arguments: estimate_speed)."""
    cal = calibration_report()
    fastest = max(bandwidth_gb_s, host_bandwidth_gb_s) if experts_on_host else bandwidth_gb_s
    k = draft_n_max if mtp else 0
    return SpeedBound(
        bw=cal.efficiency * fastest * GB,
        moe_layer_seconds=cal.moe_layer_seconds,
        expected=_expected_tokens(acceptance, k),
        base_cost=1.0 + k * cal.verify_overhead,
        draft_n_max=k,
    )
