"""Search tiers: how a quant runs when it does not fit on the GPU whole (pure policy).

gpu, then experts_cpu (--cpu-moe), then partial (-ngl N): the first tier in which it fits.
Details: docs/internals/fit.md#tiers
"""

from __future__ import annotations

from crawler.base.errors import InvalidConfig
from crawler.fit.choose import MtpMode, choose_config, trials
from crawler.fit.coefficients import MemoryCoefficients
from crawler.fit.estimate import FitEstimate, RunConfig
from crawler.fit.offload import auto_gpu_layers, device_estimate, n_slots

__all__ = ["TIERS", "choose_pinned_layers", "choose_tier", "tier_of"]

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
    estimate's components are the GPU's share (crawler.fit.offload.OffloadEstimate)."""
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
            est = device_estimate(c, cheapest, n)
            if _ram_ok(est, ram_bytes):
                return est.config, est
    return None, smallest


def choose_pinned_layers(
    c: MemoryCoefficients,
    base: RunConfig,
    budget_bytes: int,
    n_gpu_layers: int,
    *,
    auto_cache: bool,
    mtp: MtpMode,
    mtp_usable: bool,
    ram_bytes: int | None = None,
) -> tuple[RunConfig | None, FitEstimate | None]:
    """``-ngl N`` as asked: the first of crawler.fit.choose.trials whose GPU share fits
    (N at or above the model's slots is the whole model: choose_tier's ``gpu`` tier)."""
    if n_gpu_layers >= n_slots(c):
        return choose_tier(
            c, base, budget_bytes, tier="gpu", auto_cache=auto_cache, mtp=mtp,
            mtp_usable=mtp_usable, ram_bytes=ram_bytes,
        )  # fmt: skip
    smallest: FitEstimate | None = None
    refused: InvalidConfig | None = None
    for cfg in trials(base, auto_cache=auto_cache, mtp=mtp, mtp_usable=mtp_usable):
        try:
            est = device_estimate(c, cfg, n_gpu_layers)
        except InvalidConfig as exc:
            refused = refused or exc
            continue
        if est.total <= budget_bytes and _ram_ok(est, ram_bytes):
            return est.config, est
        if smallest is None or est.total < smallest.total:
            smallest = est
    if smallest is None and refused is not None:
        raise refused
    return None, smallest


def _ram_ok(est: FitEstimate | None, ram_bytes: int | None) -> bool:
    return ram_bytes is None or (est is not None and est.host_bytes <= ram_bytes)
