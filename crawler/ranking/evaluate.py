"""One candidate's evaluation (pure: no I/O): the configuration it runs with, its estimate,
margin, largest context, quality and speed, and the finished row with its commands.
Details: docs/internals/ranking.md#evaluate
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from crawler.base.errors import EstimateError
from crawler.base.records import replaced
from crawler.fit import FitEstimate, MemoryCoefficients, RunConfig, cache_type, estimate, max_ctx
from crawler.fit.choose import MtpMode
from crawler.fit.devices import (
    DeviceShare,
    choose_split,
    combined_estimate,
    estimate_devices,
    max_ctx_split,
)
from crawler.fit.offload import estimate_offload
from crawler.fit.tiers import choose_pinned_layers, choose_tier
from crawler.fit.vision import projector_bytes
from crawler.profile.groups import GroupStats
from crawler.ranking.commands import llama_server_command, lmstudio_command, ollama_command
from crawler.ranking.model import Budget, Candidate, Ranked, RunSpec, mtp_by_speed
from crawler.ranking.quality import QualityEstimate, QualityInputs, estimate_quality
from crawler.ranking.speed import (
    DEFAULT_ACCEPTANCE,
    DEFAULT_HOST_BANDWIDTH_GB_S,
    SpeedEstimate,
    SpeedInputs,
    estimate_speed,
    gpu_platform,
    label_type_mix,
    mix_efficiency,
)

__all__ = [
    "MTP_DECLINE_BELOW",
    "Outcome",
    "evaluate",
    "finish",
    "head_declined",
    "margin_of",
    "mtp_usable",
    "projector_device_bytes",
    "quality_of",
    "replace_ranked",
    "speed_file_inputs",
    "speed_inputs",
    "speed_of",
    "weight_bits",
    "weight_type_efficiency",
    "with_max_ctx",
    "without_head",
]


def quality_of(c: Candidate) -> QualityEstimate | None:
    """The quality estimate from the candidate's tensor groups (None when not loaded)."""
    co = c.coefficients
    if not c.groups:
        return None
    return estimate_quality(
        QualityInputs(
            groups=c.groups,
            n_expert=co.n_expert,
            n_expert_used=co.n_expert_used,
            n_embd=co.n_embd,
            n_vocab=co.n_vocab,
        )
    )


def speed_of(
    c: Candidate,
    est: FitEstimate,
    budget: Budget,
    *,
    acceptance: float = DEFAULT_ACCEPTANCE,
    choose_draft: bool = False,
) -> SpeedEstimate | None:
    """tok/s of the chosen configuration at an empty and at the configured context (None
    without the GPU's bandwidth); ``choose_draft``: the MTP draft length with the best
    predicted tok/s (crawler.ranking.speed.DRAFT_N_CHOICES) instead of the configured one."""
    if budget.bandwidth_gb_s is None:
        return None
    cfg = est.config
    output_bytes, bits, label = speed_file_inputs(c)
    x = speed_inputs(c.coefficients, cfg, output_bytes=output_bytes, bits=bits, label=label)
    x = dataclasses.replace(x, kv_bytes_full=est.kv + est.mtp_kv)
    speed = estimate_speed(
        x,
        budget.bandwidth_gb_s,
        acceptance=acceptance,
        choose_draft=choose_draft,
        platform=gpu_platform(budget.gpu_name),
        fp32_tflops=budget.fp32_tflops,
    )
    return speed if cfg.n_gpu_layers is None else _partial_speed(c, est, speed)


def speed_file_inputs(c: Candidate) -> tuple[int, float | None, str | None]:
    """What speed_of reads of a quant besides its memory model and estimate: the bytes of the
    head a token reads (``output``, else the tied ``token_embd``), the bits per weight and the
    label (ranking memoises speed_of by them and the estimate)."""
    out = c.group("output") or c.group("token_embd")
    return (out.n_bytes if out else 0, weight_bits(c.groups), c.quant_label)


def weight_bits(groups: Iterable[GroupStats]) -> float | None:
    """Storage bits per weight over the groups whose bits are known (in the order given: the
    catalog's group_name order, so the stored fit_type_eff sums alike); None without any."""
    known = [g for g in groups if g.bits is not None and g.n_params > 0]
    params = sum(g.n_params for g in known)
    return sum(g.n_bytes for g in known) * 8 / params if params else None


