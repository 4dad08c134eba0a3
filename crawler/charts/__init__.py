"""Charts as server-side SVG text (pure: no I/O, no third-party library, no script).

``quants serve`` inlines them in its pages and ``quants estimate/compare --plot FILE.svg`` writes
them to files. Colours: axes, labels and text use ``currentColor`` (the page's text colour, so
light and dark mode both read); data colours are mid-tone hues legible on either background.
Every string that reaches the SVG (Hub names, GGUF metadata) is XML-escaped in .svg.
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
