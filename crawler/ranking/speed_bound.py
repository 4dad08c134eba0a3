"""An upper bound of the decode-speed estimate from a quant's stored scalars, pure: no I/O.

``--sort speed`` orders the catalog by it in SQL (speed_bound_sql).
Details: docs/internals/ranking.md#speed_bound
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from crawler.ranking.model import HEAD_MAY_DRAFT_SQL, Budget, RunSpec
from crawler.ranking.speed import (
    ACCEPT_S,
    DEFAULT_ACCEPTANCE,
    DEFAULT_HOST_BANDWIDTH_GB_S,
    DRAFT_N_CHOICES,
    DRAFT_S,
    FASTEST_TYPE_EFFICIENCY,
    GB,
    HOST_EFF,
    MEASURED_GPU_BANDWIDTH_GB_S,
    MOE_LAYER_S,
    PLATFORM_EFFICIENCY,
    PLATFORM_LAYER_S,
    PLATFORM_MOE_LAYER_S,
    PLATFORM_MTP_SHARE,
    SERVER_S,
    active_expert_bytes,
    compute_ratio,
    expected_tokens,
    gpu_platform,
    measured_gpu,
    mtp_share,
)

__all__ = [
    "SPEED_BOUND_SLACK",
    "VERIFY_EXPERTS_K",
    "SpeedBound",
    "read_bytes_floor",
    "speed_bound",
    "speed_bound_for",
    "speed_bound_sql",
    "verify_experts_floor",
]


def read_bytes_floor(
    dense_bytes: int, expert_bytes: int, n_expert: int, n_expert_used: int, recurrent_bytes: int
) -> int:
    """The bytes estimate_speed reads per token at an empty context (dense weights, the
    recurrent state twice, the active share of the routed experts), rounded down. The catalog
    stores it (``quants.fit_read_bytes``) so ``--sort speed`` can walk quants fastest first."""
    active = active_expert_bytes(expert_bytes, n_expert, n_expert_used)
    return int(dense_bytes + 2 * recurrent_bytes + math.floor(active))


@dataclass(frozen=True, slots=True)
class SpeedBound:
    """The per-request factors of an upper bound of estimate_speed's ``tok_s``, built
    from a quant's stored scalars (``--sort speed`` orders the catalog by it in SQL)::

        tok_s <= max(plain / seconds, speedup / (seconds + cycle_seconds))
        seconds = read_bytes / rate + n_moe_layers * moe_layer_seconds
                  + n_layers * layer_seconds + fixed_seconds
        rate = max(min(platform_bw, type_eff * kernel_bw), host_bw)
        speedup = expected / (base_cost + draft_n_max * draft_bytes / (read_bytes + 1)
                              + verify_experts)

    ``rate`` is the fastest a weight byte of this quant is read at: every type of its mix
    at most at the platform's share of the bandwidth and at its kernel's rate, so the mix at
    most at its harmonic efficiency ``type_eff`` (mix_efficiency; unknown: the fastest type's);
    experts possibly in host memory at most at the host's rate. ``moe_layer_seconds`` is the
    fixed MoE cost, ``layer_seconds`` the platform's cost per trunk layer (0 where unknown),
    ``fixed_seconds`` the server's cost per step (``seconds``: at most one target pass).
    With MTP, a cycle of draft length k >= 1 yields ``expected_tokens(a, k)`` tokens and costs at
    least the target pass, k drafts' fixed cost and the accepted tokens' (mtp_cycle_seconds):
    ``expected`` is the most tokens of any k the estimate may take, ``cycle_seconds`` the least
    of those costs; ``plain`` is 1 where the estimate may run without drafting (k = 0), else 0.
    The draft term is left at 0, ``verify_experts`` is verify_experts_floor.
    """

    platform_bw: float  # bytes/s
    kernel_bw: float  # bytes/s at type efficiency 1
    host_bw: float  # bytes/s; 0 when every expert is on the GPU
    moe_layer_seconds: float
    layer_seconds: float
    fixed_seconds: float
    expected: float
    base_cost: float
    draft_n_max: int
    cycle_seconds: float = 0.0
    plain: float = 0.0

    def rate(self, type_eff: float | None = None) -> float:
        """Bytes/s: the fastest a weight byte of a quant of harmonic efficiency ``type_eff``
        is read at (None: of any quant)."""
        eff = FASTEST_TYPE_EFFICIENCY if type_eff is None else type_eff
        return max(min(self.platform_bw, eff * self.kernel_bw), self.host_bw)

    def tok_s(
        self,
        read_bytes: int,
        n_moe_layers: int,
        draft_bytes: int,
        verify_experts: float = 0.0,
        type_eff: float | None = None,
        n_layers: int = 0,
    ) -> float:
        """The bound for one quant (what ``speed_bound_sql`` computes)."""
        seconds = (
            read_bytes / self.rate(type_eff)
            + n_moe_layers * self.moe_layer_seconds
            + n_layers * self.layer_seconds
            + self.fixed_seconds
        )
        cost = self.base_cost + self.draft_n_max * draft_bytes / (read_bytes + 1)
        if self.draft_n_max >= VERIFY_EXPERTS_K:
            cost += verify_experts
        if seconds <= 0:
            return math.inf
        tok = (self.expected / cost) / (seconds + self.cycle_seconds)
        return max(tok, self.plain / seconds) * SPEED_BOUND_SLACK


#: The draft length verify_experts_floor is computed for (llama.cpp's default).
VERIFY_EXPERTS_K = 3


def verify_experts_floor(
    read_bytes: int, expert_bytes: int, n_expert: int, n_expert_used: int
) -> float:
    """A floor of the MTP verify pass's extra experts (the experts the ``k + 1`` verified tokens
    touch beyond one token's) for any draft length ``k >= VERIFY_EXPERTS_K``, in units of one
    token's read bytes: the routed experts' share of a decode is at least their active bytes
    (rounded down) over ``read_bytes + 1`` (read_bytes_floor). 0 for dense quants."""
    if n_expert <= 0 or n_expert_used <= 0 or expert_bytes <= 0:
        return 0.0
    p = n_expert_used / n_expert
    distinct = (1.0 - (1.0 - p) ** (VERIFY_EXPERTS_K + 1)) / p
    share = math.floor(active_expert_bytes(expert_bytes, n_expert, n_expert_used)) / (
        read_bytes + 1
    )
    return share * (distinct - 1.0)


#: Relative slack of SpeedBound (far above float rounding, far below any difference the ranking
#: shows): with the quant's own rate the bound is within float rounding of the estimate.
SPEED_BOUND_SLACK = 1.0 + 1e-9


def speed_bound(
    bandwidth_gb_s: float,
    *,
    mtp: bool,
    draft_n_max: int,
    experts_on_host: bool = False,
    host_bandwidth_gb_s: float = DEFAULT_HOST_BANDWIDTH_GB_S,
    acceptance: float = DEFAULT_ACCEPTANCE,
    platform: str | None = None,
    fp32_tflops: float | None = None,
) -> SpeedBound:
    """The SpeedBound for one GPU and configuration (arguments: estimate_speed) on
    ``platform`` (None: any platform: the larger share of the bandwidth, the smaller MoE layer
    cost, no cost per layer, and without ``fp32_tflops`` no MTP fixed cost: those scale with
    the GPU's compute). ``experts_on_host``: the routed
    experts may be in host memory (read at the host's rate, no MoE layer cost), or not.

    With MTP the draft length may be chosen per quant (DRAFT_N_CHOICES) or be ``draft_n_max``:
    ``expected`` is the most tokens a cycle of any of them yields at ``acceptance``, and a cycle
    costs at least one target pass and the least fixed cost of any of them."""
    layer = 0.0
    if platform is None:
        share = max(PLATFORM_EFFICIENCY.values())
        moe = min(MOE_LAYER_S, *PLATFORM_MOE_LAYER_S.values())
    elif measured_gpu(bandwidth_gb_s, platform):  # decode_seconds: the H200's own terms
        share, moe = PLATFORM_EFFICIENCY[platform], MOE_LAYER_S
    else:
        share, moe = PLATFORM_EFFICIENCY[platform], PLATFORM_MOE_LAYER_S[platform]
        layer = PLATFORM_LAYER_S[platform]
    ks = (*DRAFT_N_CHOICES, draft_n_max) if mtp else (0,)
    drafted = [k for k in ks if k > 0]
    # mtp_cycle_seconds: k drafts cost at least k * DRAFT_S, the accepted tokens ACCEPT_S each,
    # both at the GPU's compute where it is known and the platform's share of them (any platform
    # and compute: at least nothing; any platform: the smallest share)
    c = compute_ratio(fp32_tflops)
    if platform is None:
        fixed = 0.0 if c is None else min(1.0, *PLATFORM_MTP_SHARE.values()) / c
    else:
        drafting = mtp_share(bandwidth_gb_s, platform, fp32_tflops)
        fixed = drafting if c is None else drafting / c
    cycle = (
        min(
            (k * DRAFT_S + (expected_tokens(acceptance, k) - 1.0) * ACCEPT_S for k in drafted),
            default=0.0,
        )
        * fixed
    )
    return SpeedBound(
        platform_bw=share * bandwidth_gb_s * GB,
        kernel_bw=MEASURED_GPU_BANDWIDTH_GB_S * GB,
        host_bw=HOST_EFF * host_bandwidth_gb_s * GB if experts_on_host else 0.0,
        moe_layer_seconds=0.0 if experts_on_host else moe,
        layer_seconds=layer,
        # decode_seconds adds llama-server's cost to every step (estimate_speed's server=True)
        fixed_seconds=SERVER_S,
        expected=max(expected_tokens(acceptance, n) for n in drafted or ks),
        base_cost=1.0,
        # no draft cost: the stored draft bytes count an MoE MTP block's idle experts, which a
        # draft pass does not read
        draft_n_max=0,
        cycle_seconds=cycle,
        plain=1.0 if drafted and 0 in ks else 0.0,
    )


def speed_bound_sql(spec: RunSpec, budget: Budget) -> tuple[str, dict[str, Any]]:
    """(expression, params): crawler.ranking.speed_bound.SpeedBound.tok_s over the quants' columns,
    an upper bound of the estimated tok/s, for ``--sort speed`` (needs the GPU's bandwidth)."""
    if budget.bandwidth_gb_s is None:
        raise ValueError("--sort speed needs the GPU's bandwidth")
    if spec.mtp_auto and not spec.mtp:
        # MTP may be on or off per quant (crawler.fit.choose): the larger of both bounds where
        # the quant's head may draft (crawler.ranking.evaluate.mtp_usable needs both verdicts),
        # else MTP stays off.
        on, on_params = _speed_bound_sql(dataclasses.replace(spec, mtp=True), budget, "_on")
        off, off_params = _speed_bound_sql(spec, budget, "")
        return (
            f"(CASE WHEN {HEAD_MAY_DRAFT_SQL} AND {on} > {off} THEN {on} ELSE {off} END)",
            {**off_params, **on_params},
        )
    return _speed_bound_sql(spec, budget, "")


def speed_bound_for(spec: RunSpec, budget: Budget) -> SpeedBound:
    """The SpeedBound of a search: the GPU's platform and the MTP acceptance (as
    crawler.ranking.evaluate.speed_of estimates), and the experts possibly in host memory
    wherever a configuration ``spec`` resolves to may keep them there (--cpu-moe, or a tier
    above gpu: crawler.fit.tiers)."""
    assert budget.bandwidth_gb_s is not None
    return speed_bound(
        budget.bandwidth_gb_s,
        mtp=spec.mtp,
        draft_n_max=spec.spec_draft_n_max,
        experts_on_host=spec.cpu_moe or spec.tier != "gpu",
        acceptance=spec.mtp_acceptance,
        platform=gpu_platform(budget.gpu_name),
        fp32_tflops=budget.fp32_tflops,
    )


def _speed_bound_sql(spec: RunSpec, budget: Budget, sfx: str) -> tuple[str, dict[str, Any]]:
    b = speed_bound_for(spec, budget)
    rb, layers = "COALESCE(q.fit_read_bytes, 0)", "COALESCE(q.fit_moe_layers, 0)"
    # SpeedBound.rate: max(min(platform, type_eff * kernel), host); NULL type_eff: the fastest.
    kernel = f"COALESCE(q.fit_type_eff, :speed_eff{sfx}) * :speed_kernel{sfx}"
    device = (
        f"(CASE WHEN {kernel} < :speed_platform{sfx} THEN {kernel} ELSE :speed_platform{sfx} END)"
    )
    rate = f"(CASE WHEN {device} > :speed_host{sfx} THEN {device} ELSE :speed_host{sfx} END)"
    trunk = "COALESCE(q.fit_trunk_layers, 0)"
    seconds = (
        f"({rb} / {rate} + {layers} * :speed_tau{sfx} + {trunk} * :speed_layer{sfx}"
        f" + :speed_fixed{sfx})"
    )
    cost = (
        f"(:speed_base{sfx} + :speed_k{sfx} * COALESCE(q.fit_draft_bytes, 0) / ({rb} + 1.0)"
        f" + :speed_verify{sfx} * COALESCE(q.fit_verify_experts, 0.0))"
    )
    tok = f"(:speed_expected{sfx} / {cost}) / ({seconds} + :speed_cycle{sfx})"
    if b.plain:  # MTP may also run undrafted (--spec-draft-n-max 0): the larger of both
        plain = f"(:speed_plain{sfx} / {seconds})"
        tok = f"(CASE WHEN {plain} > {tok} THEN {plain} ELSE {tok} END)"
    expr = f"CASE WHEN {seconds} <= 0 THEN 1e300 ELSE {tok} * :speed_slack{sfx} END"
    return expr, {
        f"speed_platform{sfx}": b.platform_bw,
        f"speed_kernel{sfx}": b.kernel_bw,
        f"speed_eff{sfx}": FASTEST_TYPE_EFFICIENCY,
        f"speed_host{sfx}": b.host_bw,
        f"speed_tau{sfx}": b.moe_layer_seconds,
        f"speed_layer{sfx}": b.layer_seconds,
        f"speed_fixed{sfx}": b.fixed_seconds,
        f"speed_base{sfx}": b.base_cost,
        f"speed_k{sfx}": float(b.draft_n_max),
        f"speed_verify{sfx}": 1.0 if b.draft_n_max >= VERIFY_EXPERTS_K else 0.0,
        f"speed_expected{sfx}": b.expected,
        f"speed_cycle{sfx}": b.cycle_seconds,
        **({f"speed_plain{sfx}": b.plain} if b.plain else {}),
        f"speed_slack{sfx}": SPEED_BOUND_SLACK,
    }
