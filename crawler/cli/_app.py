"""The typer app object and the option aliases shared by the commands."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(
    name="quants",
    help="Find, verify and rank GGUF quantizations on the Hugging Face Hub.",
    no_args_is_help=True,
    add_completion=False,
    # Hub text (repo names, metadata) must never be interpreted as markup.
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Catalog database URL (default: $QUANTS_DB, else a SQLite file in the data dir).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
LimitOpt = Annotated[int, typer.Option("--limit", min=1, help="At most this many rows.")]
VramOpt = Annotated[float | None, typer.Option("--vram", min=0.1, help="GPU memory budget in GiB.")]
CtxOpt = Annotated[int | None, typer.Option("--ctx", "-c", min=1, help="Context length in tokens.")]


@app.callback()
def _group() -> None:
    """Keeps ``quants`` a group of commands when only the invoked command's module is imported
    (typer runs an app of one command as that command, which would take its name as an
    argument)."""
