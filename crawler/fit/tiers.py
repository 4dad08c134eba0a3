"""Search tiers: how a quant runs when it does not fit on the GPU whole (pure policy).

``gpu``: every layer and cache on the GPU (:func:`crawler.fit.choose.choose_config`).
``experts_cpu``: a MoE's routed experts in host memory (``--cpu-moe``; llama.cpp's own ``--fit``
does this first for MoE models, common/fit.cpp step 4 at ``0c1e57098``), the rest on the GPU.
``partial``: ``-ngl N`` with the largest N that fits (``-ngl auto``, common/fit.cpp step 3),
layers from the last one down on the GPU, the others and their caches in host memory.

A search asks for a highest tier (``--tier``); a quant is placed in the first tier, in that order,
in which it fits. The partial tier runs the cheapest cache of the ladder and no MTP: its speed is
set by host memory, so every byte kept on the GPU counts more than cache precision.
"""

from __future__ import annotations

from crawler.fit.choose import MtpMode, choose_config, trials
from crawler.fit.coefficients import MemoryCoefficients
from crawler.fit.estimate import FitEstimate, RunConfig, command
from crawler.fit.offload import auto_gpu_layers, estimate_offload, n_slots

__all__ = ["TIERS", "choose_tier", "tier_of"]

TIERS = ("gpu", "experts_cpu", "partial")


def tier_of(cfg: RunConfig) -> str:
    """The tier a chosen configuration runs in."""
    if cfg.n_gpu_layers is not None:
        return "partial"
    return "experts_cpu" if cfg.cpu_moe or cfg.n_cpu_moe else "gpu"


def choose_tier(
    c: MemoryCoefficients,
    base: RunConfig,
    budget_bytes: int,
    *,
    tier: str,
    auto_cache: bool,
    mtp: MtpMode,
    mtp_usable: bool,
    ram_bytes: int | None = None,
) -> tuple[RunConfig | None, FitEstimate | None]:
    """(config, device estimate) in the first tier up to ``tier`` that fits; for ``partial`` the
    estimate's components are the GPU's share (:class:`crawler.fit.offload.OffloadEstimate`)."""
    kw = {"auto_cache": auto_cache, "mtp": mtp, "mtp_usable": mtp_usable}
    cfg, est = choose_config(c, base, budget_bytes, **kw)  # type: ignore[arg-type]
    if cfg is not None and _ram_ok(est, ram_bytes):
        return cfg, est
    smallest = est
    if tier in ("experts_cpu", "partial") and c.expert_bytes and not base.cpu_moe:
        cfg, est = choose_config(c, base.replace(cpu_moe=True), budget_bytes, **kw)  # type: ignore[arg-type]
        if cfg is not None and _ram_ok(est, ram_bytes):
            return cfg, est
    if tier == "partial" and mtp != "on":
        cheapest = list(trials(base, auto_cache=auto_cache, mtp="off", mtp_usable=False))[-1]
        n = auto_gpu_layers(c, cheapest, budget_bytes)
        if n is not None and n >= 1 and n < n_slots(c):
            cfg = cheapest.replace(n_gpu_layers=n)
            off = estimate_offload(c, cheapest, n)
            if ram_bytes is None or off.host_bytes <= ram_bytes:
                import dataclasses

                est = dataclasses.replace(
                    off.full,
                    config=cfg,
                    weights=off.weights,
                    kv=off.kv,
                    mtp_kv=off.mtp_kv,
                    recurrent=off.recurrent,
                    compute=off.compute,
                    overhead=off.overhead,
                    host_bytes=off.host_bytes,
                    command=command(cfg),
                )
                return cfg, est
    return None, smallest


def _ram_ok(est: FitEstimate | None, ram_bytes: int | None) -> bool:
    return ram_bytes is None or (est is not None and est.host_bytes <= ram_bytes)
