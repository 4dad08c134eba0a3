"""``quants check-log``: llama.cpp's own log of a run next to the estimate of the same run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from crawler.cli._app import JsonOpt, app

if TYPE_CHECKING:
    from crawler.checklog import CheckReport
    from crawler.fit import MemoryCoefficients, RunConfig
    from crawler.gguf import GGUFHeader


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
    cpu_moe: Annotated[
        bool, typer.Option("--cpu-moe", help="The run used --cpu-moe (not shown in its log).")
    ] = False,
    n_cpu_moe: Annotated[
        int | None,
        typer.Option("--n-cpu-moe", min=0, help="The run used --n-cpu-moe N (not in its log)."),
    ] = None,
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
    breakdown at exit) with quants' estimate of the same configuration."""
    from crawler.checklog import compare, estimate_run, run_config
    from crawler.cli._output import print_json
    from crawler.config import Settings
    from crawler.errors import UsageError
    from crawler.fit import coefficients
    from crawler.llamalog import LogError, parse_log
    from crawler.source import read_target

    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read {log}: {exc.strerror}") from None
    if not text.strip():
        raise LogError(f"{log} is empty")
    parsed = parse_log(text)
    settings = Settings.from_env()
    target = model or parsed.config.model_path
    if target is None:
        raise UsageError("the log does not name its model; pass --model PATH")
    if model is None and not Path(target).exists():
        stored = _from_catalog(settings.resolved_db_url, target)
        if stored is None:
            raise UsageError(
                f"the model named in the log ({target}) is not on this machine nor (by its file"
                " name) in the catalog; pass --model with its path, URL or owner/repo/file.gguf"
            )
        source, header = stored
    else:
        read = read_target(target, settings)
        source, header = read.source, read.header
    coeffs = coefficients(header)
    moe = (1 << 30) if cpu_moe else n_cpu_moe
    run, notes = run_config(parsed.config, coeffs, source, n_cpu_moe=moe)
    report = compare(parsed, coeffs, estimate_run(coeffs, run), notes, estimated_from=source)
    speed = _speed_check(text, coeffs, run, gpu, source)
    if as_json:
        print_json({**report.to_json(), "speed": speed})
    else:
        typer.echo(_render(report))
        if speed is not None:
            typer.echo(_render_speed(speed))


def _speed_check(
    text: str, coeffs: MemoryCoefficients, run: RunConfig, gpu: str | None, source: str = ""
) -> dict[str, Any] | None:
    """Measured decode speed (and acceptance) of the log's last request, with the estimate
    for the same run on ``gpu`` at the acceptance the log shows."""
    import dataclasses

    from crawler.gpus import resolve_gpu
    from crawler.ranking.evaluate import speed_inputs
    from crawler.speed import DEFAULT_ACCEPTANCE, estimate_speed, per_token_acceptance
    from crawler.speedlog import parse_timings

    t = parse_timings(text)
    if t is None:
        return None
    out: dict[str, Any] = {"measured": t.to_json(), "predicted_tok_s": None}
    if gpu is None:
        return out
    g = resolve_gpu(gpu).gpu
    drafting = t.draft_generated > 0
    k = run.spec_draft_n_max if drafting else 0
    a = DEFAULT_ACCEPTANCE
    if drafting and t.mean_len is not None:
        a = per_token_acceptance(t.mean_len, k)
    label = Path(source).name if source else None
    x = dataclasses.replace(speed_inputs(coeffs, run, label=label), mtp=drafting, draft_n_max=k)
    est = estimate_speed(x, g.bandwidth_gb_s, acceptance=a)
    out.update(
        gpu=g.name,
        predicted_tok_s=round(est.tok_s, 1),
        diff_pct=round(100 * (est.tok_s / t.tok_s - 1), 1),
        acceptance_used=round(a, 4) if drafting else None,
        basis=est.basis,
    )
    return out


def _render_speed(s: dict[str, Any]) -> str:
    m = s["measured"]
    line = f"decode: measured {m['tok_s']:.1f} tok/s"
    if m["draft_acceptance"] is not None:
        line += f", draft acceptance {m['draft_acceptance']:.3f} (mean len {m['mean_len']})"
    if s["predicted_tok_s"] is not None:
        line += f"; predicted {s['predicted_tok_s']:.1f} ({s['diff_pct']:+.1f} %, {s['basis']})"
    else:
        line += "; pass --gpu NAME for the estimate"
    return line


def _from_catalog(db_url: str, path: str) -> tuple[str, GGUFHeader] | None:
    """The stored header of the quant whose file name is ``path``'s, if the catalog has one."""
    from crawler.catalog.reading import reading
    from crawler.catalog.stored_headers import header_by_file_name
    from crawler.errors import CatalogError
    from crawler.profile import merge_headers

    try:
        with reading(db_url) as reader:
            found = header_by_file_name(reader, path)
    except CatalogError:
        return None
    if found is None:
        return None
    repo_id, file_path, shards = found
    return f"{repo_id}/{file_path}", merge_headers(shards, source=file_path)


def _render(r: CheckReport) -> str:
    from crawler.cli._output import format_table, human_bytes, safe_text

    c = r.config
    head = (
        f"{safe_text(c.model_path or '-')}  ctx {c.ctx}  K {r.run.type_k} / V {r.run.type_v}"
        f"  FA {r.run.flash_attn}  n_seq {c.n_seq}  ubatch {r.run.ubatch}"
        f"  offloaded {c.n_gpu_layers}/{c.n_layers} layers"
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
            "total (GPU)",
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
        if pct is not None
        else "nothing logged on the GPU"
    )
    lines = [head, f"estimated from {safe_text(r.estimated_from)}", "", table, "", verdict]
    if r.source == "breakdown":
        lines.append("(from the memory breakdown at exit; MiB rounded by llama.cpp)")
    lines += [f"note: {safe_text(n)}" for n in r.notes]
    if not r.within_tolerance:
        lines.append("the estimate is off: see docs/check-log.md to send this log as a receipt")
    return "\n".join(lines)


def _opt(n: int | None) -> str:
    from crawler.cli._output import human_bytes

    return "-" if n is None else human_bytes(n)
