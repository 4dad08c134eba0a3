"""``quants estimate``: device memory of one GGUF under one llama-server configuration."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from crawler.cli._app import app
from crawler.cli._llama_opts import (
    CacheTypeKOpt,
    CacheTypeVOpt,
    CpuMoeOpt,
    FlashAttnOpt,
    GpusOpt,
    NCpuMoeOpt,
    NGpuLayersOpt,
    ParallelOpt,
    SpecDraftNMaxOpt,
    TensorSplitOpt,
    UbatchOpt,
)
from crawler.cli._options import CtxOpt, HeadroomOpt, JsonOpt, VramOpt

if TYPE_CHECKING:
    from crawler.fit import MemoryCoefficients, RunConfig
    from crawler.library.estimating import EstimateReport
    from crawler.library.targets import HeaderRead


@app.command("estimate")
def estimate_cmd(
    target: Annotated[
        str,
        typer.Argument(
            help="A local .gguf, an http(s) URL, owner/repo/path.gguf or owner/repo:QUANT.",
            show_default=False,
        ),
    ],
    ctx: CtxOpt[int],
    cache_type_k: CacheTypeKOpt[str] = "f16",
    cache_type_v: CacheTypeVOpt[str] = "f16",
    flash_attn: FlashAttnOpt[str] = "auto",
    parallel: ParallelOpt[int] = 1,
    ubatch: UbatchOpt[int] = 512,
    mtp: Annotated[
        bool, typer.Option("--mtp/--no-mtp", help="MTP drafting (--spec-type draft-mtp).")
    ] = False,
    spec_draft_n_max: SpecDraftNMaxOpt[int] = 3,
    cache_type_k_draft: Annotated[
        str, typer.Option("--cache-type-k-draft", help="K cache type of the MTP draft context.")
    ] = "f16",
    cache_type_v_draft: Annotated[
        str, typer.Option("--cache-type-v-draft", help="V cache type of the MTP draft context.")
    ] = "f16",
    cpu_moe: CpuMoeOpt[bool] = False,
    n_cpu_moe: NCpuMoeOpt[int] = 0,
    n_gpu_layers: NGpuLayersOpt[str] = "all",
    mmproj: Annotated[
        str | None,
        typer.Option("--mmproj", help="A local vision projector (mmproj) GGUF to add."),
    ] = None,
    no_mmproj: Annotated[
        bool, typer.Option("--no-mmproj", help="No projector (the default).")
    ] = False,
    gpus: GpusOpt[list[str] | None] = None,
    tensor_split: TensorSplitOpt[str | None] = None,
    vram: VramOpt = None,
    headroom: HeadroomOpt = None,
    as_json: JsonOpt = False,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="Also write memory vs context per cache type to FILE.svg (with --vram: the"
            " budget line and the largest context of each).",
        ),
    ] = None,
) -> None:
    """Estimate the GPU memory llama-server needs for a GGUF at --ctx tokens (reads only the
    header); with --vram, say whether it fits, the largest context that does, and what fits."""
    from crawler import api
    from crawler.cli._output import print_answer

    if plot is not None:
        from crawler.cli._plot import check_plot_path

        check_plot_path(plot)
    answer = api.estimate(
        target, ctx=ctx, cache_type_k=cache_type_k, cache_type_v=cache_type_v,
        flash_attn=flash_attn, parallel=parallel, ubatch=ubatch, mtp=mtp,
        spec_draft_n_max=spec_draft_n_max, cache_type_k_draft=cache_type_k_draft,
        cache_type_v_draft=cache_type_v_draft, cpu_moe=cpu_moe, n_cpu_moe=n_cpu_moe,
        n_gpu_layers=n_gpu_layers, mmproj=mmproj, no_mmproj=no_mmproj, gpu=gpus,
        tensor_split=tensor_split, vram=vram, headroom=headroom, announce=_announce,
    )  # fmt: skip
    report = answer.report
    for line in answer.warnings:
        typer.echo(f"warning: {line}", err=True)
    if plot is not None:
        budget = report.budget_bytes if not report.devices else None
        _plot(plot, report.read, report.coefficients, report.config, budget)
    if as_json:
        print_answer(answer)
    else:
        typer.echo(_render(report))
        for note in report.notes:
            typer.echo(f"note: {note}", err=True)
    if report.max_ctx == 0:
        # Not even one token fits: the "nothing fits" exit code (README, Exit codes).
        raise typer.Exit(3)


def _announce(text: str) -> None:
    """The line said before a network step starts (so a slow Hub is never a silent one)."""
    from crawler.cli._output import safe_text

    typer.echo(safe_text(text), err=True)


def _plot(
    path: Path, read: HeaderRead, coeffs: MemoryCoefficients, cfg: RunConfig, budget: int | None
) -> None:
    """The memory-vs-context chart of ``quants serve``'s quant page, as a file (``budget``: the
    --vram budget in bytes, drawn as a line with each cache type's largest context)."""
    from crawler.charts import memory_curves, memory_svg
    from crawler.cli._plot import write_plot

    curves = memory_curves(coeffs, cfg, budget_bytes=budget)
    title = f"Device memory vs context: {read.source}"
    write_plot(path, memory_svg(curves, budget_bytes=budget, title=title, standalone=True))
    typer.echo(f"wrote {path}", err=True)


