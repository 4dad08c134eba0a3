"""Options declared without typer, so that ``quants search`` can parse its argv without importing
it; crawler.cli._app turns these declarations into typer's, the one source of both parsers.
Details: docs/internals/cli.md#_options
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

__all__ = [
    "CTX_HELP",
    "DECLARED",
    "HEADROOM_HELP",
    "VRAM_HELP",
    "Argument",
    "CtxOpt",
    "DbOpt",
    "HeadroomOpt",
    "JsonOpt",
    "LimitOpt",
    "Option",
    "VramOpt",
    "command",
    "ctx_value",
    "gib_value",
    "headroom_value",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class Option:
    """A command option: what ``typer.Option(*decls, **settings)`` takes (crawler.cli._app makes
    that). ``parser`` raises crawler.base.units.AmountError for a refused value."""

    __slots__ = ("decls", "help", "max", "metavar", "min", "parser", "show_default")

    def __init__(
        self,
        *decls: str,
        help: str | None = None,
        min: float | None = None,
        max: float | None = None,
        parser: Callable[[str], Any] | None = None,
        metavar: str | None = None,
        show_default: bool = True,
    ) -> None:
        self.decls = decls
        self.help = help
        self.min = min
        self.max = max
        self.parser = parser
        self.metavar = metavar
        self.show_default = show_default


class Argument:
    """A command's positional argument (``typer.Argument(**settings)``)."""

    __slots__ = ("help", "metavar", "show_default")

    def __init__(
        self,
        *,
        help: str | None = None,
        metavar: str | None = None,
        show_default: bool = True,
    ) -> None:
        self.help = help
        self.metavar = metavar
        self.show_default = show_default


#: Commands whose module declares them with these classes instead of typer's: name -> function.
#: crawler.cli._app registers them with typer; crawler.cli._argv parses their argv without it.
DECLARED: dict[str, Callable[..., Any]] = {}


def command(name: str) -> Callable[[F], F]:
    """Declare ``func`` as the command ``name`` (typer's ``app.command(name)``, made later)."""

    def declare(func: F) -> F:
        DECLARED[name] = func
        return func

    return declare


def ctx_value(raw: str) -> int:
    """``--ctx``: 262144, 256k, 256K, 256Ki (crawler.base.units)."""
    from crawler.base.units import parse_ctx

    return parse_ctx(raw)


def gib_value(raw: str) -> float:
    """``--vram`` / ``--ram``: 24, 24G, 24GiB, 24GB (crawler.base.units)."""
    from crawler.base.units import parse_gib

    return parse_gib(raw)


def headroom_value(raw: str) -> float:
    """``--headroom``: as ``--vram``, 0 allowed."""
    from crawler.base.units import parse_gib

    return parse_gib(raw, minimum=0, maximum=1024)


CTX_HELP = "Context length in tokens: 262144, 256k, 256K or 256Ki (k = 1024)."
VRAM_HELP = "GPU memory in GiB: 24, 24G, 24GiB or 24GB (all GiB), 24576MiB."
HEADROOM_HELP = (
    "GiB of GPU memory kept free for other programs (default: $QUANTS_HEADROOM, else 0.5);"
    " the budget is --vram (or the GPU's memory) less this."
)

DbOpt = Annotated[
    str | None,
    Option(
        "--db",
        help="Catalog database URL (default: $QUANTS_DB, else a SQLite file in the data dir).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, Option("--json", help="Print JSON instead of a table.")]
LimitOpt = Annotated[int, Option("--limit", min=1, help="At most this many rows.")]
VramOpt = Annotated[float | None, Option("--vram", parser=gib_value, metavar="GIB", help=VRAM_HELP)]
#: Generic in its type: search's --ctx is optional (CtxOpt[int | None]), estimate's required.
CtxOpt = Annotated[T, Option("--ctx", "-c", parser=ctx_value, metavar="TOKENS", help=CTX_HELP)]
HeadroomOpt = Annotated[
    float | None, Option("--headroom", parser=headroom_value, metavar="GIB", help=HEADROOM_HELP)
]
