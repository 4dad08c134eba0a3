"""A quant's precision profile and verdicts in plain sentences (pure: no I/O).

What quants inspect shows as a table, in words for an agent or a person; every sentence a fact.
Details: docs/internals/profile.md#explain
"""

from __future__ import annotations

from crawler.gguf.ggml import is_mainline
from crawler.profile.precision import PrecisionProfile

__all__ = ["explain_profile"]

#: Group names as words.
_GROUP_WORDS = {
    "token_embd": "token embeddings",
    "output": "output head",
    "attn": "attention",
    "linear_attn": "linear attention",
    "ffn": "feed-forward",
    "ffn_exps": "routed experts",
    "ffn_shexp": "shared experts",
    "router": "expert router",
    "mtp": "MTP head",
    "norm": "norms",
    "other": "other tensors",
}


def _bits(lo: float | None, hi: float | None) -> str:
    if lo is None or hi is None:
        return "bits unknown"
    return f"{lo:g}-bit" if lo == hi else f"{lo:g}- to {hi:g}-bit"


def explain_profile(p: PrecisionProfile, *, source: str | None = None) -> str:
    """Sentences, one per line, on what the file holds and what its verdicts mean."""
    name = source or p.file_name
    if p.vocab_only:
        return (
            f"{name} holds a vocabulary and no tensors: a tokenizer file, not a model;"
            " there is nothing to run or to estimate."
        )
    lines = []
    label = f" labelled {p.quant_label}" if p.quant_label else ""
    ftype = f", file type {p.file_type}" if p.file_type else ""
    bpw = f" at {p.bpw:.2f} bits per weight on average" if p.bpw is not None else ""
    lines.append(
        f"{name}{label} is a {p.architecture or 'model of unknown architecture'} with"
        f" {p.n_params:,} parameters in {p.n_tensors} tensors{bpw}{ftype}."
    )
    total = p.n_bytes or 1
    parts = []
    for group, g in sorted(p.groups.items(), key=lambda kv: -kv[1].n_bytes):
        if group == "norm":
            continue  # always f32 and tiny; it would only add noise
        words = _GROUP_WORDS.get(group, group)
        share = 100 * g.n_bytes / total
        parts.append(f"{words} {_bits(g.min_bits, g.max_bits)} ({share:.0f}% of the bytes)")
    if parts:
        lines.append("Precision by tensor group, largest first: " + "; ".join(parts) + ".")
    lines.append(_mtp_sentence(p))
    if p.attention_min_bits is None:
        lines.append("It has no attention weight matrices (a recurrent or linear-attention model).")
    elif p.attention_preserved:
        lines.append(
            f"Attention is kept at {p.attention_min_bits} bits or more"
            f" (preserved: every attention matrix at >= {p.preserved_bits} bits)."
        )
    else:
        lines.append(
            f"Some attention matrices are at {p.attention_min_bits} bits, below the"
            f" {p.preserved_bits} bits that count as preserved: long-context quality can suffer."
        )
    if p.dynamic:
        lines.append(
            "It is a dynamic quant: the bulk feed-forward weights are clearly below attention,"
            " embeddings and output, which keep more bits."
        )
    if p.loadable_by_mainline:
        lines.append("Mainline llama.cpp can load every tensor type in it.")
    elif p.unknown_types:
        ids = ", ".join(map(str, p.unknown_types))
        lines.append(
            f"Mainline llama.cpp CANNOT load it: tensor type id(s) {ids} are not ggml's (a fork"
            " that defines them may)."
        )
    elif forks := sorted({t.type_name for t in p.tensors if not is_mainline(t.type_id)}):
        lines.append(
            f"Mainline llama.cpp CANNOT load it: {', '.join(forks)} exist only in ik_llama.cpp."
        )
    elif p.mtp.state == "declared_missing":
        lines.append(
            "Mainline llama.cpp CANNOT load it: the metadata declares MTP layers whose tensors are"
            " missing, and llama.cpp's loader requires them."
        )
    if p.data_truncated:
        lines.append(
            "The file ends before its tensors' data: a partial download or the first piece of a"
            " byte-split file (the header is whole)."
        )
    if p.claims:
        lines.append("Its name and its contents disagree: " + "; ".join(p.claims) + ".")
    return "\n".join(lines)


def _mtp_sentence(p: PrecisionProfile) -> str:
    m = p.mtp
    if m.state == "present":
        where = ", ".join(map(str, m.layers))
        text = f"It carries an MTP (multi-token prediction) head in layer(s) {where}"
        if m.min_bits is not None:
            text += f", lowest {m.min_bits} bits"
        if m.preserved:
            return text + ": preserved, usable for drafting (llama-server --spec-type draft-mtp)."
        return text + f": below {p.preserved_bits} bits, so quants search does not draft with it."
    if m.state == "sidecar":
        return (
            "Its MTP head is not in this file: the repository ships it as a separate GGUF"
            " (a sidecar)."
        )
    if m.state == "declared_missing":
        return (
            "Its metadata declares MTP layers but the tensors are missing: it cannot draft with"
            " an MTP head."
        )
    return "It has no MTP head (no multi-token prediction drafting)."
