"""Which recipe a quant name stands for (pure: no I/O).

Maps a name's scheme to a Mix: the ftypes it is written as and how far it may stray.
Details: docs/internals/profile.md#mixes
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from crawler.profile.labels import QuantLabel
from crawler.profile.recipes import FTYPE_DEFAULT

__all__ = ["Mix", "mix_for"]

# Bare K-quant names: every ftype of that base type.
_BARE = {
    "Q2_K": ("Q2_K", "Q2_K_S"),
    "Q3_K": ("Q3_K_S", "Q3_K_M", "Q3_K_L"),
    "Q4_K": ("Q4_K_S", "Q4_K_M"),
    "Q5_K": ("Q5_K_S", "Q5_K_M"),
    "Q6_K": ("Q6_K",),
}
# bartowski's _L / _XL: the recipe they start from.
_EMBED8 = {
    "Q2_K_L": "Q2_K",
    "Q3_K_XL": "Q3_K_L",
    "Q4_K_L": "Q4_K_M",
    "Q5_K_L": "Q5_K_M",
    "Q6_K_L": "Q6_K",
    "Q4_0_L": "Q4_0",
    "Q4_1_L": "Q4_1",
    "Q5_0_L": "Q5_0",
    "Q5_1_L": "Q5_1",
    "Q8_0_L": "Q8_0",
}
_ALIASES = {"F32": "ALL_F32", "MXFP4": "MXFP4_MOE"}


@dataclass(frozen=True, slots=True)
class Mix:
    """A name's recipe: ``kind`` (stock, embed8, dynamic), the ftypes it is written as."""

    kind: str
    ftypes: tuple[str, ...]
    #: The label as the name wrote it (``UD-Q4_K_XL``).
    label: str

    @property
    def rule(self) -> str:
        """What the tensors were compared against, in words."""
        base = "/".join(self.ftypes)
        if self.kind == "embed8":
            return f"the {base} recipe with token_embd/output at Q8_0 (bartowski's _L mix)"
        if self.kind == "dynamic":
            return f"Unsloth's dynamic mix on the {base} file type"
        return f"llama-quantize's {base} recipe"


def mix_for(label: QuantLabel) -> Mix | None:
    """The mix a parsed name label stands for, or None when no recipe is known for it."""
    scheme = label.scheme.upper()
    scheme = _ALIASES.get(scheme, scheme)
    dynamic = label.ud or bool(re.fullmatch(r"Q[24568]_K_XL", scheme))
    if dynamic:
        base = re.sub(r"_(?:XXL|XL|L|M|S)$", "", scheme) if scheme.endswith("_XL") else scheme
        if base == "Q8_K":
            return Mix("dynamic", ("Q8_0",), label.text)
        if base in _BARE:
            return Mix("dynamic", _BARE[base], label.text)
        if scheme in FTYPE_DEFAULT:
            return Mix("dynamic", (scheme,), label.text)
        return None
    if scheme in _EMBED8:
        return Mix("embed8", (_EMBED8[scheme],), label.text)
    if scheme in FTYPE_DEFAULT:
        return Mix("stock", (scheme,), label.text)
    if scheme in _BARE:
        return Mix("stock", _BARE[scheme], label.text)
    return None
