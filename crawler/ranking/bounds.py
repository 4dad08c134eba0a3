"""The memory and sort-value bounds of a search, each beside its SQL twin (pure: no I/O).

Side by side and tested as pairs, so the SQL prefilter never drops a quant that fits.
Details: docs/internals/ranking.md#bounds
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from crawler.fit import MemoryCoefficients, cache_type
from crawler.fit.cuda import (
    CUDA_CONTEXT_BYTES,
    LAZY_KERNELS_BYTES,
    PAGE_ROUNDING_BYTES,
    RUNTIME_FLOOR_BYTES,
    context_floor_per_ubatch,
)
from crawler.ranking import partial_bound as pb
from crawler.ranking.model import HEAD_MAY_DRAFT_SQL, MIN_CTX, Budget, RunSpec
from crawler.ranking.swa_bound import fixed_bytes_sql, swa_surplus_bytes

__all__ = [
    "BoundTerms",
    "bound_sql",
    "ctx_bound_sql",
    "host_lower_bound_bytes",
    "ladder_savings_bytes",
    "lower_bound_bytes",
    "margin_bound_sql",
    "margin_upper_bound",
    "prefilter_terms",
    "ram_bound_sql",
    "ram_may_fit",
]

#: Mask bytes per context token of the FA-on compute buffer at ubatch 512 (llamacpp-cuda-oracle.md
#: section 3.1: ``n_ctx * ubatch * 2``): part of the SQL prefilter's lower bound.
_MASK_BYTES_PER_TOKEN = 512 * 2


def lower_bound_bytes(c: MemoryCoefficients, spec: RunSpec) -> int:
    """A lower bound of ``estimate(c, cfg).total`` for any config ``spec`` can resolve to.

    Built only from the catalog's scalar columns, so SQL can apply the same bound; a quant above it
    cannot fit, one below it gets the exact estimate. Terms: weights (experts unless --cpu-moe,
    the MTP block and its draft KV cache with --mtp), KV per token at the cheapest cache type
    allowed, the fixed cache bytes (SWA cells capped at the context's: crawler.ranking.swa_bound),
    the compute and runtime floor per ubatch token
    (crawler.fit.cuda.context_floor_per_ubatch), and the constants: CUDA context, lazily
    loaded kernels, page rounding, the runtime's smallest pool and the FA mask.
    """
    t = prefilter_terms(spec)
    if _partial(spec):
        # -ngl 0 keeps no weights or caches on the GPU: only the compute floor and constants.
        return context_floor_per_ubatch(c) * t.ubatch + t.constant
    experts_on_gpu = _experts_on_gpu(spec)
    total = c.weights_bytes + (c.expert_bytes if experts_on_gpu else 0)
    if spec.mtp:
        total += c.mtp_weights_bytes + int(c.mtp_kv_bytes_per_token_f16 * t.ctx * t.mtp_kv_ratio)
    total += int(c.kv_bytes_per_token_f16 * t.ctx * t.kv_ratio)
    swa = swa_surplus_bytes(c.swa_bytes_per_cell_f16, c.swa_cells, t.ctx, t.ubatch)
    total += int((c.fixed_bytes_f16 - swa) * t.fixed_ratio)
    total += context_floor_per_ubatch(c) * t.ubatch
    return total + t.constant


def host_lower_bound_bytes(c: MemoryCoefficients) -> int:
    """A lower bound of the host bytes (FitEstimate.host_bytes) of any configuration that keeps
    every routed expert of the trunk on the host (``--cpu-moe``).

    crawler.fit.estimate adds each such layer's expert tensor bytes to the input embedding and
    the pinned buffers. Those bytes are the layer's device bytes (``expert_bytes`` sums them)
    less the CUDA buffer's row padding and alignment of each tensor
    (crawler.fit.cache.cuda_alloc_bytes: at most 511 elements of row padding, under 512 B for
    every quantized type, and 127 B of alignment; a layer has a few expert tensors), so
    ``_HOST_EXPERT_SLACK`` a MoE layer covers it. Built from catalog columns (``fit_expert_bytes``,
    ``fit_moe_layers``) so SQL can apply it; 0 where the coefficients list no expert layers
    (the estimate then moves nothing to the host)."""
    layers = sum(1 for il, _d, _h in c.expert_layers if il < c.n_layer)
    if layers == 0:
        return 0
    return max(0, c.expert_bytes - layers * _HOST_EXPERT_SLACK)


#: Per MoE layer, above the padding and alignment of its expert tensors' device bytes over their
#: tensor bytes (host_lower_bound_bytes).
_HOST_EXPERT_SLACK = 1 << 16


def ram_may_fit(c: MemoryCoefficients, spec: RunSpec, budget: Budget) -> bool:
    """False only when no configuration ``spec`` can resolve to is within ``--ram`` and the
    device together (crawler.fit.tiers.choose_tier checks both): with ``--cpu-moe`` every one
    keeps the experts on the host; under ``--tier experts_cpu`` a quant either fits the GPU
    whole (the gpu tier's lower_bound_bytes) or runs with ``--cpu-moe``."""
    rule = _ram_rule(spec, budget)
    if rule is None or budget.ram_bytes is None:
        return True
    if host_lower_bound_bytes(c) <= budget.ram_bytes:
        return True
    whole = dataclasses.replace(spec, tier="gpu")
    return rule == "experts_cpu" and lower_bound_bytes(c, whole) <= budget.device_bytes


def _ram_rule(spec: RunSpec, budget: Budget) -> str | None:
    """Which configurations the search may try when ``--ram`` can exclude some (else None):
    "cpu_moe" (all keep every expert on the host) or "experts_cpu" (whole on the GPU, or with
    --cpu-moe). Not for layer offload (--tier partial, -ngl N), --n-cpu-moe or several GPUs."""
    if budget.ram_bytes is None or budget.devices or spec.n_gpu_layers is not None:
        return None
    if spec.n_cpu_moe or spec.tier == "partial":
        return None
    if spec.cpu_moe:
        return "cpu_moe"
    return "experts_cpu" if spec.tier == "experts_cpu" else None


def margin_upper_bound(
    c: MemoryCoefficients, spec: RunSpec, budget: Budget, *, head: bool = True
) -> int:
    """An upper bound of the margin (budget less the estimate) ``spec`` can give ``c``.

    In general the budget less lower_bound_bytes. With the default per-quant cache
    (_ladder_margin_applies) tighter: the search takes the first cache step that fits,
    so either f16 fits (margin <= budget - the f16 lower bound), or f16 did not fit and a cheaper
    step can free at most what its cache saves over f16 (ladder_savings_bytes).
    Under ``--tier experts_cpu`` the whole model comes first (_whole_first; ``head``: the
    quant's MTP head may draft, i.e. its mtp_present and mtp_preserved verdicts).
    Under ``--tier partial`` (-ngl auto, one GPU, one slot) the larger of the experts_cpu
    tier's bound (the whole model, then its experts in RAM) and the layer offload's
    (crawler.ranking.partial_bound.layout_margin_bound).
    """
    if pb.partial_margin_applies(spec, budget):
        whole = margin_upper_bound(c, _experts_cpu(spec), budget, head=head)
        return max(whole, pb.layout_margin_bound(c, spec, budget, lower_bound_bytes(c, spec)))
    loose = budget.device_bytes - lower_bound_bytes(c, spec)
    if not _ladder_margin_applies(spec, budget, margin=True):
        return loose
    first = budget.device_bytes - lower_bound_bytes(c, _f16(spec))
    ladder = max(first, min(loose, ladder_savings_bytes(c, spec)))
    if not _whole_first(spec, budget, head):
        return ladder
    on_gpu = margin_upper_bound(c, _gpu(spec), budget)
    return max(on_gpu, min(ladder, c.expert_bytes))


def _whole_first(spec: RunSpec, budget: Budget, head: bool) -> bool:
    """Whether the experts_cpu margin is at most the larger of the gpu tier's bound and the
    smaller of the experts_cpu bound and ``expert_bytes``: under ``--tier experts_cpu`` (or
    partial's first two tiers) without --cpu-moe / --n-cpu-moe, with the ladder's conditions,
    and without ``--ram``, MTP auto or a head that may draft.

    Why: the tier (crawler.fit.tiers.choose_tier) takes the whole model if a cache step fits it
    (the gpu tier's bound), else the experts in RAM at the first step whose plain (no MTP)
    trial fits (an MTP trial there only adds bytes: crawler.fit.choose). At one step both
    estimates hold the same cache, recurrent state, compute and overhead but for the trunk
    experts' device bytes (``expert_bytes``: crawler.fit.layout sums those tensors) off the GPU
    and ``expert_copy_bytes`` >= 0 added to the compute buffer; the whole model did not fit
    there, so that margin is below ``expert_bytes``. A whole model that fits with its host bytes
    over --ram sends the search on only where the experts in RAM need fewer: never at FA on
    (same pinned buffers at every step, the experts' host bytes added) unless the whole model
    ran with the MTP draft context's buffers and the experts in RAM without them."""
    return (
        spec.tier == "experts_cpu"
        and not spec.cpu_moe
        and spec.n_cpu_moe == 0
        and (budget.ram_bytes is None or not spec.mtp_auto or not head)
    )


def ladder_savings_bytes(c: MemoryCoefficients, spec: RunSpec) -> int:
    """At most how many bytes a cheaper cache step saves over f16/f16 (FA on, one sequence,
    ubatch <= 512; crawler.fit.estimate): the K/V tensors shrink by the cheapest type's ratio
    (n_ctx padded up to 256; SWA cells as in ``fixed_bytes_f16``; each tensor's 128-byte
    alignment in the slack); the compute buffer only grows (FA's f16 copies of a quantized
    cache) and the rest does not depend on the cache type."""
    t = prefilter_terms(spec)
    per_token, fixed = c.kv_bytes_per_token_f16, c.fixed_bytes_f16
    return int((per_token * (t.ctx + 255) + fixed) * (1.0 - t.kv_ratio)) + _LADDER_SLACK


#: Per-tensor alignment and rounding in ladder_savings_bytes (far above 2 x 128 B x the
#: cache tensors of any model).
_LADDER_SLACK = 1 << 20


def _experts_cpu(spec: RunSpec) -> RunSpec:
    """The tiers before the layer offload: the whole model, then its experts in RAM."""
    return dataclasses.replace(spec, tier="experts_cpu")


def _gpu(spec: RunSpec) -> RunSpec:
    """The whole model on the GPU (the first configuration the experts_cpu tier tries)."""
    return dataclasses.replace(spec, tier="gpu")


def _f16(spec: RunSpec) -> RunSpec:
    return dataclasses.replace(spec, auto_cache=False, type_k="f16", type_v="f16")


def _ladder_margin_applies(spec: RunSpec, budget: Budget, *, margin: bool = False) -> bool:
    """The per-quant cache ladder's bound holds: automatic cache, FA on (auto is on), one slot,
    ubatch <= 512, everything on one GPU, MTP not required (crawler.fit.choose). For the margin
    also under ``--tier experts_cpu``: it tries the model whole on the GPU, then with its experts
    in RAM (crawler.fit.tiers.choose_tier), each time taking the first cache step that fits, and
    the lower bound already leaves the experts out."""
    return (
        spec.auto_cache
        and not spec.mtp
        and spec.flash_attn != "off"
        and spec.parallel == 1
        and spec.ubatch <= 512
        and (spec.tier == "gpu" or (margin and spec.tier == "experts_cpu"))
        and spec.n_gpu_layers is None
        and not budget.devices
    )


@dataclass(frozen=True, slots=True)
class BoundTerms:
    """The per-search factors of lower_bound_bytes (the catalog's SQL applies them)."""

    ctx: int
    kv_ratio: float  # bytes per element of the cheapest allowed cache type / f16's 2
    fixed_ratio: float  # the same for the context-independent cache bytes, at most 1
    mtp_kv_ratio: float  # the cheapest allowed MTP draft cache type / f16 (0 without --mtp)
    ubatch: int  # llama.cpp's ubatch at this context: min(n_ubatch 512, n_batch, n_ctx)
    constant: int  # the constants below plus the FA mask at ctx

    #: The constant without the mask: CUDA context, lazily loaded kernels, page rounding, and
    #: the runtime's smallest pool.
    base_constant: ClassVar[int] = (
        CUDA_CONTEXT_BYTES + LAZY_KERNELS_BYTES + PAGE_ROUNDING_BYTES + RUNTIME_FLOOR_BYTES
    )
    #: The FA mask's bytes per context token, counted from ctx 512 on.
    mask_per_token: int = _MASK_BYTES_PER_TOKEN


def prefilter_terms(spec: RunSpec) -> BoundTerms:
    """The factors of lower_bound_bytes for ``spec``."""
    ctx = spec.ctx or MIN_CTX
    if spec.auto_cache:
        names = [n for pair in _auto_ladder() for n in pair]
    else:
        names = [spec.type_k, spec.type_v]
    ratio = _cheapest_ratio(names)
    # Draft cache: llama-server's default f16 (-ctkd/-ctvd), or what --auto-cache may pick
    # (crawler.fit.cheapest_cache_for tries q8_0 and q4_0 drafts).
    base = spec.base_config()
    drafts = [base.type_k_draft, base.type_v_draft] + (["q8_0", "q4_0"] if spec.auto_cache else [])
    # The mask is n_kv x ubatch (f16 with FA, f32 without): a smaller -ub shrinks it. With
    # per-slot caches (--parallel N) n_kv is one stream's cells, at least ctx / N of them
    # (crawler.fit.estimate splits the padded context over the streams).
    streams = spec.parallel if spec.parallel is not None and spec.parallel > 1 else 1
    mask_per_token = _MASK_BYTES_PER_TOKEN * min(base.ubatch, 512) // 512 // streams
    mask = ctx * mask_per_token if ctx >= 512 else 0
    return BoundTerms(
        ctx=ctx,
        kv_ratio=ratio,
        fixed_ratio=min(1.0, ratio),
        mtp_kv_ratio=_cheapest_ratio(drafts) if spec.mtp else 0.0,
        # n_ctx >= ctx (llama.cpp pads it up), so this is at most the estimate's ubatch.
        ubatch=min(base.ubatch, base.batch, ctx),
        constant=BoundTerms.base_constant + mask,
        mask_per_token=mask_per_token,
    )


def _partial(spec: RunSpec) -> bool:
    """Some layers may stay in host memory (``--tier partial`` or a pinned ``-ngl N``)."""
    return spec.tier == "partial" or spec.n_gpu_layers is not None


def _experts_on_gpu(spec: RunSpec) -> bool:
    """Every routed expert is on the GPU in every configuration ``spec`` can resolve to."""
    return not spec.cpu_moe and spec.n_cpu_moe == 0 and spec.tier == "gpu"


def _cheapest_ratio(names: Sequence[str]) -> float:
    # kv_bytes_per_token_f16 counts 2 bytes per element
    return min(cache_type(n).type_size / cache_type(n).blck for n in names) / 2.0


def _auto_ladder() -> tuple[tuple[str, str], ...]:
    from crawler.fit import CACHE_LADDER

    return CACHE_LADDER


# --- the SQL twins: the same bounds over the catalog's quants.fit_* columns (alias q) ---------


def bound_sql(spec: RunSpec, budget: Budget) -> tuple[str, dict[str, Any]]:
    """(expression, params): lower_bound_bytes over the quants' ``fit_*`` columns less
    its constant, which the condition ``expression <= :bound_limit`` accounts for.

    Those are copies of ``memory_models``' scalar columns, NULL unless its status is "ok", so the
    comparison is not true for unmodelled quants and the search indexes cover it. Floats on
    purpose: they keep SQLite and PostgreSQL integer rules out of the comparison.
    """
    t = prefilter_terms(spec)
    fixed, per_token, params = _bound_terms(spec)
    params.update(bound_ctx=float(t.ctx), bound_limit=float(budget.device_bytes - t.constant))
    return f"{fixed} + ({per_token}) * :bound_ctx", params


def ram_bound_sql(spec: RunSpec, budget: Budget) -> tuple[str, dict[str, Any]] | None:
    """(condition, params): ram_may_fit over the quants' ``fit_*`` columns, true for a quant
    ``--ram`` may leave room for; None where it excludes nothing (no --ram, or a tier it does
    not bound). It reads only search-shape columns: the catalog tests it once per shape."""
    rule = _ram_rule(spec, budget)
    if rule is None or budget.ram_bytes is None:
        return None
    layers = "COALESCE(q.fit_moe_layers, 0)"
    host = (
        f"(CASE WHEN {layers} > 0 THEN COALESCE(q.fit_expert_bytes, 0) - {layers} * :ram_slack"
        " ELSE 0.0 END)"
    )
    params: dict[str, Any] = {
        "ram_slack": float(_HOST_EXPERT_SLACK),
        "ram_limit": float(budget.ram_bytes),
    }
    ok = f"{host} <= :ram_limit"
    if rule == "experts_cpu":
        whole = dataclasses.replace(spec, tier="gpu")
        fixed, per_token, whole_params = _bound_terms(whole, "_whole")
        t = prefilter_terms(whole)
        params.update(
            whole_params,
            ram_whole_ctx=float(t.ctx),
            ram_whole_limit=float(budget.device_bytes - t.constant),
        )
        ok = f"({ok} OR {fixed} + ({per_token}) * :ram_whole_ctx <= :ram_whole_limit)"
    return ok, params


def margin_bound_sql(spec: RunSpec, budget: Budget) -> tuple[str, dict[str, Any]]:
    """(expression, params): margin_upper_bound over the quants' columns, for
    ``--sort margin`` (+1 byte absorbs the float sums' rounding)."""
    if pb.partial_margin_applies(spec, budget):
        whole, params = margin_bound_sql(_experts_cpu(spec), budget)
        floor_fixed, _per_token, floor_params = _bound_terms(spec, "_ps")
        layout, layout_params = pb.layout_margin_sql(
            spec, budget, floor_fixed, prefilter_terms(spec).constant
        )
        params = {**params, **floor_params, **layout_params}
        return f"(CASE WHEN {whole} > {layout} THEN {whole} ELSE {layout} END)", params
    t = prefilter_terms(spec)
    fixed, per_token, params = _bound_terms(spec)
    params.update(m_room=float(budget.device_bytes - t.constant + 1), m_ctx=float(t.ctx))
    loose = f"(:m_room - ({fixed} + ({per_token}) * :m_ctx))"
    if not _ladder_margin_applies(spec, budget, margin=True):
        return loose, params
    f16_fixed, f16_per_token, f16_params = _bound_terms(_f16(spec), "_f16")
    params.update(f16_params, m_save=1.0 - t.kv_ratio, m_pad=float(t.ctx + 255))
    params["m_slack"] = float(_LADDER_SLACK + 1)
    first = f"(:m_room - ({f16_fixed} + ({f16_per_token}) * :m_ctx))"
    savings = (
        "((COALESCE(q.fit_kv_per_token, 0) * :m_pad + COALESCE(q.fit_fixed_bytes, 0))"
        " * :m_save + :m_slack)"
    )
    lower = f"(CASE WHEN {loose} < {savings} THEN {loose} ELSE {savings} END)"
    ladder = f"(CASE WHEN {first} > {lower} THEN {first} ELSE {lower} END)"
    if not _whole_first(spec, budget, head=False):
        return ladder, params
    on_gpu, gpu_params = margin_bound_sql(_gpu(spec), budget)
    params = _merged(params, gpu_params)
    # NULL for unmodelled quants, as the other terms; +1 byte as m_room's
    experts = "(q.fit_weights_bytes * 0.0 + COALESCE(q.fit_expert_bytes, 0) + 1.0)"
    # max(on_gpu, min(ladder, experts)), written with each bound twice, not four times: the
    # gpu tier's bound is at most the ladder's (its lower bound adds the experts' bytes)
    above = f"(CASE WHEN {on_gpu} > {experts} THEN {on_gpu} ELSE {experts} END)"
    tight = f"(CASE WHEN {ladder} < {experts} THEN {ladder} ELSE {above} END)"
    if _whole_first(spec, budget, head=True):
        return tight, params
    return f"(CASE WHEN {HEAD_MAY_DRAFT_SQL} THEN {ladder} ELSE {tight} END)", params


def _merged(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two bounds' parameters in one statement: a name both use must hold one value."""
    clash = [k for k in a.keys() & b.keys() if a[k] != b[k]]
    if clash:
        raise ValueError(f"bound parameters clash: {sorted(clash)}")
    return {**a, **b}


def ctx_bound_sql(spec: RunSpec, budget: Budget) -> tuple[str, dict[str, Any]]:
    """(expression, params): an upper bound of the largest context that fits
    (crawler.ranking.evaluate.with_max_ctx), for ``--sort ctx``.

    At the largest context ``n`` that fits, the lower bound is within the budget:
    ``fixed + n * (per_token + mask) <= budget - constants`` once ``n >= 512`` (the FA mask
    counts from there), so ``n <= max(512, room / (per_token + mask))``; and ``n`` is capped
    at the trained context (1 Mi tokens when unknown) or the requested one, whichever is larger.

    With the per-quant cache ladder (as margin_upper_bound): either f16 fits at the
    requested context (the f16 bound), or a cheaper step was taken and then the context can grow
    only until the K/V it adds (at least the cheapest type's ratio of f16 per token) uses up what
    that step saved over f16 (ladder_savings_bytes).

    Under ``--tier partial`` (-ngl auto, one GPU) the larger of the experts_cpu tier's bound
    (the whole model, then its experts in RAM) and the context asked for (a layer offload's).
    """
    if pb.partial_ctx_applies(spec, budget):
        whole, params = ctx_bound_sql(_experts_cpu(spec), budget)
        params["ps_ctx"] = float(pb.layout_ctx(spec))
        layout = "(q.fit_weights_bytes * 0.0 + :ps_ctx)"  # NULL for unmodelled quants
        return f"(CASE WHEN {whole} > {layout} THEN {whole} ELSE {layout} END)", params
    expr, params = _ctx_bound(spec, budget, "")
    if not _ladder_margin_applies(spec, budget):
        return expr, params
    t = prefilter_terms(spec)
    f16_expr, f16_params = _ctx_bound(_f16(spec), budget, "_f16")
    params.update(
        f16_params,
        cx_save=1.0 - t.kv_ratio,
        cx_pad=float(t.ctx + 255),
        cx_slack=float(_LADDER_SLACK),
        cx_ratio=t.kv_ratio,
        cx_ctx=float(t.ctx + 256),
    )
    kv = "COALESCE(q.fit_kv_per_token, 0)"
    saved = f"(({kv} * :cx_pad + COALESCE(q.fit_fixed_bytes, 0)) * :cx_save + :cx_slack)"
    reach = f"(CASE WHEN {kv} > 0 THEN :cx_ctx + {saved} / ({kv} * :cx_ratio) ELSE 1e300 END)"
    lower = f"(CASE WHEN {expr} < {reach} THEN {expr} ELSE {reach} END)"
    return f"(CASE WHEN {f16_expr} > {lower} THEN {f16_expr} ELSE {lower} END)", params


def _ctx_bound(spec: RunSpec, budget: Budget, sfx: str) -> tuple[str, dict[str, Any]]:
    t = prefilter_terms(spec)
    fixed, per_token, params = _bound_terms(spec, sfx)
    cfg_ctx = float(t.ctx)
    params.update(
        ctx_room=float(budget.device_bytes - t.base_constant),
        ctx_mask=float(t.mask_per_token),
        ctx_cfg=cfg_ctx,
        ctx_untrained=max(float(1 << 20), cfg_ctx),
    )
    room = f"(:ctx_room - ({fixed})) / ({per_token} + :ctx_mask)"
    cap = (
        "CASE WHEN COALESCE(q.fit_ctx_train, 0) <= 0 THEN :ctx_untrained"
        " WHEN q.fit_ctx_train < :ctx_cfg THEN :ctx_cfg"
        " ELSE CAST(q.fit_ctx_train AS DOUBLE PRECISION) END"
    )
    return (
        f"(CASE WHEN {room} < 512.0 THEN 512.0 WHEN {room} < {cap} THEN {room} ELSE {cap} END)",
        params,
    )


def _bound_terms(spec: RunSpec, sfx: str = "") -> tuple[str, str, dict[str, Any]]:
    """(context-independent bytes, bytes per context token, params) of the lower bound; ``sfx``
    names its parameters apart when one statement holds two bounds."""
    t = prefilter_terms(spec)
    if _partial(spec):  # lower_bound_bytes: only the compute floor
        # (q.fit_weights_bytes * 0 keeps the bound NULL for unmodelled quants, as below)
        fixed_sql = (
            f"q.fit_weights_bytes * 0.0 + COALESCE(q.fit_ubatch_bytes, 0) * :bound_ubatch{sfx}"
        )
        return fixed_sql, "0.0", {f"bound_ubatch{sfx}": float(t.ubatch)}
    fixed = ["q.fit_weights_bytes"]
    per_token = [f"COALESCE(q.fit_kv_per_token, 0) * :bound_kv{sfx}"]
    params: dict[str, Any] = {
        f"bound_kv{sfx}": float(t.kv_ratio),
        f"bound_fixed{sfx}": float(t.fixed_ratio),
    }
    if _experts_on_gpu(spec):
        fixed.append("COALESCE(q.fit_expert_bytes, 0)")
    if spec.mtp:
        fixed.append("COALESCE(q.fit_mtp_bytes, 0)")
        per_token.append(f"COALESCE(q.fit_mtp_kv_per_token, 0) * :bound_mtp{sfx}")
        params[f"bound_mtp{sfx}"] = float(t.mtp_kv_ratio)
    fixed_bytes, swa_params = fixed_bytes_sql(t.ctx, t.ubatch, sfx)
    fixed.append(f"{fixed_bytes} * :bound_fixed{sfx}")
    params.update(swa_params)
    fixed.append(f"COALESCE(q.fit_ubatch_bytes, 0) * :bound_ubatch{sfx}")
    params[f"bound_ubatch{sfx}"] = float(t.ubatch)
    return " + ".join(fixed), " + ".join(per_token), params
