"""The typer app object and the option aliases shared by the commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, TypeVar

import typer

T = TypeVar("T")

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


def _amount(parse: Callable[[str], T], raw: str) -> T:
    """Parse with ``parse``; its message (value and accepted forms) as click's usage error."""
    from crawler.base.units import AmountError

    if not isinstance(raw, str):  # a default, already parsed
        return raw
    try:
        return parse(raw)
    except AmountError as exc:
        raise typer.BadParameter(str(exc)) from None


def ctx_value(raw: str) -> int:
    """``--ctx``: 262144, 256k, 256K, 256Ki (crawler.base.units)."""
    from crawler.base.units import parse_ctx

    return _amount(parse_ctx, raw)


def gib_value(raw: str) -> float:
    """``--vram`` / ``--ram``: 24, 24G, 24GiB, 24GB (crawler.base.units)."""
    from crawler.base.units import parse_gib

    return _amount(parse_gib, raw)


def headroom_value(raw: str) -> float:
    """``--headroom``: as ``--vram``, 0 allowed."""
    from crawler.base.units import parse_gib

    return _amount(lambda r: parse_gib(r, minimum=0, maximum=1024), raw)


CTX_HELP = "Context length in tokens: 262144, 256k, 256K or 256Ki (k = 1024)."
VRAM_HELP = "GPU memory in GiB: 24, 24G, 24GiB or 24GB (all GiB), 24576MiB."
HEADROOM_HELP = (
    "GiB of GPU memory kept free for other programs (default: $QUANTS_HEADROOM, else 0.5);"
    " the budget is --vram (or the GPU's memory) less this."
)
VramOpt = Annotated[
    float | None, typer.Option("--vram", parser=gib_value, metavar="GIB", help=VRAM_HELP)
]
#: Generic in its type: search's --ctx is optional (CtxOpt[int | None]), estimate's required.
CtxOpt = Annotated[
    T, typer.Option("--ctx", "-c", parser=ctx_value, metavar="TOKENS", help=CTX_HELP)
]
HeadroomOpt = Annotated[
    float | None,
    typer.Option("--headroom", parser=headroom_value, metavar="GIB", help=HEADROOM_HELP),
]


def _print_version(value: bool) -> None:
    if value:
        from crawler import __version__

        typer.echo(f"quants {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """quants' own options. Being a callback also keeps ``quants`` a group when only the invoked
    command's module is imported (typer would run a one-command app as that command)."""
