"""``quants compare``: every quant of one base model side by side, bits per tensor group."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from crawler.cli._app import app
from crawler.cli._ondemand import OfflineOpt
from crawler.cli._options import DbOpt, JsonOpt

if TYPE_CHECKING:
    from crawler.catalog.comparison import ComparedQuant, Comparison

#: Table columns: (group name in the catalog, header).
_GROUPS = (
    ("token_embd", "embd"),
    ("output", "output"),
    ("attn", "attn"),
    ("linear_attn", "lin.attn"),
    ("ffn", "ffn"),
    ("ffn_exps", "experts"),
    ("ffn_shexp", "shexp"),
    ("mtp", "mtp"),
)


@app.command("compare")
def compare(
    query: Annotated[
        str, typer.Argument(help="Base model (fuzzy), e.g. 'qwen3.6 27b' or 'Qwen/Qwen3.6-27B'.")
    ],
    as_json: JsonOpt = False,
    db: DbOpt = None,
    offline: OfflineOpt = False,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="Also write FILE.svg: bits per tensor group per quant, and size vs quality.",
        ),
    ] = None,
) -> None:
    """One base model's quants side by side: uploader, size and the bits of each tensor group.

    A model not looked up in the last 24 h is first looked up on the Hub (docs/ondemand.md).
    """
    from crawler import api
    from crawler.cli._ondemand import lookup_hooks
    from crawler.cli._output import print_answer

    if plot is not None:
        from crawler.cli._plot import check_plot_path

        check_plot_path(plot)
    answer = api.compare(query, db=db, offline=offline, **lookup_hooks(), watches=True)
    if plot is not None:
        _plot(plot, answer.comparison)
    if as_json:
        print_answer(answer)
        return
    typer.echo(_render(answer.comparison))


def _plot(path: Path, c: Comparison) -> None:
    """The model page's two charts of ``quants serve``, stacked in one SVG file."""
    from crawler.charts import (
        ScatterPoint,
        heatmap_svg,
        quant_group_bits,
        scatter_svg,
        stack_svg,
    )
    from crawler.cli._plot import write_plot

    def name(q: ComparedQuant) -> str:
        return f"{q.repo_id}: {q.quant_label or q.path}"

    rows = [(name(q), [(g.name, g.min_bits, g.max_bits) for g in q.groups]) for q in c.quants]
    points = [
        ScatterPoint(name(q), q.size_bytes, q.quality) for q in c.quants if q.quality is not None
    ]
    charts = [
        heatmap_svg(quant_group_bits(rows), title=f"Bits per tensor group: {c.base_model}",
                    row_axis="quant (uploader/repo: label)"),
        scatter_svg(points, title=f"Size vs estimated quality: {c.base_model}"),
    ]  # fmt: skip
    write_plot(path, stack_svg(charts, title=f"{c.base_model}: {len(c.quants)} quants"))
    typer.echo(f"wrote {path}", err=True)


def _bits(lo: float | None, hi: float | None) -> str:
    if lo is None:
        return "?" if hi is None else f"?-{hi:g}"
    if hi is None or hi == lo:
        return f"{lo:g}"
    return f"{lo:g}-{hi:g}"


def _verdict(present: bool | None, preserved: bool | None, bits: float | None) -> str:
    # Verdicts are the point of the table: "ok" / "LOW" stand out in plain text and in grep.
    if present is False:
        return "-"
    if preserved is True:
        return f"ok {bits:g}" if bits is not None else "ok"
    if preserved is False:
        return f"LOW {bits:g}" if bits is not None else "LOW"
    return "?"


def _render(c: Comparison) -> str:
    from crawler.cli._output import format_table, human_bytes, safe_text

    shown = [(name, head) for name, head in _GROUPS if any(q_has(q, name) for q in c.quants)]
    columns = ["repo (uploader/name)", "quant", "size", "MTP", "attn", *[head for _, head in shown],
               "quality", "measured"]  # fmt: skip
    rows = []
    for q in c.quants:
        by = {g.name: g for g in q.groups}
        mtp = q.mtp_state if q.mtp_state not in (None, "present", "absent") else None
        rows.append(
            [
                q.repo_id,
                q.quant_label or q.path,
                human_bytes(q.size_bytes),
                mtp or _verdict(q.mtp_present, q.mtp_preserved, q.mtp_min_bits),
                _verdict(True, q.attn_preserved, q.attn_min_bits),
                *[
                    _bits(by[name].min_bits, by[name].max_bits) if name in by else "-"
                    for name, _ in shown
                ],
                f"{q.quality:.1f}" if q.quality is not None else "-",
                _measured_cell(q),
            ]
        )
    header = f"{safe_text(c.base_model)}: {len(c.quants)} quants, smallest first (bits: min-max)"
    text = header + "\n" + format_table(columns, rows, align_right=["size", "quality"])
    notes = [
        f"  {safe_text(q.repo_id)}:{safe_text(q.quant_label or q.path)}: {safe_text(m.label())},"
        f" {safe_text(m.corpus or 'corpus not stated')}; {safe_text(m.source_url)}"
        for q in c.quants
        for m in q.measured
    ]
    if notes:
        text += (
            "\nquality: 0-100 estimate (docs/models.md); measured: published by the repo for that"
            " exact file (name, size and revision), shown beside the estimate:\n" + "\n".join(notes)
        )
    return text


def _measured_cell(q: ComparedQuant) -> str:
    kld = [m for m in q.measured if m.metric == "mean_kld"]
    return f"KLD {kld[0].value:.4g}" if kld else ("yes" if q.measured else "-")


def q_has(q: ComparedQuant, name: str) -> bool:
    """True when the quant has tensors in group ``name``."""
    return any(g.name == name for g in q.groups)
