"""Rendering for the CLI: tables, JSON, CSV. Text from the Hub is printed literally and safely."""

from __future__ import annotations

import codecs
import csv
import io
import json
import os
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

# C0 controls (ESC included), DEL and C1 controls: anything a terminal could act on.
# Shown as \xNN / \uNNNN so the text stays readable and the terminal stays ours. Surrogates too:
# a non-UTF-8 file name (os.fsdecode) or a JSON "\udXXX" escape holds them, and writing one
# either fails (strict stdout) or emits a raw byte such as 0x9b, an 8-bit CSI (surrogateescape).
_CONTROL = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def safe_text(value: object) -> str:
    """``str(value)`` with terminal control characters escaped (tabs and newlines become spaces)."""
    text = str(value).replace("\t", " ").replace("\n", " ")
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def echo(text: str, *, err: bool = False, nl: bool = True) -> None:
    """``typer.echo(text)`` without importing typer: the text (and a newline) on stdout, or stderr
    with ``err``, flushed. Where click's echo would change the text (an ANSI code to strip, an
    ASCII stream it re-encodes as UTF-8, Windows' console) or a stream is missing, it is called."""
    stream = sys.stderr if err else sys.stdout
    encoding = getattr(stream, "encoding", None) or "ascii"
    if stream is None or "\x1b" in text or os.name == "nt" or _is_ascii(encoding):
        import typer

        typer.echo(text, err=err, nl=nl)
        return
    stream.write(text + "\n" if nl else text)
    stream.flush()


def _is_ascii(encoding: str) -> bool:
    try:
        return codecs.lookup(encoding).name == "ascii"
    except LookupError:
        return False


def print_json(data: Any, out: TextIO | None = None) -> None:
    """JSON on stdout; non-ASCII escaped so control characters can never reach a terminal raw."""
    out = out or sys.stdout
    out.write(json.dumps(data, indent=2, ensure_ascii=True, default=str))
    out.write("\n")


def print_answer(answer: Any, out: TextIO | None = None) -> None:
    """An API answer's --json text (crawler.api), exactly as to_json() gives it."""
    (out or sys.stdout).write(answer.to_json())


def print_csv(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], out: TextIO | None = None
) -> None:
    """RFC 4180 CSV with a header row.

    Cells are written as they are (CSV is data for another program), except on a terminal, where
    control characters are escaped like every other text quants prints.
    """
    out = out or sys.stdout
    on_terminal = out.isatty()
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        cells = ["" if v is None else v for v in row]
        writer.writerow([safe_text(v) for v in cells] if on_terminal else cells)
    out.write(buf.getvalue())


def format_table(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], *, align_right: Iterable[str] = ()
) -> str:
    """A plain-text table (no markup, escaped cells), columns padded to their widest cell."""
    right = set(align_right)
    cells = [[safe_text("" if v is None else v) for v in row] for row in rows]
    widths = [len(c) for c in columns]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(widths[i]) if columns[i] in right else v.ljust(widths[i])
            for i, v in enumerate(values)
        ]
        return "  ".join(parts).rstrip()

    out = [line(list(columns)), line(["-" * w for w in widths])]
    out.extend(line(row) for row in cells)
    return "\n".join(out)


def human_bytes(n: int | float | None) -> str:
    """1536 -> '1.5 KiB'; binary units, as llama.cpp logs them."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
