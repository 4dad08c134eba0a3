"""Memory model of llama.cpp (pure: no I/O): header -> coefficients -> estimate for any config.

May import: base, gguf.
Details: docs/internals/fit.md#overview
"""

from __future__ import annotations

from crawler.fit.cache import CACHE_TYPES, CacheType, cache_type, check_v_cache
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
    "check_v_cache",
    "coefficients",
    "command",
    "command_args",
    "estimate",
    "max_ctx",
    "sliding_window_layers",
]
