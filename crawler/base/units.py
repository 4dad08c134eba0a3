"""Byte units (MiB as llama.cpp prints, GiB as quants shows) and the amounts people type.

One parser of context lengths and memory sizes for the CLI and quants serve (256k, 24GB).
Details: docs/internals/base.md#units
"""

from __future__ import annotations

import math
import re

__all__ = [
    "CTX_FORMS",
    "GIB",
    "MEMORY_FORMS",
    "MIB",
    "AmountError",
    "parse_ctx",
    "parse_gib",
]

MIB = 1024**2
GIB = 1024**3

CTX_FORMS = "262144, 256k, 256K or 256Ki (k = 1024 tokens), 1M (1024k)"
MEMORY_FORMS = "24, 24G, 24GiB or 24GB (all GiB; GB as memory is sold), 24576MiB, 1TiB"

# ASCII digits only: Arabic-Indic or full-width digits are refused, not read as a number.
_CTX = re.compile(r"(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>|k|ki|m|mi)", re.IGNORECASE | re.ASCII)
_CTX_SCALE = {"": 1, "k": 1024, "ki": 1024, "m": 1 << 20, "mi": 1 << 20}
_MEM = re.compile(
    r"(?P<n>\d+(?:\.\d+)?|\.\d+)\s*(?P<unit>|g|gb|gib|m|mb|mib|t|tb|tib)",
    re.IGNORECASE | re.ASCII,
)
_MEM_SCALE = {"": 1.0, "g": 1.0, "m": 1 / 1024, "t": 1024.0}
#: The largest context accepted (2^24 tokens, far beyond any model's n_ctx_train).
MAX_CTX = 1 << 24


class AmountError(ValueError):
    """A typed amount that is not one of the accepted forms (the message repeats it)."""


def _who(name: str, text: str) -> str:
    return f"{name} {text!r}" if name else repr(text)


def parse_ctx(raw: str | int, *, name: str = "") -> int:
    """Tokens from ``262144``, ``256k``, ``256K``, ``256Ki`` or ``1M`` (k = 1024)."""
    text = str(raw).strip()
    m = _CTX.fullmatch(text)
    if m is None:
        raise AmountError(f"{_who(name, text)}: not a context length; use {CTX_FORMS}")
    value = float(m["n"]) * _CTX_SCALE[m["unit"].lower()]
    if value != int(value):
        raise AmountError(f"{_who(name, text)}: not a whole number of tokens; use {CTX_FORMS}")
    n = int(value)
    if not 1 <= n <= MAX_CTX:
        raise AmountError(f"{_who(name, text)}: must be between 1 and {MAX_CTX} tokens (16M)")
    return n


def parse_gib(
    raw: str | float, *, name: str = "", minimum: float = 0.1, maximum: float = 1 << 20
) -> float:
    """GiB from ``24``, ``24G``, ``24GiB``, ``24GB``, ``24576MiB`` or ``1TiB`` (see the module)."""
    text = str(raw).strip()
    m = _MEM.fullmatch(text)
    if m is None:
        raise AmountError(f"{_who(name, text)}: not a memory size; use {MEMORY_FORMS}")
    unit = m["unit"].lower()
    gib = float(m["n"]) * _MEM_SCALE[unit[:1]]
    if not math.isfinite(gib) or not minimum <= gib <= maximum:
        raise AmountError(
            f"{_who(name, text)}: must be between {minimum:g} and {maximum:g} GiB ({MEMORY_FORMS})"
        )
    return gib
