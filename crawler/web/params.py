"""Query parameters of quants serve: parsed, bounded and validated, or a one-line 400.

The same SearchRequest as quants search; an unknown parameter is refused, never ignored.
Details: docs/internals/web.md#params
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from crawler.base.budget import DEFAULT_HEADROOM_GIB
from crawler.fit.tiers import TIERS
from crawler.library.search_request import SearchRequest, build_request

__all__ = [
    "SEARCH_PARAMS",
    "BadParam",
    "ctx",
    "gib",
    "integer",
    "number",
    "parse_search",
    "pick",
    "search_values",
    "text",
]

MAX_TEXT = 200
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
SORTS = ("quality", "speed", "size", "margin", "ctx", "downloads", "updated")
_TRUE = {"1", "true", "on", "yes"}
_FALSE = {"0", "false", "off", "no", ""}


class BadParam(ValueError):
    """A malformed or out-of-range query parameter (answered 400 with this message)."""


def text(name: str, raw: str, *, required: bool = False) -> str | None:
    """A string parameter (empty = absent), at most MAX_TEXT characters."""
    value = raw.strip()
    if not value:
        if required:
            raise BadParam(f"{name}: required")
        return None
    if len(value) > MAX_TEXT:
        raise BadParam(f"{name}: at most {MAX_TEXT} characters")
    if _CONTROL.search(value):
        # NUL cannot reach PostgreSQL text at all; no other control belongs in a search.
        raise BadParam(f"{name}: holds a control character")
    return value


def number(name: str, raw: str, lo: float, hi: float) -> float | None:
    """A finite decimal in [lo, hi] (empty = absent)."""
    value = raw.strip()
    if not value:
        return None
    # ASCII only: float() also takes other scripts' digits ("١٢") and "nan"/"inf".
    if not value.isascii():
        raise BadParam(f"{name}: not a number")
    try:
        x = float(value)
    except ValueError:
        raise BadParam(f"{name}: not a number") from None
    if not math.isfinite(x):
        raise BadParam(f"{name}: not a number")
    if not lo <= x <= hi:
        raise BadParam(f"{name}: must be between {lo:g} and {hi:g}")
    return x


def integer(name: str, raw: str, lo: int, hi: int) -> int | None:
    """A whole number in [lo, hi] (empty = absent); ``k``/``K`` multiplies by 1024 (``256k``)."""
    value = raw.strip()
    if not value:
        return None
    scale = 1
    if value[-1:] in ("k", "K"):
        value, scale = value[:-1], 1024
    # str.isdigit() is also true of "²" and other scripts' digits, which int() refuses or reads.
    if not (value.isascii() and value.isdigit()) or len(value) > 9:
        raise BadParam(f"{name}: not a whole number")
    n = int(value) * scale
    if not lo <= n <= hi:
        raise BadParam(f"{name}: must be between {lo} and {hi}")
    return n


def flag(name: str, raw: str) -> bool:
    """A checkbox / boolean: 1/true/on/yes or 0/false/off/no/empty."""
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise BadParam(f"{name}: not a boolean (use 1 or 0)")


def _choice(choices: tuple[str, ...]) -> Callable[[str, str], str | None]:
    def parse(name: str, raw: str) -> str | None:
        value = raw.strip().lower()
        if not value:
            return None
        if value not in choices:
            raise BadParam(f"{name}: one of {', '.join(choices)}")
        return value

    return parse


def _cache(name: str, raw: str) -> str | None:
    from crawler.fit import CACHE_TYPES

    return _choice(tuple(CACHE_TYPES))(name, raw)


def _ngl(name: str, raw: str) -> str | None:
    """``-ngl``: a whole number, ``auto`` or ``all``."""
    value = raw.strip().lower()
    if value in ("", "auto", "all"):
        return value or None
    n = integer(name, value, 0, 100_000)
    return None if n is None else str(n)


def ctx(name: str, raw: str) -> int | None:
    """A context length as the CLI's --ctx takes it (crawler.base.units: 256k, 262144, 128Ki)."""
    from crawler.base.units import AmountError, parse_ctx

    if not raw.strip():
        return None
    try:
        return parse_ctx(raw, name=name)
    except AmountError as exc:
        raise BadParam(str(exc)) from None


def gib(name: str, raw: str, lo: float = 0.1, hi: float = 4096) -> float | None:
    """A memory size as the CLI's --vram takes it (crawler.base.units: 24, 24GB, 24GiB, 24G)."""
    from crawler.base.units import AmountError, parse_gib

    if not raw.strip():
        return None
    try:
        return parse_gib(raw, name=name, minimum=lo, maximum=hi)
    except AmountError as exc:
        raise BadParam(str(exc)) from None


#: name -> parser; each returns the value (None = not given).
_SEARCH: dict[str, Callable[[str, str], Any]] = {
    "q": text,
    "vram": gib,
    "gpu": text,
    "ctx": ctx,
    "headroom": lambda n, r: gib(n, r, 0, 1024),
    "cache_type_k": _cache,
    "cache_type_v": _cache,
    "auto_cache": flag,
    "mtp": lambda n, r: flag(n, r) if r.strip() else None,  # empty: where usable and it fits
    "spec_draft_n_max": lambda n, r: integer(n, r, 0, 64),
    "mtp_acceptance": lambda n, r: number(n, r, 0, 1),
    "min_attn_bits": lambda n, r: number(n, r, 0, 32),
    "arch": text,
    "author": text,
    "base": text,
    "label": text,
    "loadable": flag,
    "cpu_moe": flag,
    "n_cpu_moe": lambda n, r: integer(n, r, 0, 1024),
    "n_gpu_layers": _ngl,
    "flash_attn": _choice(("on", "off", "auto")),
    "parallel": lambda n, r: integer(n, r, 1, 256),
    "ubatch": lambda n, r: integer(n, r, 1, 1 << 16),
    "tier": _choice(TIERS),
    "tensor_split": text,
    "vision": flag,
    "ram": lambda n, r: gib(n, r, 0.1, 1 << 20),
    "sort": _choice(SORTS),
    "limit": lambda n, r: integer(n, r, 1, 200),
}
SEARCH_PARAMS = tuple(_SEARCH)


def pick(query: Mapping[str, str], allowed: tuple[str, ...]) -> None:
    """BadParam for a parameter outside ``allowed``."""
    unknown = sorted(set(query) - set(allowed))
    if unknown:
        raise BadParam(f"unknown parameter {unknown[0]!r}; known: {', '.join(allowed)}")


def search_values(query: Mapping[str, str]) -> dict[str, Any]:
    """The given search parameters, parsed (absent ones left out)."""
    pick(query, SEARCH_PARAMS)
    values = {}
    for name, parse in _SEARCH.items():
        if name in query:
            value = parse(name, query[name])
            if value is not None:
                values[name] = value
    return values


def parse_search(
    query: Mapping[str, str], *, headroom_gib: float = DEFAULT_HEADROOM_GIB
) -> SearchRequest:
    """The search request the parameters ask for (``q`` is ``quants search``'s QUERY; without
    ``headroom``, the server's setting, as the CLI takes QUANTS_HEADROOM)."""
    values = search_values(query)
    values["query"] = values.pop("q", None)
    values.setdefault("headroom", headroom_gib)
    return build_request(**values)
