"""One estimate for the setups beyond "everything on one GPU": -ngl (N, all, auto) and a
vision projector, over crawler.fit.offload and crawler.fit.vision (pure).
Details: docs/internals/fit.md#setup
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from crawler.base.errors import InvalidConfig, UsageError
from crawler.fit.coefficients import MemoryCoefficients
from crawler.fit.estimate import FitEstimate, RunConfig
from crawler.fit.offload import OffloadEstimate, auto_gpu_layers, estimate_offload, n_slots
from crawler.fit.vision import Projector

__all__ = ["Setup", "parse_ngl", "resolve_setup"]


def parse_ngl(value: str) -> int | str:
    """``-ngl`` as llama.cpp's common/arg.cpp (~2790) reads it: a number, 'all' or 'auto'."""
    v = value.strip().lower()
    if v in ("all", "auto"):
        return v
    try:
        n = int(v)
    except ValueError:
        raise UsageError(f"-ngl takes a number, 'all' or 'auto', not {value!r}") from None
    return "all" if n < 0 else n  # llama.cpp: -1 = auto, -2 = all; we read negatives as all


@dataclass(frozen=True, slots=True)
class Setup:
    """Device/host bytes with ``n_gpu_layers`` slots on the GPU and an optional projector."""

    offload: OffloadEstimate
    projector: Projector | None
    tier: str  # "gpu" (all slots) or "partial"

    @property
    def total(self) -> int:
        """Device bytes."""
        return self.offload.total + (self.projector.total if self.projector else 0)

    def as_fit_estimate(self) -> FitEstimate:
        """The single-GPU estimate's shape with these device bytes (projector in weights and
        compute), for code that renders a FitEstimate."""
        o, p = self.offload, self.projector
        return dataclasses.replace(
            o.full,
            weights=o.weights + (p.weights if p else 0),
            kv=o.kv,
            mtp_kv=o.mtp_kv,
            recurrent=o.recurrent,
            compute=o.compute + (p.compute if p else 0),
            overhead=o.overhead,
            host_bytes=o.host_bytes,
        )

    def to_json(self) -> dict[str, Any]:
        """The extra ``estimate --json`` keys."""
        p = self.projector
        return {
            "n_gpu_layers": self.offload.n_gpu_layers,
            "n_slots": self.offload.n_slots,
            "tier": self.tier,
            "bytes": self.as_fit_estimate().bytes_dict(),
            "host_bytes": self.offload.host_bytes,
            "mmproj": None
            if p is None
            else {"weights": p.weights, "compute": p.compute, "projector_type": p.projector_type},
        }


def resolve_setup(
    c: MemoryCoefficients,
    cfg: RunConfig,
    ngl: int | str,
    budget_bytes: int | None,
    projector: Projector | None = None,
) -> Setup:
    """The Setup for ``-ngl ngl``; 'auto' needs ``budget_bytes`` (the projector's bytes are
    taken from it first: llama-server loads the projector beside the model)."""
    slots = n_slots(c)
    if ngl == "auto":
        if budget_bytes is None:
            raise UsageError("-ngl auto needs --vram (the budget it fills)")
        room = budget_bytes - (projector.total if projector else 0)
        n = auto_gpu_layers(c, cfg, room)
        if n is None:
            raise InvalidConfig("not even -ngl 0 fits: the CUDA context and buffers exceed --vram")
    elif ngl == "all":
        n = slots
    else:
        assert isinstance(ngl, int)
        n = ngl
    off = estimate_offload(c, cfg, n)
    return Setup(off, projector, "partial" if off.partial else "gpu")
