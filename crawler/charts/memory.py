"""Device memory against context, one curve per KV-cache type, with the VRAM budget line.

The numbers are the memory model's (estimate, max_ctx); this module only samples and draws them.
Details: docs/internals/charts.md#memory
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from crawler.base.errors import InvalidConfig
from crawler.base.units import GIB
from crawler.charts.svg import Frame, esc, svg_document
from crawler.fit import CACHE_LADDER, MemoryCoefficients, RunConfig, cache_type, estimate, max_ctx

__all__ = ["MemoryCurve", "memory_curves", "memory_svg"]

# Mid-tone hues readable on white and on near-black, one per cache pair (ladder order).
_COLOURS = ("#2f81f7", "#d29922", "#a371f7", "#3fb950", "#f85149")
_MIN_CTX = 1024


@dataclass(frozen=True, slots=True)
class MemoryCurve:
    """Total device bytes at sampled contexts for one cache pair; ``max_ctx`` under the budget."""

    type_k: str
    type_v: str
    points: tuple[tuple[int, int], ...]
    max_ctx: int | None

    @property
    def name(self) -> str:
        """``K f16 / V f16``."""
        return f"K {self.type_k} / V {self.type_v}"

    def to_json(self) -> dict[str, object]:
        """For ``/api/quant``: the curve's samples."""
        return {
            "type_k": self.type_k,
            "type_v": self.type_v,
            "points": [{"ctx": c, "total_bytes": b} for c, b in self.points],
            "max_ctx": self.max_ctx,
        }


def _contexts(limit: int) -> list[int]:
    ctxs = []
    c = _MIN_CTX
    while c < limit:
        ctxs.append(c)
        c *= 2
    ctxs.append(limit)
    return ctxs


def memory_curves(
    coeffs: MemoryCoefficients,
    base: RunConfig,
    *,
    budget_bytes: int | None = None,
    pairs: Sequence[tuple[str, str]] = (),
) -> list[MemoryCurve]:
    """Curves for ``pairs`` (default: the cache ladder f16, q8_0, q4_0, plus ``base``'s own pair)
    from 1024 tokens to the training context. A pair llama.cpp refuses for this model is left out.
    """
    wanted = list(pairs or CACHE_LADDER)
    if not pairs and (base.type_k, base.type_v) not in wanted:
        wanted.append((base.type_k, base.type_v))
    limit = coeffs.n_ctx_train or 1 << 20
    curves = []
    for k, v in wanted:
        cfg = base.replace(type_k=k, type_v=v)
        if cache_type(v).quantized and cfg.flash_attn == "off":
            cfg = cfg.replace(flash_attn="on")  # llama.cpp needs FA for a quantized V cache
        try:
            points = tuple(
                (c, estimate(coeffs, cfg.replace(ctx=c)).total) for c in _contexts(limit)
            )
            top = max_ctx(coeffs, cfg, budget_bytes) if budget_bytes is not None else None
        except InvalidConfig:
            continue
        curves.append(MemoryCurve(k, v, points, top))
    return curves


def _ctx_label(v: float) -> str:
    n = round(2**v)
    return f"{n // 1024}K" if n >= 1024 else str(n)


def memory_svg(
    curves: Sequence[MemoryCurve],
    *,
    budget_bytes: int | None = None,
    title: str = "Device memory vs context",
    width: int = 640,
    height: int = 340,
    standalone: bool = False,
) -> str:
    """Lines of total GiB against context (log2 axis), a dashed budget line, max-ctx markers."""
    all_pts = [p for c in curves for p in c.points]
    if not all_pts:
        body = f'<text x="20" y="40" fill="currentColor">{esc("no memory model")}</text>'
        return svg_document(width, 60, body, title=title, standalone=standalone)
    x_lo = math.log2(min(c for c, _ in all_pts))
    x_hi = math.log2(max(c for c, _ in all_pts))
    y_hi = max(b for _, b in all_pts) / GIB
    if budget_bytes is not None:
        y_hi = max(y_hi, budget_bytes / GIB)
    f = Frame(width, height, (x_lo, x_hi), (0.0, y_hi * 1.05), "context (tokens, log scale)",
              "device memory (GiB)", top=40)  # fmt: skip
    ticks = [float(t) for t in range(math.ceil(x_lo), math.floor(x_hi) + 1)]
    if len(ticks) > 9:  # label every other power of two on long axes
        ticks = ticks[:: math.ceil(len(ticks) / 9)]
    f.axes(x_fmt=_ctx_label, x_ticks=ticks)
    p = f.parts
    if budget_bytes is not None:
        by = f.y(budget_bytes / GIB)
        p.append(
            f'<line class="budget" x1="{f.left}" x2="{width - f.right}" y1="{by:.1f}"'
            f' y2="{by:.1f}" stroke="#f85149" stroke-width="2" stroke-dasharray="6 4"/>'
            f'<text x="{width - f.right - 4}" y="{by - 5:.1f}" text-anchor="end" fill="#f85149">'
            f"{esc(f'VRAM budget {budget_bytes / GIB:.1f} GiB')}</text>"
        )
    for i, curve in enumerate(curves):
        colour = _COLOURS[i % len(_COLOURS)]
        path = " ".join(
            f"{'M' if j == 0 else 'L'}{f.x(math.log2(c)):.1f},{f.y(b / GIB):.1f}"
            for j, (c, b) in enumerate(curve.points)
        )
        p.append(
            f'<path class="curve" d="{path}" fill="none" stroke="{colour}" stroke-width="2">'
            f"<title>{esc(curve.name)}</title></path>"
        )
        if curve.max_ctx and budget_bytes is not None:
            mx = f.x(math.log2(max(curve.max_ctx, 2**x_lo)))
            my = f.y(budget_bytes / GIB)
            p.append(
                f'<circle class="maxctx" cx="{mx:.1f}" cy="{my:.1f}" r="5" fill="{colour}">'
                f"<title>{esc(f'{curve.name}: max context {curve.max_ctx} tokens')}</title>"
                "</circle>"
            )
        # Legend, top left, one entry per curve.
        lx = f.left + 10 + i * 150
        p.append(
            f'<rect x="{lx}" y="12" width="14" height="4" fill="{colour}"/>'
            f'<text x="{lx + 18}" y="18" fill="currentColor">{esc(_legend(curve))}</text>'
        )
    return svg_document(width, height, "".join(p), title=title, standalone=standalone)


def _legend(curve: MemoryCurve) -> str:
    if curve.max_ctx is None:
        return curve.name
    return f"{curve.type_k}/{curve.type_v}: max {curve.max_ctx // 1024}K"
