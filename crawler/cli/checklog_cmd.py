"""``quants check-log``: llama.cpp's own log of a run next to the estimate of the same run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from crawler.cli._app import JsonOpt, app

if TYPE_CHECKING:
    from crawler.checklog import CheckReport
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
    as_json: JsonOpt = False,
) -> None:
    """Compare the buffers llama.cpp logged (model, KV, RS, compute, output; or the memory
    breakdown at exit) with quants' estimate of the same configuration."""
    from crawler.checklog import compare, estimate_run, run_config
    from crawler.cli._output import print_json, safe_text
    from crawler.config import Settings
    from crawler.errors import UsageError
    from crawler.fit import coefficients
    from crawler.llamalog import LogError, parse_log, read_log_lines
    from crawler.source import read_target

    try:
        # Streamed line by line (bounded memory and line length: crawler/llamalog.py).
        with log.open("rb") as fh:
            if not fh.read(1 << 16).strip():
                raise LogError(f"{safe_text(log)} is empty")
            fh.seek(0)
            parsed = parse_log(read_log_lines(fh))
    except OSError as exc:
        raise UsageError(f"cannot read {safe_text(log)}: {exc.strerror}") from None
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
    if as_json:
        print_json(report.to_json())
    else:
        typer.echo(_render(report))


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
