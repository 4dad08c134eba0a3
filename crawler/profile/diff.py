"""What changed between two analyses of one quant, in plain words ("attention Q4_K -> Q8_0").

Pure; reads stored profile JSON and tolerates missing keys (fewer sentences, never an error).
Details: docs/internals/profile.md#diff
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["describe_change", "describe_types"]

# Coarse groups in the order a reader cares about them, with the words used for each.
_GROUP_WORDS: tuple[tuple[str, str], ...] = (
    ("attn", "attention"),
    ("linear_attn", "linear attention"),
    ("token_embd", "embeddings"),
    ("output", "output"),
    ("ffn", "dense FFN"),
    ("ffn_exps", "routed experts"),
    ("ffn_shexp", "shared experts"),
    ("router", "router"),
)


def _weights(types: Mapping[str, Any]) -> dict[str, Any]:
    # Norms and biases are F32 in every GGUF (llama.cpp's convert keeps 1-D tensors in F32), so
    # F32 next to other types says nothing about how the weights were quantised.
    kept = {name: n for name, n in types.items() if name != "F32"}
    return kept or dict(types)


def describe_types(types: Mapping[str, Any] | None) -> str:
    """``{"Q4_K": 30, "Q6_K": 10, "F32": 4}`` -> ``"Q4_K+Q6_K"``: most tensors first.

    F32 (norms) is left out unless nothing else is there.
    """
    if not types:
        return "none"
    ordered = sorted(_weights(types).items(), key=lambda kv: (-_count(kv[1]), kv[0]))
    return "+".join(name for name, _ in ordered)


def _count(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _describe_mix(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[str, str] | None:
    """The two sides of "A -> B", or None when the weights' types did not change."""
    old_w, new_w = _weights(old), _weights(new)
    if old_w == new_w:
        return None
    # Same set of types in other proportions: show the counts, or the sentence would be "A -> A".
    if set(old_w) == set(new_w):
        return _with_counts(old_w), _with_counts(new_w)
    return describe_types(old_w), describe_types(new_w)


def _with_counts(types: Mapping[str, Any]) -> str:
    ordered = sorted(types.items(), key=lambda kv: (-_count(kv[1]), kv[0]))
    return "/".join(f"{_count(n)} {name}" for name, n in ordered)


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _bits(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "unknown" if value is None else str(value)


_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))


def _unit(magnitude: int) -> tuple[str, int]:
    return next((u for u in _UNITS if magnitude >= u[1]), _UNITS[-1])


def _in(n: int, unit: tuple[str, int]) -> str:
    name, scale = unit
    return f"{n} B" if scale == 1 else f"{n / scale:.2f} {name}"


def _sizes(before: int, after: int) -> str:
    # Both sides in one unit (the larger's), the difference in its own.
    unit = _unit(max(abs(before), abs(after)))
    delta = after - before
    sign = "+" if delta > 0 else "-"
    return f"{_in(before, unit)} -> {_in(after, unit)} ({sign}{_in(abs(delta), _unit(abs(delta)))})"


def describe_change(
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any] | None,
    *,
    old_size: int | None = None,
    new_size: int | None = None,
) -> list[str]:
    """Sentences saying how ``new`` differs from ``old`` (two profiles of one quant).

    Sizes default to the profiles' ``size_bytes``. When the content changed but nothing we
    compare did, the answer is ``["content changed, same profile"]``.
    """
    before, after = _dict(old), _dict(new)
    out: list[str] = []
    if before.get("architecture") != after.get("architecture") and before and after:
        out.append(f"architecture {before.get('architecture')} -> {after.get('architecture')}")
    out.extend(_loadable(before, after))
    attention, others = _groups(before, after)
    # Attention first, then the MTP head, then the rest: what users re-download for.
    out.extend(attention)
    out.extend(_attention_flag(before, after))
    out.extend(_mtp(before, after))
    out.extend(others)
    out.extend(_dynamic_flag(before, after))
    n_before, n_after = before.get("n_tensors"), after.get("n_tensors")
    if isinstance(n_before, int) and isinstance(n_after, int) and n_before != n_after:
        out.append(f"tensors {n_before} -> {n_after}")
    size_before = old_size if old_size is not None else before.get("size_bytes")
    size_after = new_size if new_size is not None else after.get("size_bytes")
    if isinstance(size_before, int) and isinstance(size_after, int) and size_before != size_after:
        out.append(f"size {_sizes(size_before, size_after)}")
    return out or ["content changed, same profile"]


