"""Apple silicon (Metal, unified memory): where its buffers differ from CUDA's (pure).

NOT MEASURED on this backend: derived from llama.cpp's source and the CUDA model; outputs say so.
Details: docs/internals/fit.md#apple
"""

from __future__ import annotations

import dataclasses

from crawler.fit.cache import cache_type, pad
from crawler.fit.coefficients import MemoryCoefficients
from crawler.fit.estimate import FitEstimate, RunConfig, estimate, largest_fitting

__all__ = ["METAL_ALIGNMENT", "NOTE", "metal_estimate", "metal_max_ctx"]

METAL_ALIGNMENT = 32
NOTE = "not measured on this backend (Metal): modelled from llama.cpp's source and CUDA figures"


def metal_estimate(c: MemoryCoefficients, cfg: RunConfig) -> FitEstimate:
    """The CUDA estimate with Metal's buffer rules (see module); weights from the per-layer
    host sizes when the coefficients have them (else the CUDA sizes, a little high)."""
    cuda = estimate(c, cfg)
    weights = cuda.weights
    if c.layer_weights:
        weights = c.output_weights[1]
        weights += sum(h for il, _d, h in c.layer_weights if il < c.n_layer or cfg.mtp)
        for il, _d, h in c.expert_layers:
            if (il < c.n_layer or cfg.mtp) and not (cfg.cpu_moe or il < cfg.n_cpu_moe):
                weights += h
    tk, tv = cache_type(cfg.type_k), cache_type(cfg.type_v)
    kv = 0
    for g in c.kv_groups:
        cells = cuda.swa_cells if g.swa else cuda.kv_cells
        for t, width in ((tk, g.k_width), (tv, g.v_width)):
            if width:
                kv += g.count * pad(t.row_bytes(width) * cells * cuda.n_stream, METAL_ALIGNMENT)
    return dataclasses.replace(cuda, weights=weights, kv=kv, overhead=0)


def metal_max_ctx(c: MemoryCoefficients, cfg: RunConfig, budget_bytes: int) -> int:
    """The largest context whose Metal estimate fits ``budget_bytes`` (0 if none): it grows with
    the context as the CUDA one does, so a binary search finds it."""

    hi = max(c.n_ctx_train or 1 << 20, cfg.ctx)
    return largest_fitting(
        lambda ctx: metal_estimate(c, cfg.replace(ctx=ctx)).total <= budget_bytes, hi
    )
