"""Several GPUs with llama.cpp's layer split (-sm layer, the default; -ts) (pure).

MODELLED ONLY (not measured on two real GPUs yet); the tightest device decides the verdict.
Details: docs/internals/fit.md#devices
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass

from crawler.base.errors import InvalidConfig, UsageError
from crawler.fit.choose import MtpMode, trials
from crawler.fit.coefficients import MemoryCoefficients
from crawler.fit.estimate import FitEstimate, RunConfig, estimate, largest_fitting
from crawler.fit.offload import estimate_offload, n_slots

__all__ = [
    "DeviceShare",
    "assign_slots",
    "choose_split",
    "combined_estimate",
    "estimate_devices",
    "fits_all",
    "max_ctx_split",
    "parse_tensor_split",
]

SCHED_MAX_COPIES = 4


@dataclass(frozen=True, slots=True)
class DeviceShare:
    """One device's slots [first, last) and its bytes."""

    index: int
    first: int
    last: int
    static: int  # weights + KV + MTP KV + recurrent of its slots
    compute: int
    overhead: int
    budget: int

    @property
    def total(self) -> int:
        """Its device bytes."""
        return self.static + self.compute + self.overhead

    @property
    def margin(self) -> int:
        """Budget left (negative: does not fit)."""
        return self.budget - self.total


def assign_slots(slots: int, split: Sequence[float]) -> list[tuple[int, int]]:
    """Per device, the [first, last) slots llama.cpp gives it for ``-ts split`` (all on GPU)."""
    if not split or any(x < 0 for x in split) or sum(split) <= 0:
        raise ValueError("a tensor split needs non-negative proportions with a positive sum")
    total = float(sum(split))
    points, acc = [], 0.0
    for x in split:
        acc += x
        points.append(acc / total)
    owner = [min(bisect.bisect_right(points, il / slots), len(split) - 1) for il in range(slots)]
    out = []
    for d in range(len(split)):
        mine = [il for il, o in enumerate(owner) if o == d]
        out.append((mine[0], mine[-1] + 1) if mine else (0, 0))
    return out


def _static_from(c: MemoryCoefficients, cfg: RunConfig, first: int) -> int:
    """Device bytes (weights, caches) of the slots from ``first`` to the end."""
    e = estimate_offload(c, cfg, n_slots(c) - first)
    return e.weights + e.kv + e.mtp_kv + e.recurrent


def estimate_devices(
    c: MemoryCoefficients, cfg: RunConfig, split: Sequence[float], budgets: Sequence[int]
) -> list[DeviceShare]:
    """Every device's share with all slots on the GPUs, split by ``split`` (see module)."""
    if len(split) != len(budgets):
        raise ValueError("one tensor-split entry per device")
    slots = n_slots(c)
    full = estimate_offload(c, cfg, slots).full
    ranges = assign_slots(slots, split)
    extra = 0
    if len(split) > 1:
        extra = (SCHED_MAX_COPIES - 1) * c.n_embd * min(cfg.ubatch, full.n_ctx) * 4
    out = []
    for d, (first, last) in enumerate(ranges):
        if first == last:
            static = 0
        else:
            static = _static_from(c, cfg, first) - (
                _static_from(c, cfg, last) if last < slots else 0
            )
        out.append(
            DeviceShare(d, first, last, static, full.compute + extra, full.overhead, budgets[d])
        )
    return out


def fits_all(shares: Sequence[DeviceShare]) -> bool:
    """The per-device verdict: every device within its budget (the tightest decides)."""
    return all(s.margin >= 0 for s in shares)


def parse_tensor_split(text: str) -> tuple[float, ...]:
    """``-ts 3,1`` as llama.cpp's common/arg.cpp reads it (``,`` or ``/`` between proportions)."""
    try:
        split = tuple(float(x) for x in re.split(r"[,/]", text) if x.strip())
    except ValueError:
        raise UsageError(f"-ts takes proportions like 3,1, not {text!r}") from None
    if not split or any(x < 0 or x != x for x in split) or sum(split) <= 0:
        raise UsageError(f"-ts needs non-negative proportions with a positive sum, not {text!r}")
    return split


def combined_estimate(shares: Sequence[DeviceShare], full: FitEstimate) -> FitEstimate:
    """``full`` (the one-GPU estimate of the same configuration) with every device's compute
    buffer and runtime counted: its total is the sum of the devices' totals."""
    return dataclasses.replace(
        full,
        compute=sum(s.compute for s in shares),
        overhead=sum(s.overhead for s in shares),
    )


def choose_split(
    c: MemoryCoefficients,
    base: RunConfig,
    budgets: Sequence[int],
    split: Sequence[float],
    *,
    auto_cache: bool,
    mtp: MtpMode,
    mtp_usable: bool,
) -> tuple[RunConfig | None, FitEstimate | None]:
    """The first of crawler.fit.choose.trials whose every device fits (the tightest
    decides); the estimate is combined_estimate. (None, the smallest tried) otherwise."""
    smallest: FitEstimate | None = None
    refused: InvalidConfig | None = None
    for cfg in trials(base, auto_cache=auto_cache, mtp=mtp, mtp_usable=mtp_usable):
        try:
            shares = estimate_devices(c, cfg, split, budgets)
            est = combined_estimate(shares, estimate(c, cfg))
        except InvalidConfig as exc:
            refused = refused or exc
            continue
        if fits_all(shares):
            return cfg, est
        if smallest is None or est.total < smallest.total:
            smallest = est
    if smallest is None and refused is not None:
        raise refused
    return None, smallest


def max_ctx_split(
    c: MemoryCoefficients,
    cfg: RunConfig,
    split: Sequence[float],
    budgets: Sequence[int],
    *,
    limit: int,
) -> int:
    """The largest context at which every device fits (0 if none does): every device's bytes
    grow with the context, so a binary search finds it, as crawler.fit.max_ctx does."""

    return largest_fitting(
        lambda ctx: fits_all(estimate_devices(c, cfg.replace(ctx=ctx), split, budgets)), limit
    )
