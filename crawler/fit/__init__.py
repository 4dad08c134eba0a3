"""Memory model of llama.cpp (pure: no I/O): header -> coefficients -> estimate for any config.

Contract (other modules code against this)::

    coeffs = coefficients(header)            # MemoryCoefficients, frozen, JSON round-trip:
    coeffs.to_json() / MemoryCoefficients.from_json(d)
    coeffs.status        # "ok" | "unknown" (+ coeffs.reason); never a silent default
    # scalar catalog columns (crawler/catalog/tables.py MemoryModel):
    coeffs.weights_bytes, .mtp_weights_bytes, .expert_bytes, .host_bytes,
    coeffs.kv_bytes_per_token_f16, .fixed_bytes_f16

    cfg = RunConfig(ctx=262144, type_k="q4_0", type_v="q4_0", flash_attn="on", parallel=1,
                    ubatch=512, mtp=True, spec_draft_n_max=3, type_k_draft="f16",
                    type_v_draft="f16", cpu_moe=False, n_cpu_moe=0)
    est = estimate(coeffs, cfg)              # FitEstimate
    est.bytes_dict()     # {weights, kv, mtp_kv, recurrent, compute, overhead, total}
    est.host_bytes, est.command              # host memory; the llama-server command for cfg
    max_ctx(coeffs, cfg, budget_bytes)       # largest ctx that fits (0 if none)
    cheapest_cache_for(coeffs, cfg, budget_bytes, target_ctx)   # RunConfig or None

Errors: UnknownArchitecture (status "unknown"), InvalidConfig (a config llama.cpp rejects:
quantized V without flash attention, head dims not divisible by the cache block, MLA with
different K/V types, MTP without nextn tensors, unknown cache type).

Exact (byte for byte, CUDA buffers): weights, KV, MTP KV, recurrent state. Fitted (``cuda.py``):
compute buffers and runtime overhead. Rules: llama.cpp ``0c1e57098``; see the modules.
"""

from __future__ import annotations

from crawler.fit.cache import CACHE_TYPES, CacheType, cache_type
from crawler.fit.coefficients import (
    KVGroup,
    MemoryCoefficients,
    coefficients,
    sliding_window_layers,
)
from crawler.fit.estimate import (
    CACHE_LADDER,
    FitEstimate,
    RunConfig,
    cheapest_cache_for,
    command,
    command_args,
    estimate,
    max_ctx,
)

__all__ = [
    "CACHE_LADDER",
    "CACHE_TYPES",
    "CacheType",
    "FitEstimate",
    "KVGroup",
    "MemoryCoefficients",
    "RunConfig",
    "cache_type",
    "cheapest_cache_for",
    "coefficients",
    "command",
    "command_args",
    "estimate",
    "max_ctx",
    "sliding_window_layers",
]
