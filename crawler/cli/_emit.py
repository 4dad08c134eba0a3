"""``quants search --emit``: write the results' launcher configs (crawler.ranking.launchers)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crawler.api import SearchAnswer


def check_emit(fmt: str | None, out: Path | None, as_json: bool) -> None:
    """Refuse a bad --emit / --out before anything is searched or looked up."""
    from crawler.base.errors import UsageError

    if fmt is None:
        if out is not None:
            raise UsageError("--out goes with --emit FORMAT")
        return
    from crawler.ranking.launchers import FORMATS

    if fmt not in FORMATS:
        raise UsageError(f"--emit {fmt!r}: one of {', '.join(FORMATS)}")
    if as_json and out is None:
        raise UsageError("--emit prints the configs on stdout: with --json, give --out")
    if out is not None and fmt == "llama-swap" and out.is_dir():
        raise UsageError(f"--out {out}: a folder; --emit llama-swap writes one config file")
    if out is not None and fmt != "llama-swap" and out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: not a folder; --emit {fmt} writes one file per result")


def write_launchers(answer: SearchAnswer, fmt: str, out: Path | None) -> None:
    """The configs on stdout (out None), in the file (llama-swap) or one file per result in the
    folder ``out``; each thing a format cannot express is a note on stderr."""
    from crawler.base.errors import UsageError
    from crawler.cli._output import echo, safe_text
    from crawler.ranking.launchers import dump_yaml, render

    emitted = answer.launchers(fmt)
    for e in emitted:
        for note in e.notes:
            echo(safe_text(f"note: rank {e.rank} {e.id}: {note}"), err=True)
    if out is None:
        echo(render(fmt, emitted), nl=False)
        return
    try:
        if fmt == "llama-swap":
            out.write_text(render(fmt, emitted), encoding="utf-8")
            echo(safe_text(f"wrote {out} ({len(emitted)} models)"), err=True)
            return
        out.mkdir(parents=True, exist_ok=True)
        written = 0
        for e in emitted:
            if e.document is None:
                continue
            text = e.document if isinstance(e.document, str) else dump_yaml(e.document)
            (out / e.file_name).write_text(text, encoding="utf-8")
            written += 1
    except OSError as exc:
        raise UsageError(f"--out {out}: {exc.strerror}") from None
    echo(safe_text(f"wrote {written} file(s) into {out}"), err=True)