def weight_type_efficiency(label: str | None, groups: Iterable[GroupStats]) -> float:
    """The harmonic efficiency of the weight types speed_inputs gives a quant (its label's mix,
    else its bits' class): what quants.fit_type_eff stores for the --sort speed bound."""
    return mix_efficiency(label_type_mix(label), weight_bits(groups))


def speed_inputs(
    co: MemoryCoefficients,
    cfg: RunConfig,
    *,
    output_bytes: int = 0,
    bits: float | None = None,
    label: str | None = None,
) -> SpeedInputs:
    """What one token of ``cfg`` reads and runs, from a quant's coefficients
    (crawler.ranking.speed); the type mix is guessed from the quant ``label`` (the catalog's rows
    carry no per-type bytes), else the bits per weight pick a class."""
    attn = [g for g in co.kv_groups if not g.swa]
    swa = [g for g in co.kv_groups if g.swa]
    head = max((g.k_head for g in co.kv_groups), default=0)
    main = max(co.kv_groups, key=lambda g: g.count, default=None)
    kv_heads = main.k_width // main.k_head if main is not None and main.k_head else 0
    return SpeedInputs(
        dense_bytes=co.weights_bytes,
        expert_bytes=co.expert_bytes,
        n_expert=co.n_expert,
        n_expert_used=co.n_expert_used,
        n_moe_layers=sum(1 for il, _d, _h in co.expert_layers if il < co.n_layer),
        experts_on_host=cfg.cpu_moe,
        recurrent_bytes=co.recurrent_bytes_per_seq,
        mtp=cfg.mtp,
        mtp_bytes=co.mtp_weights_bytes,
        mtp_expert_bytes=sum(d + h for il, d, h in co.expert_layers if il >= co.n_layer),
        output_bytes=output_bytes,
        draft_n_max=cfg.spec_draft_n_max,
        bits_per_weight=bits,
        type_mix=label_type_mix(label),
        n_layer=co.n_layer,
        n_attn=sum(g.count for g in attn),
        n_swa=sum(g.count for g in swa),
        swa_window=co.n_swa,
        q_width=co.n_head * head,
        gqa_ratio=max(1, co.n_head // kv_heads) if kv_heads else 1,
        head_dim=head,
        kv_row_bytes=kv_row_bytes(co, cfg),
        cache_type=cfg.type_k,
        ctx=cfg.ctx,
    )


def kv_row_bytes(co: MemoryCoefficients, cfg: RunConfig) -> float:
    """K and V bytes of one cached token in one attention layer at the configured cache types,
    averaged over the trunk's attention layers (0 without any)."""
    n = sum(g.count for g in co.kv_groups)
    if n == 0:
        return 0.0
    k, v = cache_type(cfg.type_k), cache_type(cfg.type_v)
    rows = sum(g.count * (k.row_bytes(g.k_width) + v.row_bytes(g.v_width)) for g in co.kv_groups)
    return rows / n


def _partial_speed(c: Candidate, est: FitEstimate, speed: SpeedEstimate) -> SpeedEstimate:
    """tok/s of a partial offload: the host-resident weights are read at host bandwidth."""
    cfg = est.config
    assert cfg.n_gpu_layers is not None
    host = estimate_offload(c.coefficients, cfg.replace(n_gpu_layers=None), cfg.n_gpu_layers)
    per_token = max(1, speed.bytes_per_token)
    gpu_s = per_token / (speed.bandwidth_gb_s * 1e9)
    host_share = min(host.host_weights, per_token)
    slow_s = (per_token - host_share) / (speed.bandwidth_gb_s * 1e9) + host_share / (
        DEFAULT_HOST_BANDWIDTH_GB_S * 1e9
    )
    factor = gpu_s / slow_s
    return dataclasses.replace(
        speed, tok_s=speed.tok_s * factor, tok_s_at_ctx=speed.tok_s_at_ctx * factor
    )


#: MTP auto leaves a head off only where its predicted speed-up is below these, per kind of
#: model: 1 less the model's largest under-prediction of a speed-up on that kind's MTP rows at a
#: known acceptance, measured and published (dense: 17.3 points, an RTX 3090 row; MoE: 50
#: points, an RTX 5060 Ti row of Qwen3.6-35B-A3B; docs/models.md "Speed model"), so a head left
#: off is slower within every error seen. Between this and 1 the head runs and the search says so.
MTP_DECLINE_BELOW: dict[str, float] = {"dense": 0.82, "moe": 0.49}


def head_declined(
    spec: RunSpec, budget: Budget, c: Candidate, cfg: RunConfig, speed: SpeedEstimate | None
) -> bool:
    """Whether MTP auto runs ``c`` without the head its configuration fits: the estimate is
    faster without drafting at the search's acceptance, beyond the model's error for its kind.
    Judged at an empty context, the speed --sort speed orders by (its bound takes the larger of
    both: crawler.ranking.speed_bound)."""
    below = MTP_DECLINE_BELOW["moe" if c.coefficients.n_expert > 0 else "dense"]
    return (
        mtp_by_speed(spec, budget) and cfg.mtp and speed is not None and speed.mtp_speedup < below
    )


def without_head(spec: RunSpec) -> RunSpec:
    """``spec`` with MTP off: what MTP auto falls back to. The head only adds bytes, so the
    plain run fits at the cache step (and tier) the head's run took (crawler.fit.choose)."""
    return dataclasses.replace(spec, mtp_auto=False)


def mtp_usable(c: Candidate) -> bool:
    """The quant carries an MTP head search may run: present, preserved (>= 6 bits), complete."""
    return bool(c.mtp_present and c.mtp_preserved and c.coefficients.mtp_available)


Outcome = tuple[RunConfig | None, FitEstimate | None] | EstimateError


def evaluate(
    c: Candidate, spec: RunSpec, budget: Budget
) -> tuple[RunConfig, FitEstimate] | tuple[None, FitEstimate | None]:
    """(config, estimate) when ``c`` fits; (None, smallest estimate or None) when it does not."""
    if spec.vision and c.projector_bytes is None:
        return None, None
    projector = projector_device_bytes(c, spec)
    mode: MtpMode = "on" if spec.mtp else "auto" if spec.mtp_auto else "off"
    room, usable = budget.device_bytes - projector, mtp_usable(c)
    if budget.devices:
        cfg, est = choose_split(
            c.coefficients, spec.base_config(), budget.devices, budget.split,
            auto_cache=spec.auto_cache, mtp=mode, mtp_usable=usable,
        )  # fmt: skip
        ram = budget.ram_bytes
        if cfg is not None and est is not None and ram is not None and est.host_bytes > ram:
            return None, est  # experts in RAM (--cpu-moe / --n-cpu-moe) beyond --ram
    elif spec.n_gpu_layers is not None:
        cfg, est = choose_pinned_layers(
            c.coefficients, spec.base_config(), room, spec.n_gpu_layers,
            auto_cache=spec.auto_cache, mtp=mode, mtp_usable=usable, ram_bytes=budget.ram_bytes,
        )  # fmt: skip
    else:
        cfg, est = choose_tier(
            c.coefficients, spec.base_config(), room, tier=spec.tier,
            auto_cache=spec.auto_cache, mtp=mode, mtp_usable=usable, ram_bytes=budget.ram_bytes,
        )  # fmt: skip
    if cfg is None or est is None:
        return None, est
    if projector:
        est = dataclasses.replace(est, weights=est.weights + projector)  # its device bytes
    return cfg, est


def margin_of(
    c: Candidate, cfg: RunConfig, est: FitEstimate, budget: Budget
) -> tuple[int, tuple[DeviceShare, ...]]:
    """(margin, device shares): one GPU's budget less the estimate, or on several GPUs the
    tightest device's margin (each device's share as llama.cpp's layer split places it)."""
    if not budget.devices:
        return budget.device_bytes - est.total, ()
    shares = tuple(estimate_devices(c.coefficients, cfg, budget.split, budget.devices))
    return min(s.margin for s in shares), shares


def projector_device_bytes(c: Candidate, spec: RunSpec) -> int:
    """Device bytes of the repo's projector when the search asks for vision (else 0)."""
    if not spec.vision or c.projector_bytes is None:
        return 0
    return projector_bytes(c.projector_bytes)


def with_max_ctx(
    r: Ranked,
    spec: RunSpec,
    budget: Budget,
    memo: dict[tuple[int, RunConfig, int], tuple[MemoryCoefficients, int]] | None = None,
) -> Ranked:
    """``r`` with its largest context; ``memo`` keeps the answers per coefficient object."""
    co = r.candidate.coefficients
    if r.config.n_gpu_layers is not None:
        return replace_ranked(r, max_ctx=r.config.ctx)  # partial offload: the context asked for
    room = budget.device_bytes - projector_device_bytes(r.candidate, spec)
    key = (id(co), r.config, room)
    hit = memo.get(key) if memo is not None else None
    if hit is not None and hit[0] is co:
        return replace_ranked(r, max_ctx=hit[1])
    cap = max(co.n_ctx_train or (1 << 20), r.config.ctx)
    if budget.devices:
        m = max_ctx_split(co, r.config, budget.split, budget.devices, limit=cap)
    else:
        m = max_ctx(co, r.config, room, limit=cap)
    if memo is not None:
        memo[key] = (co, m)
    return replace_ranked(r, max_ctx=m)


def finish(
    r: Ranked,
    rank: int,
    spec: RunSpec,
    budget: Budget,
    paths: Sequence[str],
) -> Ranked:
    """A chosen result with its rank, the largest context (without ``--ctx``) and commands."""
    cfg = r.config
    if spec.ctx is None and r.max_ctx and r.max_ctx != cfg.ctx:
        # Without --ctx the row shows the largest context: estimate and command use it.
        cfg = cfg.replace(ctx=r.max_ctx)
        est = estimate(r.candidate.coefficients, cfg)
        est = dataclasses.replace(
            est, weights=est.weights + projector_device_bytes(r.candidate, spec)
        )
        margin, shares = margin_of(r.candidate, cfg, est, budget)
        if shares:
            est = combined_estimate(shares, est)
        r = replace_ranked(
            r,
            config=cfg,
            estimate=est,
            margin_bytes=margin,
            devices=shares,
            speed=_speed(r.candidate, est, budget, spec),
        )
    r, cfg = _with_draft_length(r, cfg, spec, budget)
    c = r.candidate
    # With --vision, -hf downloads the repo's projector (launch.py); budget.split is the layer
    # split the estimate assumed (llama.cpp -ts, common/arg.cpp).
    # No command for a file mainline llama.cpp refuses to load (Ollama and LM Studio run
    # llama.cpp's loader too): a printed line that fails at start-up is a wrong answer.
    command = ollama = lm_studio = None
    if c.loadable_by_mainline is not False:
        command = llama_server_command(
            c.repo_id,
            c.path,
            c.quant_label,
            cfg,
            paths,
            mmproj=spec.vision,
            split=budget.split or (),
        )
        ollama = ollama_command(c.repo_id, c.quant_label, cfg)
        lm_studio = lmstudio_command(c.repo_id, cfg)
    return replace_ranked(r, rank=rank, command=command, ollama=ollama, lm_studio=lm_studio)


def _speed(c: Candidate, est: FitEstimate, budget: Budget, spec: RunSpec) -> SpeedEstimate | None:
    return speed_of(
        c, est, budget, acceptance=spec.mtp_acceptance, choose_draft=spec.spec_draft_auto
    )


def _with_draft_length(
    r: Ranked, cfg: RunConfig, spec: RunSpec, budget: Budget
) -> tuple[Ranked, RunConfig]:
    """With a chosen draft length: the configuration (and command) carry it, its memory
    re-estimated; a length that no longer fits falls back to the configured one."""
    k = r.speed.draft_n_max if r.speed is not None else 0
    if not (spec.spec_draft_auto and cfg.mtp and k > 0 and k != cfg.spec_draft_n_max):
        return r, cfg
    new = cfg.replace(spec_draft_n_max=k)
    est = estimate(r.candidate.coefficients, new)
    est = dataclasses.replace(est, weights=est.weights + projector_device_bytes(r.candidate, spec))
    margin, shares = margin_of(r.candidate, new, est, budget)
    if shares:
        est = combined_estimate(shares, est)
    if margin < 0:
        speed = speed_of(r.candidate, r.estimate, budget, acceptance=spec.mtp_acceptance)
        return replace_ranked(r, speed=speed), cfg
    return replace_ranked(r, config=new, estimate=est, margin_bytes=margin, devices=shares), new


def replace_ranked(r: Ranked, **changes: Any) -> Ranked:
    """``r`` with some fields changed."""
    return replaced(r, **changes)
