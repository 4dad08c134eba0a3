"""Heatmaps of nominal bits: layer x tensor group for one quant, quant x group for a base model.

A cell shows the lowest bits of the weight matrices it holds, with the range in its tooltip.
Details: docs/internals/charts.md#heatmap
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from crawler.charts.svg import esc, svg_document

__all__ = ["Heatmap", "heatmap_svg", "layer_group_bits", "quant_group_bits"]

#: Group columns in display order (crawler.profile.build.GROUPS minus the 1-D ones).
GROUP_ORDER = ("token_embd", "attn", "linear_attn", "ffn", "ffn_exps", "ffn_shexp", "router",
               "mtp", "output", "other")  # fmt: skip
# One fill per nominal width; text on these fills is black in both colour schemes.
_BIT_FILLS = (
    (2, "#f0625f"),
    (3, "#f59b51"),
    (4, "#f5d061"),
    (5, "#b7dd6d"),
    (6, "#6fcf8a"),
    (8, "#4fc1c9"),
    (16, "#79a7f2"),
    (32, "#b49cf2"),
)


class BitsRow(Protocol):
    """What a heatmap needs of a tensor row (crawler.profile.build.TensorRow has it)."""

    @property
    def layer(self) -> int | None: ...
    @property
    def group(self) -> str: ...
    @property
    def bits(self) -> int | None: ...
    @property
    def is_matrix(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Heatmap:
    """Rows x columns of (min_bits, max_bits) cells; None where the row has no such tensors."""

    row_labels: tuple[str, ...]
    col_labels: tuple[str, ...]
    cells: tuple[tuple[tuple[float, float] | None, ...], ...]

    def to_json(self) -> dict[str, object]:
        """For the JSON API: rows, columns and ``[min, max]`` cells (null where empty)."""
        return {
            "rows": list(self.row_labels),
            "columns": list(self.col_labels),
            "cells": [[list(c) if c else None for c in row] for row in self.cells],
        }


def _fill(bits: float) -> str:
    for limit, colour in _BIT_FILLS:
        if bits <= limit:
            return colour
    return _BIT_FILLS[-1][1]


def layer_group_bits(rows: Iterable[BitsRow]) -> Heatmap:
    """Per block (``blk.N``) and group: min/max nominal bits of its weight matrices."""
    found: dict[tuple[int, str], tuple[float, float]] = {}
    for r in rows:
        layer, group, bits = r.layer, r.group, r.bits
        if layer is None or bits is None or not r.is_matrix:
            continue
        lo, hi = found.get((layer, group), (bits, bits))
        found[(layer, group)] = (min(lo, bits), max(hi, bits))
    layers = sorted({k[0] for k in found})
    groups = [g for g in GROUP_ORDER if any(k[1] == g for k in found)]
    return Heatmap(
        tuple(f"blk.{il}" for il in layers),
        tuple(groups),
        tuple(tuple(found.get((il, g)) for g in groups) for il in layers),
    )


def quant_group_bits(
    quants: Sequence[tuple[str, Sequence[tuple[str, float | None, float | None]]]],
) -> Heatmap:
    """One row per quant (label, [(group, min_bits, max_bits)]), one column per group present."""
    present = {g for _, groups in quants for g, lo, _ in groups if lo is not None}
    cols = [g for g in GROUP_ORDER if g in present]
    # 1-D tensors (norms) are F32 everywhere: a column of 32s says nothing.
    cols += sorted(present - set(cols) - {"norm"})
    rows = []
    for _, groups in quants:
        by = {g: (lo, hi if hi is not None else lo) for g, lo, hi in groups if lo is not None}
        rows.append(tuple(by.get(g) for g in cols))
    return Heatmap(
        tuple(label for label, _ in quants),
        tuple(cols),
        tuple(rows),
    )


def heatmap_svg(
    hm: Heatmap,
    *,
    title: str,
    row_axis: str,
    col_axis: str = "tensor group",
    standalone: bool = False,
) -> str:
    """The heatmap with a bits legend; every cell has a tooltip (row, column, bits)."""
    label_w = min(320, 12 + 7 * max((len(r) for r in hm.row_labels), default=4))
    cell_w, cell_h = 64, 16 if len(hm.row_labels) > 30 else 22
    top, left = 70, label_w + 30
    width = max(left + cell_w * len(hm.col_labels), left + 44 * len(_BIT_FILLS), 520) + 20
    height = top + cell_h * len(hm.row_labels) + 20
    p: list[str] = [
        f'<text class="xlabel" x="{left}" y="14" fill="currentColor">'
        f"{esc(col_axis)} (cells: lowest nominal bits of the weight matrices)</text>",
        f'<text class="ylabel" x="6" y="{top - 8}" fill="currentColor">{esc(row_axis)}</text>',
    ]
    for j, col in enumerate(hm.col_labels):
        x = left + j * cell_w + cell_w / 2
        p.append(
            f'<text x="{x:.0f}" y="{top - 8}" text-anchor="middle" fill="currentColor">'
            f"{esc(col)}</text>"
        )
    for lx, (bits, colour) in enumerate(_BIT_FILLS):
        x = left + lx * 44
        p.append(
            f'<rect x="{x}" y="24" width="40" height="14" fill="{colour}"/>'
            f'<text x="{x + 20}" y="35" text-anchor="middle" fill="#000">'
            f"{'&lt;=' if lx == 0 else ''}{bits}b</text>"
        )
    for i, (label, row) in enumerate(zip(hm.row_labels, hm.cells, strict=True)):
        y = top + i * cell_h
        shown = label if len(label) <= 44 else label[:41] + "..."
        p.append(
            f'<text x="{left - 6}" y="{y + cell_h * 0.7:.1f}" text-anchor="end"'
            f' fill="currentColor"><title>{esc(label)}</title>{esc(shown)}</text>'
        )
        for j, cell in enumerate(row):
            x = left + j * cell_w
            if cell is None:
                p.append(
                    f'<rect x="{x + 1}" y="{y + 1}" width="{cell_w - 2}" height="{cell_h - 2}"'
                    ' fill="currentColor" fill-opacity="0.06"/>'
                )
                continue
            lo, hi = cell
            text = f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"
            tip = f"{label} / {hm.col_labels[j]}: {text} bits"
            p.append(
                f'<rect class="cell" x="{x + 1}" y="{y + 1}" width="{cell_w - 2}"'
                f' height="{cell_h - 2}" fill="{_fill(lo)}"><title>{esc(tip)}</title></rect>'
                f'<text x="{x + cell_w / 2:.0f}" y="{y + cell_h * 0.7:.1f}" text-anchor="middle"'
                f' fill="#000">{esc(text)}</text>'
            )
    return svg_document(width, height, "".join(p), title=title, standalone=standalone)
