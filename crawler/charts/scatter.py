"""File size against estimated quality for one base model's quants, with the Pareto front.

The front holds the quants worth choosing between.
Details: docs/internals/charts.md#scatter
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from crawler.base.units import GIB
from crawler.charts.svg import Frame, esc, svg_document

__all__ = ["ScatterPoint", "pareto_front", "scatter_svg"]


@dataclass(frozen=True, slots=True)
class ScatterPoint:
    """One quant: its label, size in bytes, quality 0-100."""

    label: str
    size_bytes: int
    quality: float


def pareto_front(points: Sequence[ScatterPoint]) -> list[ScatterPoint]:
    """The non-dominated points (smaller is better for size, larger for quality), by size."""
    front: list[ScatterPoint] = []
    best = float("-inf")
    for p in sorted(points, key=lambda q: (q.size_bytes, -q.quality)):
        if p.quality > best:
            front.append(p)
            best = p.quality
    return front


def scatter_svg(
    points: Sequence[ScatterPoint],
    *,
    title: str = "Size vs estimated quality",
    width: int = 640,
    height: int = 360,
    standalone: bool = False,
) -> str:
    """Dots per quant (tooltips name them), the Pareto front as a line, front points labelled."""
    if not points:
        body = f'<text x="20" y="40" fill="currentColor">{esc("no quality estimate")}</text>'
        return svg_document(width, 60, body, title=title, standalone=standalone)
    xs = [p.size_bytes / GIB for p in points]
    ys = [p.quality for p in points]
    pad_x = (max(xs) - min(xs)) * 0.05 or 1.0
    pad_y = (max(ys) - min(ys)) * 0.1 or 5.0
    f = Frame(width, height, (max(0.0, min(xs) - pad_x), max(xs) + pad_x),
              (max(0.0, min(ys) - pad_y), min(100.0, max(ys) + pad_y)),
              "file size (GiB)", "estimated quality (0-100)")  # fmt: skip
    f.axes()
    front = pareto_front(points)
    on_front = {id(p) for p in front}
    parts = f.parts
    if len(front) > 1:
        d = " ".join(
            f"{'M' if i == 0 else 'L'}{f.x(p.size_bytes / GIB):.1f},{f.y(p.quality):.1f}"
            for i, p in enumerate(front)
        )
        parts.append(
            f'<path class="pareto" d="{d}" fill="none" stroke="#3fb950" stroke-width="2"/>'
        )
    for p in points:
        cx, cy = f.x(p.size_bytes / GIB), f.y(p.quality)
        best = id(p) in on_front
        tip = f"{p.label}: {p.size_bytes / GIB:.2f} GiB, quality {p.quality:.1f}"
        parts.append(
            f'<circle class="{"point front" if best else "point"}" cx="{cx:.1f}" cy="{cy:.1f}"'
            f' r="{5 if best else 4}" fill="{"#3fb950" if best else "#2f81f7"}"'
            f' fill-opacity="0.85"><title>{esc(tip)}</title></circle>'
        )
        if best:
            short = p.label if len(p.label) <= 28 else p.label[:25] + "..."
            parts.append(
                f'<text x="{cx + 7:.1f}" y="{cy - 6:.1f}" fill="currentColor" font-size="10">'
                f"{esc(short)}</text>"
            )
    parts.append(
        f'<text x="{width - f.right - 4}" y="{f.top - 10}" text-anchor="end" fill="#3fb950">'
        f"{esc('green: Pareto front (no quant is smaller and better)')}</text>"
    )
    return svg_document(width, height, "".join(parts), title=title, standalone=standalone)
