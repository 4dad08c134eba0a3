"""Name vs general.file_type vs tensors, judged against the named recipe (pure).

A claim fires only for content outside what the named recipe produces, and names its rule.
Details: docs/internals/profile.md#type_claims
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from crawler.gguf.ggml import GGML_TYPES
from crawler.profile.labels import QuantLabel, parse_quant_label
from crawler.profile.mixes import Mix, mix_for
from crawler.profile.recipes import (
    FTYPE_DEFAULT,
    ModelFacts,
    RecipeTensor,
    recipe_plan,
    tensor_category,
)

__all__ = ["MIN_SHARE", "type_claims"]

#: Share of the judged bytes (outside token_embd/output) that must deviate for a claim.
MIN_SHARE = 0.05
#: Share of the named-type bytes below the named bits for a dynamic mix's claim.
DYNAMIC_SHARE = 0.5
_BITS = {t.name: t.bits for t in GGML_TYPES.values()}
_WORDS = {"fewer": "hold fewer bits", "more": "hold more bits", "other": "hold other types"}


@dataclass(frozen=True, slots=True)
class _Deviation:
    tensor: RecipeTensor
    allowed: frozenset[str]
    direction: str  # fewer, more, other


def _bits(type_name: str) -> int | None:
    return _BITS.get(type_name)


def _direction(have: str, allowed: frozenset[str]) -> str | None:
    if have in allowed:
        return None
    hb = _bits(have)
    ab = [b for a in allowed if (b := _bits(a)) is not None]
    if hb is None or not ab:
        return "other"
    if hb < min(ab):
        return "fewer"
    if hb > max(ab):
        return "more"
    return "other"


def _plan(
    ftypes: Sequence[str], tensors: Sequence[RecipeTensor], model: ModelFacts
) -> dict[str, frozenset[str]] | None:
    merged: dict[str, frozenset[str]] = {}
    for ft in ftypes:
        plan = recipe_plan(ft, tensors, model)
        if plan is None:
            return None
        for name, types in plan.items():
            merged[name] = merged.get(name, frozenset()) | types
    return merged


def _edge(t: RecipeTensor) -> bool:
    return tensor_category(t.name) in ("token_embd", "output")


def _judge(
    who: str,
    mix: Mix,
    tensors: Sequence[RecipeTensor],
    model: ModelFacts,
    directions: tuple[str, ...],
) -> list[str]:
    """Claims for the tensors outside ``mix``'s recipe, worded as ``who`` (``named X``)."""
    plan = _plan(mix.ftypes, tensors, model)
    if plan is None:
        return []
    if mix.kind == "embed8":
        edges = ("token_embd", "output")
        plan = {n: a | {"Q8_0"} if tensor_category(n) in edges else a for n, a in plan.items()}
    judged = [t for t in tensors if t.name in plan and t.n_bytes]
    body = [t for t in judged if not _edge(t)]
    body_bytes = sum(t.n_bytes or 0 for t in body)
    found: list[str] = []
    devs = [
        _Deviation(t, plan[t.name], d)
        for t in body
        if (d := _direction(t.type_name, plan[t.name])) in directions
    ]
    share = sum(d.tensor.n_bytes or 0 for d in devs) / body_bytes if body_bytes else 0.0
    if devs and share >= MIN_SHARE:
        counts = [
            f"{count} {_WORDS[w]}"
            for w in ("fewer", "more", "other")
            if (count := sum(1 for x in devs if x.direction == w))
        ]
        first = sorted(devs, key=lambda d: ("fewer", "more", "other").index(d.direction))[0]
        found.append(
            f"{who} but {len(devs)} of {len(body)} tensors ({share:.0%} of the weight bytes"
            f" outside token_embd/output) are not what {mix.rule} gives them: {', '.join(counts)}"
            f" ({first.tensor.name} is {first.tensor.type_name}, the recipe gives"
            f" {'/'.join(sorted(first.allowed))})"
        )
    edge_low = [
        _Deviation(t, plan[t.name], "fewer")
        for t in judged
        if _edge(t) and _direction(t.type_name, plan[t.name]) == "fewer"
    ]
    if mix.kind == "embed8":
        edge_low = [
            _Deviation(t, frozenset({"Q8_0"}), "fewer")
            for t in judged
            if _edge(t) and (_bits(t.type_name) or 0) < 8
        ]
    if edge_low and "fewer" in directions:
        names = ", ".join(f"{d.tensor.name} {d.tensor.type_name}" for d in edge_low)
        want = "/".join(sorted(edge_low[0].allowed))
        found.append(f"{who} but {names}: fewer bits than {mix.rule} gives them ({want})")
    return found


