"""``quants inspect``: read one GGUF header (file, URL, Hub file or quant), show its precision."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from crawler.cli._app import app
from crawler.cli._options import JsonOpt

if TYPE_CHECKING:
    from crawler.library.targets import HeaderRead
    from crawler.profile.precision import PrecisionProfile


@app.command("inspect")
def inspect(
    target: Annotated[
        str,
        typer.Argument(
            help="A local .gguf, an http(s) URL, owner/repo/path.gguf or owner/repo:QUANT.",
            show_default=False,
        ),
    ],
    as_json: JsonOpt = False,
    tensors: Annotated[
        bool, typer.Option("--tensors", help="Also list every tensor (name, type, shape, bytes).")
    ] = False,
) -> None:
    """Show which tensors of a GGUF are at which precision, the MTP/attention verdicts and any
    contradiction between its name and its contents (reads only the header)."""
    from crawler import api
    from crawler.cli._output import print_answer, safe_text

    answer = api.inspect(
        target, tensors=tensors, announce=lambda text: typer.echo(safe_text(text), err=True)
    )
    if as_json:
        print_answer(answer)
    else:
        typer.echo(_render(answer.read, answer.profile, tensors))


def _mainline(p: PrecisionProfile) -> str:
    if p.vocab_only:
        return "n/a (vocabulary only, no tensors)"
    if p.data_truncated:
        return "CANNOT load (the file ends before its tensors' data)"
    if not p.loadable_by_mainline and p.mtp.state == "declared_missing":
        return "CANNOT load (declared MTP layers have no tensors)"
    return "loads" if p.loadable_by_mainline else "CANNOT load"


def _attention_kind(kind: str, index: int, swa: list[bool]) -> str:
    """A block's attention: full, sliding-window (llama.cpp's SWA pattern), recurrent, mtp."""
    if kind != "attention":
        return kind
    return "sliding-window" if index < len(swa) and swa[index] else "full"


def _yes(value: bool | None) -> str:
    return "n/a" if value is None else "yes" if value else "NO"


def _render(read: HeaderRead, p: PrecisionProfile, tensors: bool) -> str:
    from crawler.cli._output import format_table, human_bytes, safe_text
    from crawler.profile.mtp_grade import mtp_grade

    lines = [f"! {safe_text(claim)}" for claim in p.claims]
    if p.claims:
        lines.append("")
    mtp = p.mtp
    mtp_text = mtp.state
    if mtp.present:
        mtp_text += f", layers {','.join(map(str, mtp.layers))}, min {mtp.min_bits}-bit"
        mtp_text += f", preserved {_yes(mtp.preserved)}"
    mtp_text += f"; {mtp_grade(mtp.state, mtp.min_bits).reading}"
    attn = "none" if p.attention_min_bits is None else f"min {p.attention_min_bits}-bit"
    facts = [
        ("source", safe_text(read.source)),
        ("revision", read.revision or "-"),
        ("architecture", safe_text(p.architecture or "-")),
        ("quant label", safe_text(p.quant_label or "-")),
        ("file type", p.file_type or "-"),
        ("size", human_bytes(read.size_bytes)),
        ("params", f"{p.n_params:,}"),
        ("bpw", f"{p.bpw:.4f}" if p.bpw is not None else "-"),
        ("MTP", mtp_text),
        ("attention", f"{attn}, preserved {_yes(p.attention_preserved)}"),
        ("dynamic", _yes(p.dynamic)),
        ("mainline llama.cpp", _mainline(p)),
        (
            "header",
            f"{human_bytes(read.header_bytes)}; fetched {human_bytes(read.bytes_fetched)} "
            f"in {read.requests} request(s)",
        ),
    ]
    if p.data_truncated:
        facts.append(("data", "TRUNCATED: the file ends before its tensors' data (header whole)"))
    width = max(len(k) for k, _ in facts)
    lines.extend(f"{k.ljust(width)}  {v}" for k, v in facts)
    lines.append("")
    total = p.n_bytes or 1
    rows = [
        (
            name,
            g.n_tensors,
            f"{g.n_params:,}",
            " ".join(f"{t}x{n}" for t, n in g.types.items()),
            "-" if g.min_bits is None else f"{g.min_bits}-{g.max_bits}",
            "-" if g.bpw is None else f"{g.bpw:.2f}",
            human_bytes(g.n_bytes),
            f"{100 * g.n_bytes / total:.1f}%",
        )
        for name, g in p.groups.items()
    ]
    cols = ("group", "tensors", "params", "types", "bits", "bpw", "bytes", "share")
    if p.vocab_only:
        lines.append("vocabulary only, no tensors: a tokenizer file, not a model")
    else:
        lines.append(
            format_table(cols, rows, align_right=("tensors", "params", "bpw", "bytes", "share"))
        )
    if p.sized_from_offsets:
        lines.append(
            f"{p.sized_from_offsets} tensor(s) of unknown type: bytes from the file's offsets,"
            " bits unknown"
        )
    if tensors:
        from crawler.fit import sliding_window_layers

        swa = sliding_window_layers(read.header) or []
        lines.append("")
        lrows = [
            (
                layer.index,
                _attention_kind(layer.kind, layer.index, swa),
                layer.stats.n_tensors,
                " ".join(f"{t}x{n}" for t, n in layer.stats.types.items()),
                "-" if layer.stats.bpw is None else f"{layer.stats.bpw:.2f}",
                human_bytes(layer.stats.n_bytes),
            )
            for layer in p.layers
        ]
        lcols = ("layer", "attention", "tensors", "types", "bpw", "bytes")
        lines.append(format_table(lcols, lrows, align_right=("layer", "tensors", "bpw", "bytes")))
        lines.append("")
        trows = [
            (
                t.name,
                t.group,
                t.type_name,
                "x".join(map(str, t.shape)),
                "-" if t.n_bytes is None else human_bytes(t.n_bytes),
            )
            for t in p.tensors
        ]
        lines.append(format_table(("tensor", "group", "type", "shape", "bytes"), trows))
    return "\n".join(lines)
