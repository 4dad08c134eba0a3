"""The typer app object, and the typer form of the options declared in crawler.cli._options.
Details: docs/internals/cli.md#_app
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, TypeVar, get_args, get_origin, get_type_hints

import typer

from crawler.cli._options import DECLARED, Argument, Option

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


def _amount(parse: Callable[[str], T]) -> Callable[[str], T]:
    """``parse`` as typer's parser: its AmountError message (the value and the accepted forms)
    as click's usage error."""

    def parser(raw: str) -> T:
        from crawler.base.units import AmountError

        if not isinstance(raw, str):  # a default, already parsed
            return raw
        try:
            return parse(raw)
        except AmountError as exc:
            raise typer.BadParameter(str(exc)) from None

    return parser


def _typer_info(meta: object) -> object:
    """typer's OptionInfo / ArgumentInfo for a crawler.cli._options declaration (anything else
    as it is)."""
    if isinstance(meta, Option):
        return typer.Option(
            *meta.decls,
            help=meta.help,
            min=meta.min,
            max=meta.max,
            parser=None if meta.parser is None else _amount(meta.parser),
            metavar=meta.metavar,
            show_default=meta.show_default,
        )
    if isinstance(meta, Argument):
        return typer.Argument(help=meta.help, metavar=meta.metavar, show_default=meta.show_default)
    return meta


def _typer_hint(hint: Any) -> Any:
    if get_origin(hint) is not Annotated:
        return hint
    base, *metadata = get_args(hint)
    if not any(isinstance(m, (Option, Argument)) for m in metadata):
        return hint
    return Annotated[(base, *(_typer_info(m) for m in metadata))]


def typer_callback(func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` as typer reads it: the same parameters and defaults, each crawler.cli._options
    declaration in its annotations replaced by typer's (``func`` itself when it has none)."""
    hints = get_type_hints(func, include_extras=True)
    converted = {name: _typer_hint(hint) for name, hint in hints.items()}
    if all(converted[name] is hint for name, hint in hints.items()):
        return func

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    sig = inspect.signature(func)
    call.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[p.replace(annotation=converted[p.name]) for p in sig.parameters.values()],
        return_annotation=converted.get("return", sig.return_annotation),
    )
    call.__annotations__ = converted
    return call


def _convert(typer_app: typer.Typer) -> None:
    """Every callback of ``typer_app`` and its sub-apps in typer's form (typer_callback)."""
    for info in typer_app.registered_commands:
        if info.callback is not None:
            info.callback = typer_callback(info.callback)
    if typer_app.registered_callback and typer_app.registered_callback.callback is not None:
        typer_app.registered_callback.callback = typer_callback(
            typer_app.registered_callback.callback
        )
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _convert(group.typer_instance)


def add_declared(module: str | None = None) -> None:
    """Register the commands declared (crawler.cli._options.command) in ``module`` (in any
    module when None) that are not registered yet: called after each import, they keep the
    place in typer's list that ``@app.command`` would give them."""
    registered = {info.name for info in app.registered_commands}
    for name, func in DECLARED.items():
        if name not in registered and module in (None, func.__module__):
            app.command(name)(func)


def ready_app() -> typer.Typer:
    """The app with every declared command registered and every option in typer's form."""
    add_declared()
    _convert(app)
    return app


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