def _render(report: EstimateReport) -> str:
    from crawler.cli._output import format_table, human_bytes, safe_text
    from crawler.fit.notes import host_note, kv_note

    coeffs, est = report.coefficients, report.estimate
    cfg = report.config
    notes = {
        "weights": host_note(coeffs, est, human_bytes),
        "kv": kv_note(coeffs, est),
        "mtp_kv": f"draft context, K {cfg.type_k_draft} / V {cfg.type_v_draft}" if cfg.mtp else "",
        "recurrent": f"{coeffs.recurrent_layers} recurrent layers, f32"
        if coeffs.recurrent_layers
        else "",
        "compute": "compute buffers (fitted model)",
        "overhead": "CUDA context, kernels, cuBLAS/pool (fitted model)",
        "total": "",
    }
    if report.setup is not None and report.setup.offload.partial:
        o = report.setup.offload
        notes["total"] = f"GPU share: -ngl {o.n_gpu_layers} of {o.n_slots} layers"
    rows = [(k, human_bytes(v), notes[k]) for k, v in est.bytes_dict().items()]
    head = (
        f"{safe_text(report.read.source)}  [{safe_text(coeffs.architecture or '-')}]"
        f"  ctx {est.n_ctx}  FA {'on' if est.flash_attn else 'off'}"
        f"  np {cfg.parallel or 'auto (4, unified)'}  MTP {'on' if cfg.mtp else 'off'}"
    )
    lines = [head, "", format_table(("component", "size", "note"), rows, align_right=("size",))]
    if report.setup is not None:
        lines.append(f"host memory: {human_bytes(report.setup.offload.host_bytes)}")
    for d in report.devices:
        verdict = "fits" if d.margin >= 0 else "does NOT fit"
        name = safe_text(report.device_names[d.index])
        lines.append(
            f"GPU{d.index} {name}: layers {d.first}-{d.last - 1},"
            f" {human_bytes(d.total)} of {human_bytes(d.budget)}: {verdict}"
        )
    if report.fits is not None and report.margin_bytes is not None:
        assert report.budget_bytes is not None
        verdict = "fits" if report.fits else "does NOT fit"
        if report.max_ctx is None:
            largest = f"-ngl {report.setup.offload.n_gpu_layers if report.setup else '?'} keeps ctx"
            largest += f" {cfg.ctx} (the largest context is computed for all layers on the GPU)"
        elif report.max_ctx:
            largest = f"largest context at these settings: {report.max_ctx}"
        else:
            largest = "it does not fit at any context at these settings"
        tightest = ", tightest device" if report.devices else ""
        lines += [
            "",
            f"budget {report.budget_line}: {verdict}, margin"
            f" {_signed(report.margin_bytes)}{tightest}; {largest}",
        ]
        if report.alternatives:
            lines.append(f"fits at ctx {cfg.ctx} with:")
            for text, alt in report.alternatives:
                lines.append(
                    f"  {text}: total {human_bytes(alt.total)}"
                    f" (kv {human_bytes(alt.kv + alt.mtp_kv)}, compute {human_bytes(alt.compute)})"
                )
                lines.append(f"    {safe_text(report.command_for(alt.config))}")
        elif not report.fits and not report.devices and report.max_ctx is not None:
            lines.append(f"no cache setting reaches ctx {cfg.ctx} within the budget")
    lines += ["", safe_text(report.command)]
    return "\n".join(lines)


def _signed(n: int) -> str:
    from crawler.cli._output import human_bytes

    return ("-" if n < 0 else "+") + human_bytes(abs(n))
