"""Name vs ``general.file_type`` vs tensors: three statements of one quant, compared (pure).

The file name (``...-Q2_K.gguf``) is what the publisher says, ``general.file_type`` is what
llama-quantize was asked for (``LLAMA_FTYPE_*``, written by ``llama_model_quantize_impl``), and the
tensor table is what the file holds. Each pair is compared in both directions on the *base type*
(``Q4_K_M`` -> ``Q4_K``, ``UD-Q2_K_XL`` -> ``Q2_K``; crawler.profile.labels), and the tensors speak
through the type holding most of the bulk FFN's weight bytes (``ffn``/``ffn_exps``: the tensors a
quant scheme is named for; embeddings and output get more bits by design in every recipe).

"More bits than the name says" is not raised for UD / ``_L`` / ``_XL`` names, whose recipes put
FFN bytes in wider types on purpose (docs.unsloth.ai, 'Unsloth Dynamic 2.0 GGUFs'; bartowski's
model cards).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from crawler.gguf.ggml import GGML_TYPES
from crawler.profile.labels import QuantLabel, parse_quant_label

__all__ = ["TypedBytes", "type_claims"]

_BULK_GROUPS = ("ffn", "ffn_exps")


@dataclass(frozen=True, slots=True)
class TypedBytes:
    """What the comparison needs of one tensor."""

    group: str
    type_name: str
    n_bytes: int | None
    is_matrix: bool


def _bits(type_name: str) -> int | None:
    info = next((t for t in GGML_TYPES.values() if t.name == type_name), None)
    return info.bits if info is not None else None


def _dominant(
    rows: Iterable[TypedBytes], groups: tuple[str, ...] | None
) -> tuple[str, float] | None:
    by_type: Counter[str] = Counter()
    for r in rows:
        if r.is_matrix and r.n_bytes and (groups is None or r.group in groups):
            by_type[r.type_name] += r.n_bytes
    total = sum(by_type.values())
    if not total:
        return None
    name, n = by_type.most_common(1)[0]
    return name, n / total


def _generous(label: QuantLabel) -> bool:
    """UD and ``_L``/``_XL`` recipes keep more bits than their base type on purpose."""
    return label.ud or label.scheme.upper().endswith(("_L", "_XL", "_XXL"))


def type_claims(
    label: QuantLabel | None, file_type: str | None, rows: Iterable[TypedBytes]
) -> list[str]:
    """Plain-words contradictions between the name's label, ``general.file_type`` (its name as
    crawler.profile.build gives it, e.g. ``Q4_K_M``) and the tensors."""
    rows = list(rows)
    found: list[str] = []
    ft = parse_quant_label(f"{file_type}.gguf") if file_type else None
    ft_bits = _bits(ft.base_type) if ft else None
    # 1. name vs general.file_type: different base types is a contradiction either way.
    if label is not None and ft is not None and label.base_type != ft.base_type:
        found.append(f"named {label.text} but general.file_type says {file_type}")
    # 2. name vs tensors. Fewer bits: the type holding most weight-matrix bytes (whole file).
    overall = _dominant(rows, None)
    bulk = _dominant(rows, _BULK_GROUPS)
    if label is not None:
        want = _bits(label.base_type)
        if want is not None and overall is not None:
            name, share = overall
            have = _bits(name)
            if have is not None and have < want:
                found.append(f"labelled {label.text} but {share:.0%} of weight bytes are {name}")
        if want is not None and bulk is not None and not _generous(label):
            name, share = bulk
            have = _bits(name)
            if have is not None and have > want:
                found.append(
                    f"named {label.text} but {share:.0%} of the FFN weight bytes are {name}"
                    f" ({have}-bit, more than the name's {want}-bit)"
                )
    # 3. general.file_type vs tensors, when the name does not already say the same thing.
    if ft is not None and ft_bits is not None and bulk is not None:
        name, share = bulk
        have = _bits(name)
        named_same = label is not None and label.base_type == ft.base_type
        generous = label is not None and _generous(label)
        if (
            have is not None
            and have != ft_bits
            and not (named_same and found)
            and (have < ft_bits or not generous)
        ):
            direction = "fewer" if have < ft_bits else "more"
            found.append(
                f"general.file_type says {file_type} but {share:.0%} of the FFN weight bytes"
                f" are {name} ({direction} bits)"
            )
    return found