def _dynamic(who: str, mix: Mix, tensors: Sequence[RecipeTensor], model: ModelFacts) -> list[str]:
    """A dynamic mix: fewer bits than named on the named type's tensors; or no dynamic choice."""
    plan = _plan(mix.ftypes, tensors, model)
    if plan is None:
        return []
    found: list[str] = []
    named = {FTYPE_DEFAULT[f] for f in mix.ftypes}
    want = min((b for n in named if (b := _bits(n)) is not None), default=None)
    core = [
        t for t in tensors if t.name in plan and t.n_bytes and plan[t.name] & named and not _edge(t)
    ]
    core_bytes = sum(t.n_bytes or 0 for t in core)
    if want is not None and core_bytes:
        low = [t for t in core if (_bits(t.type_name) or want) < want]
        share = sum(t.n_bytes or 0 for t in low) / core_bytes
        if share > DYNAMIC_SHARE:
            found.append(
                f"{who} but {share:.0%} of the weight bytes that {mix.rule} keeps at"
                f" {'/'.join(sorted(named))} hold fewer bits ({low[0].name} is {low[0].type_name})"
            )
    judged = [t for t in tensors if t.name in plan]
    if judged and all(t.type_name in plan[t.name] for t in judged):
        stock = "/".join(mix.ftypes)
        found.append(
            f"{who} but every tensor is where llama-quantize's stock {stock} recipe puts it"
            " (no dynamic per-layer choice)"
        )
    return found


def _file_type_mix(file_type: str | None) -> Mix | None:
    if not file_type or file_type not in FTYPE_DEFAULT:
        return None
    return Mix("stock", (file_type,), file_type)


def type_claims(
    label: QuantLabel | None,
    file_type: str | None,
    tensors: Sequence[RecipeTensor],
    model: ModelFacts,
) -> list[str]:
    """Plain-words contradictions between the name's label, ``general.file_type`` (its name as
    crawler.profile.build gives it, e.g. ``Q4_K_M``) and the tensors."""
    found: list[str] = []
    mix = mix_for(label) if label is not None else None
    ft_mix = _file_type_mix(file_type)
    # 1. name vs general.file_type.
    if label is not None and file_type:
        if mix is not None and ft_mix is not None:
            if file_type not in mix.ftypes:
                found.append(
                    f"named {label.text} but general.file_type says {file_type}"
                    f" ({mix.rule} is written as {'/'.join(mix.ftypes)})"
                )
        else:
            ft = parse_quant_label(f"{file_type}.gguf")
            if ft is not None and ft.base_type != label.base_type:
                found.append(f"named {label.text} but general.file_type says {file_type}")
    # 2. name vs tensors.
    if mix is not None:
        who = f"named {label.text}" if label is not None else ""
        if mix.kind == "dynamic":
            found += _dynamic(who, mix, tensors, model)
        else:
            found += _judge(who, mix, tensors, model, ("fewer", "more", "other"))
    # 3. general.file_type vs tensors, when the name's mix is not that ftype's recipe.
    if ft_mix is not None and (mix is None or file_type not in mix.ftypes):
        # With no mix named, general.file_type is the file's only statement: judged fully.
        directions = ("fewer",) if mix is not None else ("fewer", "more", "other")
        found += _judge(f"general.file_type says {file_type}", ft_mix, tensors, model, directions)
    return found
