"""A faster dataclasses.replace for the frozen records a search copies by the hundred thousand
(pure: no I/O): the fields are read once per class, where dataclasses.replace walks them on
every call (a tenth of a search's time).
Details: docs/internals/base.md#records
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["replaced"]

T = TypeVar("T")

#: Per class: its fields' values as a tuple, and each field's place in __init__'s arguments;
#: None where the positional shortcut does not hold (one field, a field not in __init__ or
#: keyword-only).
_LAYOUT: dict[type, tuple[Callable[[Any], tuple[Any, ...]], dict[str, int]] | None] = {}


def _layout(cls: type) -> tuple[Callable[[Any], tuple[Any, ...]], dict[str, int]] | None:
    fields = dataclasses.fields(cls)
    if len(fields) < 2 or any(not f.init or f.kw_only for f in fields):
        return None
    names = [f.name for f in fields]
    return operator.attrgetter(*names), {name: i for i, name in enumerate(names)}


def replaced(obj: T, **changes: Any) -> T:
    """``dataclasses.replace(obj, **changes)``: the same new object (its __init__ and
    __post_init__ run), the same TypeError for a name that is not a field."""
    cls = type(obj)
    if cls not in _LAYOUT:
        _LAYOUT[cls] = _layout(cls)
    layout = _LAYOUT[cls]
    if layout is None:
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    values_of, index = layout
    values = list(values_of(obj))
    for name, value in changes.items():
        if name not in index:
            raise TypeError(f"{cls.__name__} has no field {name!r}")
        values[index[name]] = value
    return cls(*values)
