"""A declared command's argv parsed without typer (crawler.cli._options), for the plain forms
only: anything else (an error, --help, a short-option cluster, ``--``) is left to typer.
Details: docs/internals/cli.md#_argv
"""

from __future__ import annotations

import errno
import inspect
import re
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn, Union, get_args, get_origin, get_type_hints

from crawler.cli._options import Argument, Option

__all__ = ["parse", "run"]

# The number forms that int() / float() and typer's coercion (pydantic) read alike; any other
# spelling (1_000, 1e3, .5, inf, " 3") is left to typer.
_INT = re.compile(r"-?[0-9]{1,18}", re.ASCII)
_FLOAT = re.compile(r"-?[0-9]{1,18}(?:\.[0-9]{1,18})?", re.ASCII)


class _Param:
    """One parameter of a declared command, as the parser needs it."""

    __slots__ = ("convert", "default", "meta", "multiple", "name")

    def __init__(self, name: str, hint: Any, default: Any) -> None:
        base, *metadata = get_args(hint) if get_origin(hint) is Annotated else (hint,)
        metas = [m for m in metadata if isinstance(m, (Option, Argument))]
        if len(metas) != 1:
            raise TypeError(f"{name}: not declared with crawler.cli._options")
        self.name = name
        self.meta: Option | Argument = metas[0]
        self.default = default
        members = [a for a in get_args(base) if a is not type(None)]
        if get_origin(base) in (Union, types.UnionType) and len(members) == 1:
            base = members[0]  # X | None
        self.multiple = get_origin(base) is list
        if self.multiple:
            (base,) = get_args(base)
        self.convert = base


def _params(func: Callable[..., Any]) -> list[_Param]:
    hints = get_type_hints(func, include_extras=True)
    return [
        _Param(p.name, hints[p.name], p.default)
        for p in inspect.signature(func).parameters.values()
    ]


def _value(param: _Param, raw: str) -> Any:
    """``raw`` as typer would give it, or None (no value is None) where typer must say what it
    makes of it."""
    if not raw.isascii():
        try:
            raw.encode()
        except UnicodeEncodeError:  # a surrogate (an undecodable argv byte)
            return None
    meta = param.meta
    kind = param.convert
    if isinstance(meta, Option) and meta.parser is not None:
        from crawler.base.units import AmountError

        try:
            return meta.parser(raw)
        except AmountError:
            return None
    if kind is str:
        return raw
    if kind is Path:
        return Path(raw) if raw else None
    if kind is int or kind is float:
        if not (_INT if kind is int else _FLOAT).fullmatch(raw):
            return None
        number = kind(raw)
        if isinstance(meta, Option) and (
            (meta.min is not None and number < meta.min)
            or (meta.max is not None and number > meta.max)
        ):
            return None
        return number
    return None


def parse(func: Callable[..., Any], argv: Sequence[str]) -> dict[str, Any] | None:
    """The keyword arguments typer would call ``func`` with for ``argv`` (the command's own
    arguments), or None where this parser does not give exactly typer's answer: an error, a
    form it does not read (``-c256k``, ``-ctk=q8_0``, ``--``, ``--help``), a value it does not
    read as typer's coercion would."""
    if "--help" in argv or "--" in argv:
        return None
    params = _params(func)
    takes: dict[str, _Param] = {}  # option -> its parameter, options that take a value
    flags: dict[str, tuple[_Param, bool]] = {}  # flag -> (its parameter, the value it sets)
    arguments = [p for p in params if isinstance(p.meta, Argument)]
    for p in params:
        if not isinstance(p.meta, Option):
            continue
        for decl in p.meta.decls:
            if p.convert is not bool:
                takes[decl] = p
                continue
            on, _, off = decl.partition("/")
            for name, value in ((on.rstrip(), True), (off.lstrip(), False)):
                if name:
                    flags[name] = (p, value)
    values: dict[str, Any] = {}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg[:1] != "-" or len(arg) == 1:  # positional
            if not arguments:
                return None
            param = arguments.pop(0)
            value = _value(param, arg)
        elif arg in flags:
            param, value = flags[arg]
        else:
            if arg in takes and args:
                param, raw = takes[arg], args.pop(0)
            elif arg.startswith("--") and "=" in arg and arg.partition("=")[0] in takes:
                name, _, raw = arg.partition("=")
                param = takes[name]
            else:
                return None  # unknown, short-option cluster, or a value missing: typer's error
            value = _value(param, raw)
        if value is None:
            return None
        if param.multiple:
            values.setdefault(param.name, []).append(value)
        else:
            values[param.name] = value  # given twice: the last, as click
    for p in params:
        if p.name not in values:
            if p.default is inspect.Parameter.empty:
                return None  # a required parameter missing: typer's error
            values[p.name] = p.default
    return values


class _QuietFlush:
    """A stream whose flush ignores a closed pipe (the reader of ``quants ... | head`` gone), as
    click leaves sys.stdout and sys.stderr after one."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def run(func: Callable[..., Any], values: dict[str, Any]) -> NoReturn:
    """Call ``func`` and exit as typer's standalone mode does: 0 once it returns, 130 on Ctrl-C,
    1 with "Aborted!" at end of input, 1 when the reader of stdout went away; every other error
    propagates (crawler.cli.main words it)."""
    try:
        func(**values)
    except EOFError:
        print(file=sys.stderr)
        print("Aborted!", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        sys.stdout = _QuietFlush(sys.stdout)
        sys.stderr = _QuietFlush(sys.stderr)
        sys.exit(1)
    sys.exit(0)