def _loadable(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    was, now = before.get("loadable_by_mainline"), after.get("loadable_by_mainline")
    if was is True and now is False:
        return ["no longer loadable by mainline llama.cpp"]
    if was is False and now is True:
        return ["now loadable by mainline llama.cpp"]
    return []


def _mtp(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    old, new = _dict(before.get("mtp")), _dict(after.get("mtp"))
    if not old or not new:
        return []
    was, now = old.get("present"), new.get("present")
    if was is True and now is False:
        return ["MTP head removed"]
    if was is False and now is True:
        return ["MTP head added"]
    out: list[str] = []
    if old.get("state") != new.get("state"):
        out.append(f"MTP state {old.get('state')} -> {new.get('state')}")
    old_types = _dict(_dict(_dict(before.get("groups")).get("mtp")).get("types"))
    new_types = _dict(_dict(_dict(after.get("groups")).get("mtp")).get("types"))
    mix = _describe_mix(old_types, new_types) if old_types and new_types else None
    if mix is not None:
        out.append(f"MTP {mix[0]} -> {mix[1]}")
    elif not (old_types and new_types) and old.get("min_bits") != new.get("min_bits") and now:
        out.append(f"MTP min bits {_bits(old.get('min_bits'))} -> {_bits(new.get('min_bits'))}")
    if old.get("preserved") is True and new.get("preserved") is False:
        out.append("MTP head no longer preserved")
    elif old.get("preserved") is False and new.get("preserved") is True:
        out.append("MTP head now preserved")
    return out


def _groups(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(sentences about attention, sentences about the other groups), in _GROUP_WORDS order."""
    old_groups, new_groups = _dict(before.get("groups")), _dict(after.get("groups"))
    attention: list[str] = []
    others: list[str] = []
    for key, words in _GROUP_WORDS:
        old, new = _dict(old_groups.get(key)), _dict(new_groups.get(key))
        old_types, new_types = _dict(old.get("types")), _dict(new.get("types"))
        into = attention if key == "attn" else others
        if old and not new and old_groups and new_groups:
            into.append(f"{words} removed")
        elif new and not old and old_groups and new_groups:
            into.append(f"{words} added ({describe_types(new_types)})")
        elif old_types and new_types:
            mix = _describe_mix(old_types, new_types)
            if mix is not None:
                into.append(f"{words} {mix[0]} -> {mix[1]}")
    if not old_groups or not new_groups:
        # No per-group types: fall back on the attention verdict.
        old_attn, new_attn = _dict(before.get("attention")), _dict(after.get("attention"))
        if old_attn and new_attn and old_attn.get("min_bits") != new_attn.get("min_bits"):
            attention.append(
                f"attention min bits {_bits(old_attn.get('min_bits'))} -> "
                f"{_bits(new_attn.get('min_bits'))}"
            )
    return attention, others


def _attention_flag(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    old_attn, new_attn = _dict(before.get("attention")), _dict(after.get("attention"))
    if old_attn.get("preserved") is True and new_attn.get("preserved") is False:
        return ["attention no longer preserved"]
    if old_attn.get("preserved") is False and new_attn.get("preserved") is True:
        return ["attention now preserved"]
    return []


def _dynamic_flag(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    if before.get("dynamic") is True and after.get("dynamic") is False:
        return ["no longer dynamic"]
    if before.get("dynamic") is False and after.get("dynamic") is True:
        return ["now dynamic (bulk FFN below attention, embeddings and output)"]
    return []
