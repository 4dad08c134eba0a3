"""The JSON a snapshot may carry: bounded size and depth, no NaN, and each column's shape.

A memory model must be one the crawl's own MemoryCoefficients could have written, type by type.
Details: docs/internals/snapshot.md#json_shapes
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from collections.abc import Callable
from typing import Any

__all__ = ["JSON_SHAPES", "MAX_JSON_BYTES", "MAX_JSON_DEPTH", "MAX_TEXT", "load_json"]

#: Bounds of one JSON value: decoded size and nesting.
MAX_JSON_BYTES = 4 * 1024**2
MAX_JSON_DEPTH = 32
#: A text without a declared length (a column such as ``reason``, a string in a memory model).
MAX_TEXT = 64 * 1024


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _depth(value: Any, limit: int) -> bool:
    """Whether nothing in ``value`` lies deeper than ``limit`` (the value itself is at 1)."""
    if limit < 1:
        return False
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
        if d == limit and children:
            return False  # its children lie at limit + 1
        # Only containers go on the stack: a list of a thousand numbers is one step.
        stack.extend((x, d + 1) for x in children if isinstance(x, dict | list))
    return True


def load_json(text: str) -> Any:
    if len(text) > MAX_JSON_BYTES:
        raise ValueError(f"JSON of {len(text)} characters (at most {MAX_JSON_BYTES})")
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if not _depth(value, MAX_JSON_DEPTH):
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH}")
    return value


def _str_list(v: Any) -> str | None:
    if not isinstance(v, list) or not all(isinstance(x, str) and len(x) <= 1024 for x in v):
        return "not a list of strings"
    return None


def _object(v: Any) -> str | None:
    return None if isinstance(v, dict) else "not a JSON object"


def _type_counts(v: Any) -> str | None:
    if not isinstance(v, dict) or not all(
        isinstance(k, str) and isinstance(n, int) and not isinstance(n, bool) and n >= 0
        for k, n in v.items()
    ):
        return "not an object of tensor type counts"
    return None


#: A check of a value against a type: None, or (where in the value, what is wrong with it).
_Typed = Callable[[Any], tuple[str, str] | None]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@functools.cache
def _typed(hint: Any) -> _Typed:
    """The check of a value of type ``hint`` (the dataclass field types of crawler.fit).

    Made once per type and kept: resolving a dataclass's type hints for every value checked
    was most of the time of checking a catalog's memory coefficients.
    """
    if hint is bool:
        return lambda v: None if isinstance(v, bool) else ("", " is not a boolean")
    if hint is int:
        return lambda v: (
            None if _is_int(v) and -1 <= v < 1 << 53 else ("", " is not an integer in range")
        )
    if hint is float:
        return lambda v: (
            None
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            else ("", " is not a finite number")
        )
    if hint is str:
        return lambda v: None if isinstance(v, str) and len(v) <= MAX_TEXT else ("", ": text")
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return _union(type(None) in args, [_typed(a) for a in args if a is not type(None)])
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _int_sequence if args[0] is int else _sequence(_typed(args[0]))
        slow = _fixed_tuple([_typed(a) for a in args])
        return _int_tuple(len(args), slow) if all(a is int for a in args) else slow
    if dataclasses.is_dataclass(hint):
        return _dataclass(hint)
    return lambda _v: None


def _union(optional: bool, alternatives: list[_Typed]) -> _Typed:
    def check(value: Any) -> tuple[str, str] | None:
        if value is None and optional:
            return None
        first = None
        for alternative in alternatives:
            problem = alternative(value)
            if problem is None:
                return None
            first = first or problem
        return first

    return check


def _sequence(item: _Typed) -> _Typed:
    def check(value: Any) -> tuple[str, str] | None:
        if not isinstance(value, tuple):
            return "", " is not a list"
        for i, v in enumerate(value):
            problem = item(v)
            if problem:
                return f"[{i}]{problem[0]}", problem[1]
        return None

    return check


def _plain_ints(value: Any) -> bool:
    """A tuple of plain ints, each an integer in range for _typed(int)."""
    return (
        isinstance(value, tuple)
        and all(type(v) is int for v in value)
        and (not value or (min(value) >= -1 and max(value) < 1 << 53))
    )


def _int_sequence(value: Any) -> tuple[str, str] | None:
    # Per-layer arrays of the coefficients: checked whole when every item is a plain int
    # (else item by item, for the message).
    return None if _plain_ints(value) else _sequence(_typed(int))(value)


def _int_tuple(n: int, slow: _Typed) -> _Typed:
    return lambda v: None if len(v) == n and _plain_ints(v) else slow(v)


def _fixed_tuple(items: list[_Typed]) -> _Typed:
    def check(value: Any) -> tuple[str, str] | None:
        if not isinstance(value, tuple):
            return "", " is not a list"
        if len(items) != len(value):
            return "", f" has {len(value)} items, not {len(items)}"
        for i, (v, item) in enumerate(zip(value, items, strict=True)):
            problem = item(v)
            if problem:
                return f"[{i}]{problem[0]}", problem[1]
        return None

    return check


def _dataclass(cls: Any) -> _Typed:
    fields: list[tuple[str, _Typed]] = []

    def check(value: Any) -> tuple[str, str] | None:
        if not isinstance(value, cls):
            return "", f" is not a {cls.__name__}"
        if not fields:  # on first use: a field's type may be the class itself
            hints = typing.get_type_hints(cls)
            fields.extend((f.name, _typed(hints[f.name])) for f in dataclasses.fields(cls))
        for name, field_check in fields:
            problem = field_check(getattr(value, name))
            if problem:
                return f".{name}{problem[0]}", problem[1]
        return None

    return check


def _check_dataclass(value: Any, cls: Any, where: str) -> str | None:
    """Whether ``value`` is a ``cls`` whose every field has its declared type."""
    problem = _typed(cls)(value)
    return None if problem is None else f"{where}{problem[0]}{problem[1]}"


def _coefficients(v: Any) -> str | None:
    from crawler.fit import MemoryCoefficients

    if not isinstance(v, dict):
        return "not a JSON object"
    try:
        co = MemoryCoefficients.from_json(v)
    except (TypeError, ValueError, KeyError) as exc:
        return f"not memory coefficients ({exc})"
    return _check_dataclass(co, MemoryCoefficients, "coefficients")


JSON_SHAPES: dict[str, Callable[[Any], str | None]] = {
    "tags": _str_list,
    "claims": _str_list,
    "card_data": _object,
    "profile": _object,
    "types": _type_counts,
    "coefficients": _coefficients,
}
