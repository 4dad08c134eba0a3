"""A minimal SVG writer for the charts: escaping, nice axis ticks, a plot frame with labels.

Pure: every text node and attribute goes through esc, so a hostile name is never markup.
Details: docs/internals/charts.md#svg
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

__all__ = ["Frame", "esc", "nice_ticks", "stack_svg", "svg_document"]

_ENTITIES = {'"': "&quot;", "'": "&#x27;"}
# XML 1.0 forbids most C0 controls even as character references: show them as U+FFFD.
_XML_BAD = dict.fromkeys((*range(0, 9), 11, 12, *range(14, 32)), "�")

#: Standalone files follow the viewer's colour scheme; inline charts take the page's colour.
_STANDALONE_STYLE = (
    "<style>svg.qchart{color:#1f2328;background:#fff}"
    "@media (prefers-color-scheme: dark){svg.qchart{color:#e6edf3;background:#0d1117}}</style>"
)


def esc(text: object) -> str:
    """``text`` safe as SVG/XML character data or a quoted attribute value."""
    return escape(str(text).translate(_XML_BAD), _ENTITIES)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering [lo, hi] (1, 2, 2.5 or 5 times a power of ten)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    v = first
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 10))
        v += step
    return ticks


def svg_document(width: int, height: int, body: str, *, title: str, standalone: bool) -> str:
    """The ``<svg>`` element (with an XML prolog and colour-scheme style when ``standalone``)."""
    head = '<?xml version="1.0" encoding="UTF-8"?>\n' if standalone else ""
    style = _STANDALONE_STYLE if standalone else ""
    return (
        f'{head}<svg xmlns="http://www.w3.org/2000/svg" class="qchart" role="img"'
        f' width="{width}" height="{height}" viewBox="0 0 {width} {height}"'
        # Named families before the generic one: on a machine with DejaVu but no Arial or
        # Liberation fonts, resvg (the PNG) found no face for sans-serif and drew no labels.
        " font-family=\"system-ui,'DejaVu Sans','Liberation Sans',Arial,Helvetica,sans-serif\""
        ' font-size="12"'
        f' aria-label="{esc(title)}">{style}<title>{esc(title)}</title>{body}</svg>'
    )


@dataclass
class Frame:
    """A plot area with linear axes: maps data to pixels and draws ticks, grid and labels."""

    width: int
    height: int
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    x_label: str
    y_label: str
    left: int = 70
    right: int = 20
    top: int = 30
    bottom: int = 50
    parts: list[str] = field(default_factory=list)

    def x(self, v: float) -> float:
        """Pixel x of data value ``v``."""
        lo, hi = self.x_range
        span = (hi - lo) or 1.0
        return self.left + (v - lo) / span * (self.width - self.left - self.right)

    def y(self, v: float) -> float:
        """Pixel y of data value ``v``."""
        lo, hi = self.y_range
        span = (hi - lo) or 1.0
        return self.height - self.bottom - (v - lo) / span * (self.height - self.top - self.bottom)

    def axes(
        self,
        x_fmt: Callable[[float], str] = lambda v: f"{v:g}",
        y_fmt: Callable[[float], str] = lambda v: f"{v:g}",
        x_ticks: Sequence[float] | None = None,
    ) -> None:
        """Frame, grid, ticks and both axis labels (with units) in currentColor."""
        x0, x1 = self.left, self.width - self.right
        y0, y1 = self.height - self.bottom, self.top
        p = self.parts
        for t in nice_ticks(*self.y_range):
            py = self.y(t)
            p.append(
                f'<line x1="{x0}" x2="{x1}" y1="{py:.1f}" y2="{py:.1f}" stroke="currentColor"'
                ' stroke-opacity="0.15"/>'
                f'<text x="{x0 - 6}" y="{py + 4:.1f}" text-anchor="end" fill="currentColor">'
                f"{esc(y_fmt(t))}</text>"
            )
        for t in x_ticks if x_ticks is not None else nice_ticks(*self.x_range):
            px = self.x(t)
            p.append(
                f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{y0}" y2="{y0 + 5}" stroke="currentColor"/>'
                f'<text x="{px:.1f}" y="{y0 + 18}" text-anchor="middle" fill="currentColor">'
                f"{esc(x_fmt(t))}</text>"
            )
        p.append(
            f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="none"'
            ' stroke="currentColor" stroke-opacity="0.6"/>'
            f'<text class="xlabel" x="{(x0 + x1) / 2:.1f}" y="{self.height - 10}"'
            f' text-anchor="middle" fill="currentColor">{esc(self.x_label)}</text>'
            f'<text class="ylabel" transform="translate(16 {(y0 + y1) / 2:.1f}) rotate(-90)"'
            f' text-anchor="middle" fill="currentColor">{esc(self.y_label)}</text>'
        )


_SIZE = re.compile(r'<svg [^>]*?width="(\d+)" height="(\d+)"')


def stack_svg(charts: Sequence[str], *, title: str, standalone: bool = True) -> str:
    """Several inline charts (from this package) one under the other in one SVG document."""
    parts, y, width = [], 0, 0
    for chart in charts:
        m = _SIZE.search(chart)
        w, h = (int(m.group(1)), int(m.group(2))) if m else (640, 360)
        parts.append(chart.replace("<svg ", f'<svg x="0" y="{y}" ', 1))
        y += h + 10
        width = max(width, w)
    return svg_document(width, max(y - 10, 1), "".join(parts), title=title, standalone=standalone)
