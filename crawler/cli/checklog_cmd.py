"""``quants check-log``: llama.cpp's own log of a run next to the estimate of the same run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from crawler.cli._app import JsonOpt, app

if TYPE_CHECKING:
    from crawler.checklog import CheckReport
    from crawler.gguf.parse import GGUFHeader


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
    from crawler.cli._output import print_json
    from crawler.config import Settings
    from crawler.errors import UsageError
    from crawler.fit import coefficients
    from crawler.fit.llamalog import LogError, parse_log
    from crawler.targets import read_target

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
    logged = parsed.buffers or parsed.breakdown
    cpu_only = bool(logged) and all(b.on_host for b in logged)
    run, notes = run_config(parsed.config, coeffs, source, n_cpu_moe=moe, cpu_only=cpu_only)
    report = compare(parsed, coeffs, estimate_run(coeffs, run), notes, estimated_from=source)
    drafted = _draft_lines(text, header, source)
    if as_json:
        doc = report.to_json()
        if drafted is not None:
            doc["mtp_draft"] = drafted[0]
        print_json(doc)
    else:
        typer.echo(_render(report) + ("" if drafted is None else "\n" + drafted[1]))


def _draft_lines(text: str, header: GGUFHeader, source: str) -> tuple[dict[str, Any], str] | None:
    """The log's measured draft acceptance beside the file's graded MTP reading (JSON, text);
    None when the log has no draft lines."""
    from crawler.cli._output import safe_text
    from crawler.profile.build import build_profile
    from crawler.profile.mtp_grade import draft_acceptance, mtp_grade

    acc = draft_acceptance(text)
    if acc is None:
        return None
    mtp = build_profile(header, file_name=source.rsplit("/", 1)[-1]).mtp
    grade = mtp_grade(mtp.state, mtp.min_bits)
    line = (
        f"MTP drafting, measured in this log: {acc.rate:.1%} accepted ({acc.accepted} of"
        f" {acc.generated} drafted tokens, {acc.requests} request(s)); head: {grade.reading}"
    )
    return {**acc.to_json(), **grade.to_json()}, safe_text(line)


def _from_catalog(db_url: str, path: str) -> tuple[str, GGUFHeader] | None:
    """The stored header of the quant whose file name is ``path``'s, if the catalog has one."""
    from crawler.catalog.stored_headers import header_by_file_name
    from crawler.crawl.catalogs import reading
    from crawler.errors import CatalogError
    from crawler.profile.build import merge_headers

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
