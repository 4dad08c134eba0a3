"""What changed between two analyses of one quant, in plain words ("attention Q4_K -> Q8_0").

Pure: no I/O. Works on the profile JSON that ``quants inspect --json`` prints and the catalog
stores per version (DESIGN.md section 3: ``groups{...types}``, ``mtp{...}``, ``attention{...}``),
and tolerates missing keys: an older or partial profile yields fewer sentences, never an error.
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


def describe_types(types: Mapping[str, Any] | None) -> str:
    """``{"Q4_K": 30, "Q6_K": 10}`` -> ``"Q4_K+Q6_K"`` (most tensors first)."""
    if not types:
        return "none"
    ordered = sorted(types.items(), key=lambda kv: (-_count(kv[1]), kv[0]))
    return "+".join(name for name, _ in ordered)


def _count(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _describe_mix(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[str, str]:
    # Same set of types in other proportions: show the counts, or the sentence would be "A -> A".
    if set(old) == set(new):
        return _with_counts(old), _with_counts(new)
    return describe_types(old), describe_types(new)


def _with_counts(types: Mapping[str, Any]) -> str:
    ordered = sorted(types.items(), key=lambda kv: (-_count(kv[1]), kv[0]))
    return "/".join(f"{_count(n)} {name}" for name, n in ordered)


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _bits(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "unknown" if value is None else str(value)


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def _signed_size(delta: int) -> str:
    sign = "+" if delta > 0 else "-"
    magnitude = abs(delta)
    if magnitude >= 2**30:
        return f"{sign}{magnitude / 2**30:.2f} GiB"
    if magnitude >= 2**20:
        return f"{sign}{magnitude / 2**20:.1f} MiB"
    return f"{sign}{magnitude} B"


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
    out.extend(_mtp(before, after))
    out.extend(_groups(before, after))
    out.extend(_flags(before, after))
    n_before, n_after = before.get("n_tensors"), after.get("n_tensors")
    if isinstance(n_before, int) and isinstance(n_after, int) and n_before != n_after:
        out.append(f"tensors {n_before} -> {n_after}")
    size_before = old_size if old_size is not None else before.get("size_bytes")
    size_after = new_size if new_size is not None else after.get("size_bytes")
    if isinstance(size_before, int) and isinstance(size_after, int) and size_before != size_after:
        out.append(
            f"size {_gib(size_before)} -> {_gib(size_after)} "
            f"({_signed_size(size_after - size_before)})"
        )
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
    if old_types and new_types and dict(old_types) != dict(new_types):
        a, b = _describe_mix(old_types, new_types)
        out.append(f"MTP {a} -> {b}")
    elif old.get("min_bits") != new.get("min_bits") and now:
        out.append(f"MTP min bits {_bits(old.get('min_bits'))} -> {_bits(new.get('min_bits'))}")
    if old.get("preserved") is True and new.get("preserved") is False:
        out.append("MTP head no longer preserved")
    elif old.get("preserved") is False and new.get("preserved") is True:
        out.append("MTP head now preserved")
    return out


def _groups(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    old_groups, new_groups = _dict(before.get("groups")), _dict(after.get("groups"))
    out: list[str] = []
    for key, words in _GROUP_WORDS:
        old, new = _dict(old_groups.get(key)), _dict(new_groups.get(key))
        old_types, new_types = _dict(old.get("types")), _dict(new.get("types"))
        if old and not new and old_groups and new_groups:
            out.append(f"{words} removed")
        elif new and not old and old_groups and new_groups:
            out.append(f"{words} added ({describe_types(new_types)})")
        elif old_types and new_types and dict(old_types) != dict(new_types):
            a, b = _describe_mix(old_types, new_types)
            out.append(f"{words} {a} -> {b}")
    if not old_groups or not new_groups:
        # No per-group types: fall back on the attention verdict.
        old_attn, new_attn = _dict(before.get("attention")), _dict(after.get("attention"))
        if old_attn and new_attn and old_attn.get("min_bits") != new_attn.get("min_bits"):
            out.append(
                f"attention min bits {_bits(old_attn.get('min_bits'))} -> "
                f"{_bits(new_attn.get('min_bits'))}"
            )
    return out


def _flags(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    old_attn, new_attn = _dict(before.get("attention")), _dict(after.get("attention"))
    if old_attn.get("preserved") is True and new_attn.get("preserved") is False:
        out.append("attention no longer preserved")
    elif old_attn.get("preserved") is False and new_attn.get("preserved") is True:
        out.append("attention now preserved")
    if before.get("dynamic") is True and after.get("dynamic") is False:
        out.append("no longer dynamic")
    elif before.get("dynamic") is False and after.get("dynamic") is True:
        out.append("now dynamic (bulk FFN below attention, embeddings and output)")
    return out
