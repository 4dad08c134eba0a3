"""Charts as server-side SVG text (pure: no I/O, no third-party library, no script).

May import: base, fit.
Details: docs/internals/charts.md#overview
"""

from __future__ import annotations

from crawler.charts.heatmap import Heatmap, heatmap_svg, layer_group_bits, quant_group_bits
from crawler.charts.memory import MemoryCurve, memory_curves, memory_svg
from crawler.charts.scatter import ScatterPoint, pareto_front, scatter_svg
from crawler.charts.svg import stack_svg

__all__ = [
    "Heatmap",
    "MemoryCurve",
    "ScatterPoint",
    "heatmap_svg",
    "layer_group_bits",
    "memory_curves",
    "memory_svg",
    "pareto_front",
    "quant_group_bits",
    "scatter_svg",
    "stack_svg",
]
