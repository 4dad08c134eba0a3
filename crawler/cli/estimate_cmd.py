"""``quants estimate``: device memory of one GGUF under one llama-server configuration."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from crawler.cli._app import JsonOpt, VramOpt, app

if TYPE_CHECKING:
    from crawler.fit import FitEstimate, MemoryCoefficients, RunConfig
    from crawler.fit.setup import Setup
    from crawler.fit.vision import Projector
    from crawler.source import HeaderRead

_CACHE_HELP = "KV cache type: f32, f16, bf16, q8_0, q5_1, q5_0, q4_1, q4_0, iq4_nl."


@app.command("estimate")
def estimate_cmd(
    target: Annotated[
        str,
        typer.Argument(
            help="A local .gguf, an http(s) URL, owner/repo/path.gguf or owner/repo:QUANT.",
            show_default=False,
        ),
    ],
    ctx: Annotated[int, typer.Option("--ctx", "-c", min=1, help="Context length in tokens.")],
    cache_type_k: Annotated[str, typer.Option("--cache-type-k", "-ctk", help=_CACHE_HELP)] = "f16",
    cache_type_v: Annotated[str, typer.Option("--cache-type-v", "-ctv", help=_CACHE_HELP)] = "f16",
    flash_attn: Annotated[
        str, typer.Option("--flash-attn", "-fa", help="on, off or auto (auto is on with CUDA).")
    ] = "auto",
    parallel: Annotated[
        int,
        typer.Option(
            "--parallel",
            "-np",
            min=-1,
            help="Server slots (-np); -1 = llama-server's default (4 slots, unified cache).",
        ),
    ] = 1,
    ubatch: Annotated[
        int, typer.Option("--ubatch", "-ub", min=1, help="Physical batch (-ub).")
    ] = 512,
    mtp: Annotated[
        bool, typer.Option("--mtp/--no-mtp", help="MTP drafting (--spec-type draft-mtp).")
    ] = False,
    spec_draft_n_max: Annotated[
        int, typer.Option("--spec-draft-n-max", min=0, help="Draft tokens per step (MTP).")
    ] = 3,
    cache_type_k_draft: Annotated[
        str, typer.Option("--cache-type-k-draft", help="K cache type of the MTP draft context.")
    ] = "f16",
    cache_type_v_draft: Annotated[
        str, typer.Option("--cache-type-v-draft", help="V cache type of the MTP draft context.")
    ] = "f16",
    cpu_moe: Annotated[
        bool, typer.Option("--cpu-moe", help="Keep all routed experts in host memory.")
    ] = False,
    n_cpu_moe: Annotated[
        int, typer.Option("--n-cpu-moe", min=0, help="Keep the experts of the first N layers.")
    ] = 0,
    n_gpu_layers: Annotated[
        str,
        typer.Option(
            "--n-gpu-layers",
            "-ngl",
            "--gpu-layers",
            help="Slots on the GPU (blocks + output layer, from the last): N, 'all' or 'auto'"
            " (the most that fit --vram).",
        ),
    ] = "all",
    mmproj: Annotated[
        str | None,
        typer.Option("--mmproj", help="A local vision projector (mmproj) GGUF to add."),
    ] = None,
    no_mmproj: Annotated[
        bool, typer.Option("--no-mmproj", help="No projector (the default).")
    ] = False,
    gpus: Annotated[
        list[str] | None,
        typer.Option(
            "--gpu",
            help="GPU by name; repeat it or write '2x 3090' for several (layer split, per-device"
            " verdict; modelled from llama.cpp's source, not measured).",
        ),
    ] = None,
    tensor_split: Annotated[
        str | None,
        typer.Option(
            "--tensor-split", "-ts", help="Proportions per GPU, e.g. 3,1 (llama.cpp -ts)."
        ),
    ] = None,
    vram: VramOpt = None,
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
    from crawler.cli._output import print_json
    from crawler.config import Settings
    from crawler.fit import RunConfig, coefficients, estimate, max_ctx
    from crawler.fit.notes import estimate_warnings
    from crawler.ranking.model import Budget
    from crawler.source import read_target

    if plot is not None:
        from crawler.cli._plot import check_plot_path

        check_plot_path(plot)
    settings = Settings.from_env()
    read = read_target(target, settings)
    coeffs = coefficients(read.header)
    cfg = RunConfig(
        ctx=ctx,
        type_k=cache_type_k.lower(),
        type_v=cache_type_v.lower(),
        flash_attn=flash_attn.lower(),
        parallel=None if parallel == -1 else parallel,
        ubatch=ubatch,
        mtp=mtp,
        spec_draft_n_max=spec_draft_n_max,
        type_k_draft=cache_type_k_draft.lower(),
        type_v_draft=cache_type_v_draft.lower(),
        cpu_moe=cpu_moe,
        n_cpu_moe=n_cpu_moe,
        model_path=read.source,
    )
    est = estimate(coeffs, cfg)
    for line in estimate_warnings(read.header, coeffs, cfg):
        typer.echo(f"warning: {line}", err=True)
    setup = _setup(coeffs, cfg, n_gpu_layers, mmproj, no_mmproj, vram)
    data: dict[str, Any] = {
        "source": read.source,
        "architecture": coeffs.architecture,
        "ctx": est.n_ctx,
        "type_k": cfg.type_k,
        "type_v": cfg.type_v,
        "flash_attn": "on" if est.flash_attn else "off",
        "parallel": cfg.parallel,
        "mtp": cfg.mtp,
        "bytes": est.bytes_dict(),
        "host_bytes": est.host_bytes,
        "command": _command(read, cfg),
    }
    if setup is not None:
        import shlex

        data.update(setup.to_json())
        est = setup.as_fit_estimate()
        args = shlex.split(data["command"])
        if setup.offload.partial and "-ngl" in args:
            args[args.index("-ngl") + 1] = str(setup.offload.n_gpu_layers)
        if mmproj is not None:
            args += ["--mmproj", mmproj]
        data["command"] = shlex.join(args)
    advice: list[tuple[str, FitEstimate]] = []
    if vram is not None:
        budget = Budget.from_gib(vram, headroom_gib=0).device_bytes
        data["fits"] = est.total <= budget
        data["margin_bytes"] = budget - est.total
        # The largest context is the whole-GPU one; a partial offload keeps the asked context.
        partial = setup is not None and setup.offload.partial
        projector = setup.projector.total if setup is not None and setup.projector else 0
        data["max_ctx"] = None if partial else max_ctx(coeffs, cfg, budget - projector)
        if not data["fits"]:
            advice = _what_fits(coeffs, cfg, budget)
            data["alternatives"] = [
                {"change": text, "bytes": alt.bytes_dict(), "command": _command(read, alt.config)}
                for text, alt in advice
            ]
    if gpus and len(gpus) == 1 and not tensor_split and _apple(gpus[0]):
        # Apple silicon: Metal buffers, the working-set budget, and the note (crawler.fit.apple).
        from crawler.fit.apple import NOTE, metal_estimate
        from crawler.gpus import resolve_gpu

        est = metal_estimate(coeffs, cfg)
        apple_budget = (
            int(vram * 1024**3) if vram is not None else resolve_gpu(gpus[0]).gpu.budget_bytes
        )
        data.update(bytes=est.bytes_dict(), backend="metal", note=NOTE)
        data["fits"] = est.total <= apple_budget
        data["margin_bytes"] = apple_budget - est.total
    elif gpus or tensor_split:
        data["devices"] = _devices(coeffs, cfg, gpus or [], tensor_split, vram)
        data["fits"] = all(d["fits"] for d in data["devices"])
    if plot is not None:
        plot_budget = est.total + data["margin_bytes"] if "margin_bytes" in data else None
        _plot(plot, read, coeffs, cfg, plot_budget)
    if as_json:
        print_json(data)
    else:
        typer.echo(_render(read, coeffs, est, data, advice))
        if "note" in data:
            typer.echo(f"note: {data['note']}", err=True)

    if vram is not None and data.get("max_ctx") == 0:
        # Not even one token fits: the "nothing fits" exit code (README, Exit codes).
        raise typer.Exit(3)


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


def _setup(
    coeffs: MemoryCoefficients,
    cfg: RunConfig,
    n_gpu_layers: str,
    mmproj: str | None,
    no_mmproj: bool,
    vram: float | None,
) -> Setup | None:
    """The partial-offload / vision view of ``cfg`` (crawler.fit.setup), None for the default."""
    from crawler.errors import UsageError
    from crawler.fit.setup import parse_ngl, resolve_setup
    from crawler.ranking.model import Budget

    if mmproj is not None and no_mmproj:
        raise UsageError("--mmproj and --no-mmproj exclude each other")
    ngl = parse_ngl(n_gpu_layers)
    if ngl == "all" and mmproj is None:
        return None
    budget = Budget.from_gib(vram, headroom_gib=0).device_bytes if vram is not None else None
    projector = None
    if mmproj is not None:
        projector = _projector_from_file(mmproj)
    return resolve_setup(coeffs, cfg, ngl, budget, projector)


def _devices(
    coeffs: MemoryCoefficients,
    cfg: RunConfig,
    gpus: list[str],
    tensor_split: str | None,
    vram: float | None,
) -> list[dict[str, Any]]:
    """Per-device shares of a layer split over ``--gpu`` (or ``--vram`` x ``-ts`` entries)."""
    from crawler.fit.devices import estimate_devices, parse_tensor_split
    from crawler.gpus import device_set

    split = parse_tensor_split(tensor_split) if tensor_split is not None else ()
    ds = device_set(gpus, vram, split)
    names, budgets, split = ds.names, ds.budgets, ds.split
    shares = estimate_devices(coeffs, cfg, split, budgets)
    return [
        {"device": i, "name": names[i], "slots": [s.first, s.last], "total_bytes": s.total,
         "budget_bytes": s.budget, "margin_bytes": s.margin, "fits": s.margin >= 0,
         "static_bytes": s.static, "compute_bytes": s.compute, "overhead_bytes": s.overhead}
        for i, s in enumerate(shares)
    ]  # fmt: skip


def _apple(name: str) -> bool:
    from crawler.gpus import resolve_gpu

    return resolve_gpu(name).gpu.kind == "apple"


def _projector_from_file(path: str) -> Projector:
    """The projector of a local mmproj file (only its header is read)."""
    from pathlib import Path

    from crawler.errors import UsageError
    from crawler.fit.vision import projector
    from crawler.gguf import read_header
    from crawler.source import FileReader

    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--mmproj: no such file {path!r}")
    reader = FileReader(p)
    try:
        return projector(read_header(reader, file_size=p.stat().st_size, source=str(p)))
    finally:
        reader.close()


def _command(read: HeaderRead, cfg: RunConfig) -> str:
    """The llama-server command for ``cfg`` that loads this target: a local path as ``-m``, a URL
    as ``-mu`` (common/arg.cpp ``--model-url``), a Hub file as ``-hf``
    (crawler.ranking.commands)."""
    import shlex

    from crawler.fit import command
    from crawler.labels import parse_quant_label
    from crawler.ranking.commands import llama_server_command

    if read.repo_id is not None:
        path = read.shards[0] if read.shards else read.file_name
        label = parse_quant_label(path)
        return llama_server_command(
            read.repo_id, path, label.text if label else None, cfg, read.repo_files
        )
    text = command(cfg)
    if read.source.startswith(("http://", "https://")):
        args = shlex.split(text)
        args[args.index("-m")] = "-mu"
        text = shlex.join(args)
    return text


def _what_fits(
    coeffs: MemoryCoefficients, cfg: RunConfig, budget: int
) -> list[tuple[str, FitEstimate]]:
    """Settings that reach the same context within the budget, least lossy first."""
    from crawler.errors import InvalidConfig
    from crawler.fit import cheapest_cache_for, estimate

    out: list[tuple[str, FitEstimate]] = []
    best = cheapest_cache_for(coeffs, cfg, budget, cfg.ctx)
    if best is not None:
        change = f"-ctk {best.type_k} -ctv {best.type_v}"
        if best.mtp and (best.type_k_draft, best.type_v_draft) != ("f16", "f16"):
            change += f" -ctkd {best.type_k_draft} -ctvd {best.type_v_draft}"
        out.append((change, estimate(coeffs, best)))
    if cfg.mtp:
        try:
            no_mtp = cheapest_cache_for(coeffs, cfg.replace(mtp=False), budget, cfg.ctx)
        except InvalidConfig:
            no_mtp = None
        if no_mtp is not None:
            text = f"without MTP, -ctk {no_mtp.type_k} -ctv {no_mtp.type_v}"
            out.append((text, estimate(coeffs, no_mtp)))
    if coeffs.expert_bytes and not cfg.cpu_moe:
        moe = cfg.replace(cpu_moe=True, n_cpu_moe=0)
        alt = estimate(coeffs, moe)
        if alt.total <= budget:
            out.append(("--cpu-moe (experts in host memory)", alt))
    return out


def _render(
    read: HeaderRead,
    coeffs: MemoryCoefficients,
    est: FitEstimate,
    data: dict[str, Any],
    advice: list[tuple[str, FitEstimate]],
) -> str:
    from crawler.cli._output import format_table, human_bytes, safe_text
    from crawler.fit.notes import host_note, kv_note

    cfg = est.config
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
    rows = [(k, human_bytes(v), notes[k]) for k, v in est.bytes_dict().items()]
    head = (
        f"{safe_text(read.source)}  [{safe_text(coeffs.architecture or '-')}]  ctx {est.n_ctx}"
        f"  FA {'on' if est.flash_attn else 'off'}  np {cfg.parallel or 'auto (4, unified)'}"
        f"  MTP {'on' if cfg.mtp else 'off'}"
    )
    lines = [head, "", format_table(("component", "size", "note"), rows, align_right=("size",))]
    if "fits" in data:
        budget = est.total + data["margin_bytes"]
        verdict = "fits" if data["fits"] else "does NOT fit"
        largest = (
            f"largest context at these settings: {data['max_ctx']}"
            if data["max_ctx"]
            else "it does not fit at any context at these settings"
        )
        lines += [
            "",
            f"budget {human_bytes(budget)}: {verdict}, margin {_signed(data['margin_bytes'])};"
            f" {largest}",
        ]
        if advice:
            lines.append(f"fits at ctx {cfg.ctx} with:")
            for text, alt in advice:
                lines.append(
                    f"  {text}: total {human_bytes(alt.total)}"
                    f" (kv {human_bytes(alt.kv + alt.mtp_kv)}, compute {human_bytes(alt.compute)})"
                )
                lines.append(f"    {safe_text(_command(read, alt.config))}")
        elif not data["fits"]:
            lines.append(f"no cache setting reaches ctx {cfg.ctx} within the budget")
    lines += ["", safe_text(data["command"])]
    return "\n".join(lines)


def _signed(n: int) -> str:
    from crawler.cli._output import human_bytes

    return ("-" if n < 0 else "+") + human_bytes(abs(n))
