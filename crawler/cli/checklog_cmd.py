"""``quants check-log``: llama.cpp's own log of a run next to the estimate of the same run."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from crawler.cli._app import app
from crawler.cli._llama_opts import CpuMoeOpt, NCpuMoeOpt
from crawler.cli._options import JsonOpt

if TYPE_CHECKING:
    from crawler.library.checklog import CheckReport


@app.command("check-log")
def check_log(
    log: Annotated[
        Path,
        typer.Argument(help="A llama-server / llama-cli log (run with -lv 4).", show_default=False),
    ],
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="The GGUF the log ran (local path, URL or owner/repo/file.gguf); default: the"
            " path named in the log.",
        ),
    ] = None,
    cpu_moe: CpuMoeOpt[bool] = False,
    n_cpu_moe: NCpuMoeOpt[int | None] = None,
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu",
            help="The GPU the run used: its decode speed (eval time / predicted_per_second) is"
            " then compared with quants' estimate.",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Compare the buffers llama.cpp logged (model, KV, RS, compute, output; or the memory
    breakdown at exit) with quants' estimate of the same configuration. The log does not show
    --cpu-moe / --n-cpu-moe: give them as the run had them."""
    from crawler import api
    from crawler.cli._output import print_answer, safe_text

    answer = api.check_log(log, model=model, cpu_moe=cpu_moe, n_cpu_moe=n_cpu_moe, gpu=gpu)
    if as_json:
        print_answer(answer)
    else:
        extra = "" if answer.draft_line is None else "\n" + safe_text(answer.draft_line)
        typer.echo(_render(answer.report) + extra)
        if answer.speed is not None:
            typer.echo(_render_speed(answer.speed))


def _render_speed(s: Mapping[str, Any]) -> str:
    m = s["measured"]
    line = f"decode: measured {m['tok_s']:.1f} tok/s"
    if m["depth"]:
        line += f" with ~{m['depth']:,} tokens in the cache"
    if m["draft_acceptance"] is not None:
        line += f", draft acceptance {m['draft_acceptance']:.3f} (mean len {m['mean_len']})"
    if s["predicted_tok_s"] is not None:
        line += f"; predicted {s['predicted_tok_s']:.1f} ({s['diff_pct']:+.1f} %, {s['basis']})"
    else:
        line += "; pass --gpu NAME for the estimate"
    return line


def _render(r: CheckReport) -> str:
    from crawler.cli._output import format_table, human_bytes, safe_text

    c = r.config
    head = (
        f"{safe_text(c.model_path or '-')}  ctx {c.ctx}  K {r.run.type_k} / V {r.run.type_v}"
        f"  FA {r.run.flash_attn}  n_seq {c.n_seq}  ubatch {r.run.ubatch}"
        + (
            f"  offloaded {c.n_gpu_layers}/{c.n_layers} layers"
            if c.n_gpu_layers is not None
            else f"  -ngl {r.run.n_gpu_layers} (no GPU buffer logged)"
            if r.scope == "host"
            else ""
        )
    )

    def diff(logged: int, predicted: int | None) -> str:
        if predicted is None:
            return "-"
        d = predicted - logged
        return ("+" if d >= 0 else "-") + human_bytes(abs(d))

    rows = [
        (
            b.name,
            b.device,
            human_bytes(b.logged_bytes),
            _opt(b.predicted_bytes),
            diff(b.logged_bytes, b.predicted_bytes),
        )
        for b in r.buffers
    ]
    rows.append(
        (
            f"total ({r.scope})",
            "",
            human_bytes(r.logged_total),
            human_bytes(r.predicted_total),
            diff(r.logged_total, r.predicted_total),
        )
    )
    table = format_table(
        ("buffer", "device", "logged", "predicted", "difference"),
        rows,
        align_right=("logged", "predicted", "difference"),
    )
    pct = r.diff_pct
    verdict = (
        f"{'agrees' if r.within_tolerance else 'DISAGREES'}: {pct:+.2f}% "
        f"(tolerance {human_bytes(r.tolerance_bytes)})"
        if pct is not None and r.within_tolerance is not None
        else "no verdict: no logged buffer could be compared with a prediction"
    )
    lines = [head, f"estimated from {safe_text(r.estimated_from)}", "", table, "", verdict]
    if r.source == "breakdown":
        lines.append("(from the memory breakdown at exit; MiB rounded by llama.cpp)")
    lines += [f"note: {safe_text(n)}" for n in r.notes]
    if r.within_tolerance is False:
        lines.append("the estimate is off: see docs/check-log.md to send this log as a receipt")
    return "\n".join(lines)


def _opt(n: int | None) -> str:
    from crawler.cli._output import human_bytes

    return "-" if n is None else human_bytes(n)
