"""The --tier partial margin and context bounds' layer-offload part (pure: no I/O).

-ngl auto leaves less room than one more layer would take; its context is the one asked for.
Details: docs/internals/ranking.md#partial_bound
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from crawler.fit import MemoryCoefficients, cache_type
from crawler.fit.cache import CUDA_ALIGNMENT, MATRIX_ROW_PADDING, pad
from crawler.fit.choose import trials
from crawler.fit.offload import layer_weights
from crawler.ranking.model import MIN_CTX, Budget, RunSpec

__all__ = [
    "SlotTerms",
    "layout_ctx",
    "layout_margin_bound",
    "layout_margin_sql",
    "partial_ctx_applies",
    "partial_margin_applies",
    "slot_terms",
]


@dataclass(frozen=True, slots=True)
class SlotTerms:
    """What bounds one trunk layer's share of the GPU under -ngl (quants.fit_slot_* and
    fit_resident_bytes store them)."""

    slot_bytes: int  # the largest trunk layer's weights, experts and recurrent state on the GPU
    slot_kv_per_token: int  # the largest trunk layer's K+V bytes per cache cell at f16
    resident_bytes: int  # device weights no trunk layer holds (output, tied embedding copy)


def slot_terms(c: MemoryCoefficients) -> SlotTerms:
    """The SlotTerms of ``c``, over what crawler.fit.offload.estimate_offload moves with a trunk
    layer: its non-expert and expert device bytes, and its K+V (V padded to the widest V, as
    without flash attention) or its recurrent state (one sequence, no MTP); coefficients
    without a per-layer cache index spread the caches evenly, as the estimate does."""
    layers = layer_weights(c)
    experts = {il: d for il, d, _h in c.expert_layers}
    recurrent = pad(c.recurrent_r * 4, CUDA_ALIGNMENT) + pad(c.recurrent_s * 4, CUDA_ALIGNMENT)

    def kv_width(k: int, v: int) -> int:
        return 2 * (k + (max(v, c.v_width_max) if v else 0))

    indexed = len(c.kv_layer_group) >= c.n_layer
    slot_bytes = slot_kv = moved = 0
    for il in range(c.n_layer):
        weights = layers.get(il, (0, 0))[0] + experts.get(il, 0)
        moved += weights
        gi = c.kv_layer_group[il] if il < len(c.kv_layer_group) else -2
        if gi >= 0:
            g = c.kv_groups[gi]
            slot_kv = max(slot_kv, kv_width(g.k_width, g.v_width))
        elif gi == -1:
            weights += recurrent
        slot_bytes = max(slot_bytes, weights)
    if not indexed and c.n_layer:  # (kv + recurrent) // n_layer each (offload's old path)
        per_cell = sum(g.count * kv_width(g.k_width, g.v_width) for g in c.kv_groups)
        slot_kv = max(slot_kv, math.ceil(per_cell / c.n_layer))
        slot_bytes += math.ceil(c.recurrent_layers * recurrent / c.n_layer)
    resident = c.weights_bytes + c.expert_bytes - moved
    return SlotTerms(slot_bytes, slot_kv, max(0, resident))


def partial_margin_applies(spec: RunSpec, budget: Budget) -> bool:
    """--tier partial with -ngl auto on one GPU and one slot: the search tries the whole model,
    then its experts in RAM (the experts_cpu tier's bound covers both), then the most layers
    that fit (crawler.fit.tiers.choose_tier), whose margin layout_margin_bound bounds."""
    return partial_ctx_applies(spec, budget) and spec.parallel == 1


def partial_ctx_applies(spec: RunSpec, budget: Budget) -> bool:
    """--tier partial with -ngl auto on one GPU: a layer-offload result's largest context is the
    one asked for (crawler.ranking.evaluate.with_max_ctx)."""
    return spec.tier == "partial" and spec.n_gpu_layers is None and not budget.devices


def layout_ctx(spec: RunSpec) -> int:
    """The context of every layer-offload configuration of ``spec``."""
    return spec.ctx or MIN_CTX


def layout_margin_bound(c: MemoryCoefficients, spec: RunSpec, budget: Budget, floor: int) -> int:
    """An upper bound of the margin of the layer-offload configuration ``spec`` resolves to.

    -ngl auto (crawler.fit.offload.auto_gpu_layers) ends on N slots that fit where N + 1 do not
    (N >= 1, fewer than all): the margin is below what slot N + 1 adds, at most its layer's
    weights, experts, recurrent state and K+V (the op-offload copy area only shrinks as layers
    join the GPU). And the GPU keeps the resident weights and at least the compute and runtime
    floor (``floor``: the partial tier's lower_bound_bytes), so the margin is at most the
    budget less both."""
    t = slot_terms(c)
    room = budget.device_bytes - floor - t.resident_bytes
    return min(room, _slot_bound(t, spec))


def _slot_bound(t: SlotTerms, spec: RunSpec) -> int:
    per_cell, cells = _layout_cache(spec)
    return t.slot_bytes + int(t.slot_kv_per_token * per_cell * cells) + _SLOT_SLACK


def _layout_cache(spec: RunSpec) -> tuple[float, int]:
    """(bytes per f16 byte of the layout's dearest cache type, cells per layer): the cheapest
    trial's types (the layout's, crawler.fit.tiers), its context padded to 256."""
    cfg = list(trials(spec.base_config(), auto_cache=spec.auto_cache, mtp="off", mtp_usable=False))
    cheapest = cfg[-1]
    per = max(
        cache_type(n).type_size / cache_type(n).blck for n in (cheapest.type_k, cheapest.type_v)
    )
    return per / 2.0, pad(cheapest.ctx, 256)


#: Per slot: each K and V tensor's padding row and alignment
#: (crawler.fit.estimate._kv_tensor_bytes: at most MATRIX_ROW_PADDING f32 elements and
#: CUDA_ALIGNMENT bytes), for the most tensors a slot's spread caches hold, and float rounding.
_SLOT_SLACK = 1 << 20
assert _SLOT_SLACK > 64 * 2 * (MATRIX_ROW_PADDING * 4 + CUDA_ALIGNMENT)


def layout_margin_sql(
    spec: RunSpec, budget: Budget, floor_fixed: str, floor_constant: int
) -> tuple[str, dict[str, Any]]:
    """(expression, params): layout_margin_bound + 1 byte over the quants' columns, given the
    floor's per-quant SQL and its constant; NULL for unmodelled quants (fit_weights_bytes)."""
    per_cell, cells = _layout_cache(spec)
    params: dict[str, Any] = {
        "ps_room": float(budget.device_bytes - floor_constant + 1),
        "ps_kv": per_cell * cells,
        "ps_slack": float(_SLOT_SLACK + 1),
    }
    room = (
        f"(q.fit_weights_bytes * 0.0 + :ps_room - ({floor_fixed})"
        " - COALESCE(q.fit_resident_bytes, 0))"
    )
    slot = "(q.fit_slot_bytes + COALESCE(q.fit_slot_kv_per_token, 0) * :ps_kv + :ps_slack)"
    return (
        f"(CASE WHEN q.fit_slot_bytes IS NOT NULL AND {slot} < {room} THEN {slot} ELSE {room} END)",
        params,
    )
