"""The sliding-window part of the memory bound's fixed cache bytes, and its SQL twin (pure).

A short context holds fewer SWA cells than the window the stored fixed bytes count.
Details: docs/internals/ranking.md#bounds
"""

from __future__ import annotations

from typing import Any

from crawler.fit.cache import pad

__all__ = ["fixed_bytes_sql", "swa_surplus_bytes"]


def _cells(ctx: int, ubatch: int) -> tuple[int, int]:
    """(the context's cells: ctx padded to 256, cells an ubatch under 512 takes off the window)."""
    return pad(ctx, 256), pad(max(0, 512 - ubatch), 256)


def swa_surplus_bytes(bytes_per_cell: int, window_cells: int, ctx: int, ubatch: int) -> int:
    """The f16 bytes of the window's cells (``window_cells``: MemoryCoefficients.swa_cells, at
    ubatch 512) that no configuration at context ``ctx`` or more and ubatch ``ubatch`` or more
    allocates, so fixed_bytes_f16 less them is at most its SWA cache and recurrent state.

    llama.cpp sizes each stream's SWA cache at ``GGML_PAD(min(kv_size, n_swa * (unified ?
    n_seq_max : 1) + n_ubatch), 256)`` cells (src/llama-kv-cache-iswa.cpp, the
    llama_kv_cache_iswa constructor; crawler.fit.estimate does the same), and the streams'
    kv_size together is at least the context padded to 256 (for up to 256 streams,
    src/llama-cparams.h LLAMA_MAX_SEQ, the most llama.cpp takes). So the SWA cells are at least
    min(ctx cells, pad(n_swa + ubatch, 256)), and pad(n_swa + ubatch, 256) is at least the
    window less pad(512 - ubatch, 256) for an ubatch under 512.
    """
    if not window_cells:
        return 0
    ctx_cells, gap = _cells(ctx, ubatch)
    return bytes_per_cell * max(gap, window_cells - ctx_cells)


def fixed_bytes_sql(ctx: int, ubatch: int, sfx: str) -> tuple[str, dict[str, Any]]:
    """(expression, params): fit_fixed_bytes less swa_surplus_bytes over the quants' columns
    (``fit_swa_kv_per_cell``, ``fit_swa_cells``: 0 without SWA layers). Where they are NULL
    (rows a snapshot import wrote: it copies neither) the split of fit_fixed_bytes is unknown,
    and the expression is 0."""
    ctx_cells, gap = _cells(ctx, ubatch)
    over = f"q.fit_swa_cells - :swa_ctx_cells{sfx}"
    most = f"(CASE WHEN {over} > :swa_gap{sfx} THEN {over} ELSE :swa_gap{sfx} END)"
    surplus = f"COALESCE(q.fit_swa_kv_per_cell, 0) * {most}"
    expr = (
        "(CASE WHEN q.fit_swa_cells IS NULL THEN 0.0"
        f" ELSE COALESCE(q.fit_fixed_bytes, 0) - {surplus} END)"
    )
    return expr, {f"swa_ctx_cells{sfx}": float(ctx_cells), f"swa_gap{sfx}": float(gap)}
