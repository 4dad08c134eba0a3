"""Which cache types and MTP setting a search runs a quant with (pure policy over the estimate).

The least lossy cache that reaches the context first; then MTP when the head is usable and fits.
Details: docs/internals/fit.md#choose
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from crawler.base.errors import InvalidConfig
from crawler.fit.cache import cache_type
from crawler.fit.coefficients import MemoryCoefficients
from crawler.fit.estimate import CACHE_LADDER, FitEstimate, RunConfig, estimate

__all__ = ["MtpMode", "choose_config", "trials"]

MtpMode = Literal["auto", "on", "off"]

_DRAFT_LADDER: tuple[tuple[str, str], ...] = (("q8_0", "q8_0"), ("q4_0", "q4_0"))


def trials(
    base: RunConfig, *, auto_cache: bool, mtp: MtpMode, mtp_usable: bool
) -> Iterator[RunConfig]:
    """The configurations tried, in order of preference (docs/internals/fit.md#choose)."""
    steps = CACHE_LADDER if auto_cache else ((base.type_k, base.type_v),)
    with_head = mtp == "on" or (mtp == "auto" and mtp_usable)
    draft: tuple[tuple[str, str], ...] = ((base.type_k_draft, base.type_v_draft),)
    if auto_cache:
        draft += _DRAFT_LADDER
    for k, v in steps:
        fa = base.flash_attn
        if cache_type(v).quantized and fa == "off":
            fa = "on"  # a quantized V needs flash attention
        if with_head:
            for dk, dv in draft:
                yield base.replace(type_k=k, type_v=v, flash_attn=fa, mtp=True,
                                   type_k_draft=dk, type_v_draft=dv)  # fmt: skip
        if mtp != "on":
            yield base.replace(type_k=k, type_v=v, flash_attn=fa, mtp=False)


def choose_config(
    c: MemoryCoefficients,
    base: RunConfig,
    budget_bytes: int,
    *,
    auto_cache: bool,
    mtp: MtpMode,
    mtp_usable: bool,
) -> tuple[RunConfig | None, FitEstimate | None]:
    """(config, estimate) of the first of trials that fits ``budget_bytes``; else (None,
    the smallest estimate tried, or None when llama.cpp refuses every trial). InvalidConfig only
    when every trial is refused (the first refusal is raised).

    The head only adds bytes (its weights, draft cache and context, more recurrent slots and
    outputs), so at each cache step the run without it is estimated first: when that does not
    fit, the step's MTP trials cannot either and are skipped (same answer, fewer estimates).
    """
    smallest: FitEstimate | None = None
    refused: InvalidConfig | None = None

    def attempt(cfg: RunConfig) -> FitEstimate | None:
        nonlocal smallest, refused
        try:
            est = estimate(c, cfg)
        except InvalidConfig as exc:
            refused = refused or exc
            return None
        if smallest is None or est.total < smallest.total:
            smallest = est
        return est

    step: list[RunConfig] = []
    for cfg in trials(base, auto_cache=auto_cache, mtp=mtp, mtp_usable=mtp_usable):
        step.append(cfg)
        if cfg.mtp and mtp == "on":
            est = attempt(cfg)
            if est is not None and est.total <= budget_bytes:
                return cfg, est
            step.clear()
            continue
        if cfg.mtp:
            continue  # the step's no-MTP trial closes it
        plain = attempt(cfg)
        if plain is not None and plain.total <= budget_bytes:
            for with_head in step[:-1]:
                est = attempt(with_head)
                if est is not None and est.total <= budget_bytes:
                    return with_head, est
            return cfg, plain
        step.clear()
    if smallest is None and refused is not None:
        raise refused
    return None, smallest
