"""What llama-quantize's named mixes put in each tensor (pure: no I/O).

Per tensor, the types a mix may legitimately hold, so that a claim fires only outside the recipe.
Details: docs/internals/profile.md#recipes
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

from crawler.gguf.ggml import GGML_TYPES

__all__ = [
    "FTYPE_DEFAULT",
    "ModelFacts",
    "RecipeTensor",
    "fallback",
    "model_facts",
    "recipe_plan",
    "tensor_category",
]

#: llama_ftype (as crawler.profile.build names it) -> the ggml type llama-quantize starts each
#: tensor at.
FTYPE_DEFAULT: Mapping[str, str] = {
    "ALL_F32": "F32",
    "F16": "F16",
    "BF16": "BF16",
    "Q4_0": "Q4_0",
    "Q4_1": "Q4_1",
    "Q5_0": "Q5_0",
    "Q5_1": "Q5_1",
    "Q8_0": "Q8_0",
    "Q1_0": "Q1_0",
    "Q2_0": "Q2_0",
    "MXFP4_MOE": "MXFP4",
    "NVFP4": "NVFP4",
    "Q2_K_S": "Q2_K",
    "Q2_K": "Q2_K",
    "IQ3_XS": "IQ3_S",
    "Q3_K_S": "Q3_K",
    "Q3_K_M": "Q3_K",
    "Q3_K_L": "Q3_K",
    "Q4_K_S": "Q4_K",
    "Q4_K_M": "Q4_K",
    "Q5_K_S": "Q5_K",
    "Q5_K_M": "Q5_K",
    "Q6_K": "Q6_K",
    "TQ1_0": "TQ1_0",
    "TQ2_0": "TQ2_0",
    "IQ2_XXS": "IQ2_XXS",
    "IQ2_XS": "IQ2_XS",
    "IQ2_S": "IQ2_XS",
    "IQ2_M": "IQ2_S",
    "IQ3_XXS": "IQ3_XXS",
    "IQ1_S": "IQ1_S",
    "IQ1_M": "IQ1_M",
    "IQ4_NL": "IQ4_NL",
    "IQ4_XS": "IQ4_XS",
    "IQ3_S": "IQ3_S",
    "IQ3_M": "IQ3_S",
}

# tensor_type_fallback: a 256-block type on a row that is not a multiple of 256.
_FALLBACK: Mapping[str, str] = {
    "IQ1_S": "IQ4_NL",
    "IQ1_M": "IQ4_NL",
    "IQ2_XXS": "IQ4_NL",
    "IQ2_XS": "IQ4_NL",
    "IQ2_S": "IQ4_NL",
    "IQ3_XXS": "IQ4_NL",
    "IQ3_S": "IQ4_NL",
    "IQ4_XS": "IQ4_NL",
    "Q2_0": "Q4_0",
    "Q2_K": "Q4_0",
    "Q3_K": "Q4_0",
    "TQ1_0": "Q4_0",
    "TQ2_0": "Q4_0",
    "Q4_K": "Q5_0",
    "Q5_K": "Q5_1",
    "Q6_K": "Q8_0",
}
_BY_NAME = {t.name: t for t in GGML_TYPES.values()}
_FLOATS = frozenset({"F32", "F16", "BF16"})
_IQ_LOW = frozenset({"IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M"})
_BLK = re.compile(r"^blk\.(\d+)\.")
# llama_tensor_get_type_impl's ATTENTION_QKV branch.
_QKV_BRANCH: Mapping[str, str] = {
    "Q3_K_M": "Q4_K",
    "Q3_K_L": "Q4_K",
    "IQ3_M": "Q4_K",
    "Q4_K_M": "Q5_K",
    "Q5_K_M": "Q6_K",
}
# tensor_allows_quantization: names llama-quantize leaves at their source type.
_NEVER = (
    "_norm.weight",
    "ffn_gate_inp.weight",
    "ffn_gate_tid2eid.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d",
    "shortconv.conv.weight",
    "indexer.k_proj.weight",
    "indexer.q_proj.weight",
    "time_mix_first.weight",
    "time_mix_w0.weight",
    "time_mix_w1.weight",
    "time_mix_w2.weight",
    "time_mix_v0.weight",
    "time_mix_v1.weight",
    "time_mix_v2.weight",
    "time_mix_a0.weight",
    "time_mix_a1.weight",
    "time_mix_a2.weight",
    "time_mix_g1.weight",
    "time_mix_g2.weight",
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
    "attn_rel_b.weight",
    ".position_embd",
    "sam.pos_embd",
    "sam.neck.",
    "sam.net_",
    ".rel_pos",
    ".patch_embd",
    ".patch_merger",
    "a.rvq.codebook",
    "mm.a.code_embd",
)


@dataclass(frozen=True, slots=True)
class RecipeTensor:
    """What the recipe needs of one tensor: name, ggml shape (ne0 first), its type and bytes."""

    name: str
    shape: tuple[int, ...]
    type_name: str
    n_bytes: int | None


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """The hparams the rules read (None: unknown, both branches are allowed)."""

    arch: str | None
    n_layer: int
    n_expert: int
    n_gqa: int | None
    #: No output.weight: token_embd is quantized with the output rule.
    tied: bool


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def model_facts(metadata: Mapping[str, Any], tensor_names: Iterable[str]) -> ModelFacts:
    """The facts the rules need, from a header's metadata and tensor names."""
    arch = metadata.get("general.architecture")
    arch = arch if isinstance(arch, str) else None

    def kv(key: str) -> Any:
        return metadata.get(f"{arch}.{key}") if arch else None

    def scalar(v: Any) -> int | None:
        if isinstance(v, list) and v:
            vals = {x for x in v if _int(x)}
            return next(iter(vals)) if len(vals) == 1 else None
        return _int(v)

    heads, kv_heads = scalar(kv("attention.head_count")), scalar(kv("attention.head_count_kv"))
    n_gqa = heads // kv_heads if heads and kv_heads else None
    names = list(tensor_names)
    return ModelFacts(
        arch=arch,
        n_layer=_int(kv("block_count")) or 0,
        n_expert=_int(kv("expert_count")) or 0,
        n_gqa=n_gqa,
        tied="output.weight" not in names,
    )


def tensor_category(name: str) -> str:
    """llama-quant.cpp ``tensor_get_category``: the role the rules key on."""
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for needle, cat in (
        ("attn_qkv.weight", "attn_qkv"),
        ("attn_kv_b.weight", "attn_kv_b"),
        ("attn_v.weight", "attn_v"),
        ("attn_k.weight", "attn_k"),
        ("attn_q.weight", "attn_q"),
        ("attn_output.weight", "attn_output"),
        ("ffn_up", "ffn_up"),
        ("ffn_gate", "ffn_gate"),
        ("ffn_down", "ffn_down"),
    ):
        if needle in name:
            return cat
    return "other"


def quantized_by_llama(name: str, shape: Sequence[int]) -> bool:
    """llama-quant.cpp ``tensor_allows_quantization`` for a default run (output included)."""
    if len(shape) < 2 or not name.endswith("weight"):
        return False
    if name in ("position_embd.weight", "token_types.weight"):
        return False
    return not any(n in name for n in _NEVER)


def fallback(type_name: str, ncols: int) -> str:
    """``tensor_type_fallback``: the type really written for ``type_name`` on rows of ``ncols``."""
    info = _BY_NAME.get(type_name)
    if info is None or ncols % info.block_size == 0:
        return type_name
    cousin = _FALLBACK.get(type_name)
    if cousin is None or ncols % _BY_NAME[cousin].block_size:
        return "F16"
    return cousin


def _use_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


@dataclass(frozen=True, slots=True)
class _Case:
    has_imatrix: bool
    is_70b: bool
    n_gqa: int


def _impl(
    ftype: str,
    cat: str,
    t: RecipeTensor,
    m: ModelFacts,
    c: _Case,
    i_wv: int,
    n_wv: int,
    i_layer: int,
) -> str:
    """``llama_tensor_get_type_impl`` for one tensor in one case (before the fallback)."""
    new = FTYPE_DEFAULT[ftype]
    n_layer = m.n_layer
    falcon = m.arch == "falcon"
    if cat == "output" or (m.tied and cat == "token_embd"):
        nx = t.shape[0]
        if ftype == "MXFP4_MOE":
            return "Q8_0"
        if falcon or nx % _BY_NAME[new].block_size:
            return "Q8_0"
        if ftype in _IQ_LOW or ftype == "IQ3_XXS":
            return "Q5_K"
        return new if new == "Q8_0" else "Q6_K"
    if ftype == "MXFP4_MOE":
        # Experts (3-D) MXFP4; bailingmoe3's 3-D MLA projections are not experts.
        expert = len(t.shape) > 2 and t.shape[2] > 1
        if m.arch == "bailingmoe3" and cat not in ("ffn_up", "ffn_gate", "ffn_down"):
            expert = False
        return "MXFP4" if expert else "Q8_0"
    if cat == "token_embd":
        if ftype in ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M"):
            return "Q2_K"
        if ftype in ("IQ2_S", "IQ2_M", "IQ3_XXS"):
            return "IQ3_S"
        if ftype in ("TQ1_0", "TQ2_0", "Q2_0"):
            return "Q4_K"
        return new
    attn_v = cat in ("attn_v", "attn_qkv", "attn_kv_b")
    if ftype in _IQ_LOW:
        s_or_m = ftype in ("IQ2_S", "IQ2_M")
        if attn_v:
            if c.n_gqa >= 4 or m.n_expert >= 4:
                return "Q4_K"
            return "IQ3_S" if s_or_m else "Q2_K"
        if m.n_expert == 8 and cat == "attn_k":
            return "Q4_K"
        if cat == "ffn_down":
            return ("IQ3_S" if s_or_m else "Q2_K") if i_layer < n_layer // 8 else new
        if cat == "attn_output":
            if m.n_expert == 8:
                return "Q5_K"
            if ftype in ("IQ1_S", "IQ1_M"):
                return "IQ2_XXS"
            if s_or_m:
                return "IQ3_S"
        return new
    if attn_v:
        if ftype == "Q2_K":
            new = "Q4_K" if c.n_gqa >= 4 else "Q3_K"
        elif ftype == "Q2_K_S" and c.n_gqa >= 4:
            new = "Q4_K"
        elif ftype == "IQ3_XXS":
            new = "Q4_K" if c.n_gqa >= 4 else ("IQ3_XXS" if c.has_imatrix else "IQ3_S")
        elif (ftype in ("IQ3_XS", "IQ3_S") and c.n_gqa >= 4) or ftype == "IQ3_M":
            new = "Q4_K"
        elif ftype == "Q3_K_M":
            new = "Q5_K" if i_wv < 2 else "Q4_K"
        elif ftype == "Q3_K_L" or (ftype in ("IQ4_NL", "IQ4_XS") and c.n_gqa >= 4):
            new = "Q5_K"
        elif ftype in ("Q4_K_M", "Q5_K_M") and _use_more_bits(i_wv, n_wv):
            new = "Q6_K"
        elif ftype == "Q4_K_S" and i_wv < 4:
            new = "Q5_K"
        if c.is_70b and new in ("Q3_K", "Q4_K"):
            new = "Q5_K"
        if m.n_expert == 8:
            new = "Q8_0"
        return new
    if cat == "attn_k":
        if m.n_expert == 8:
            return "Q8_0"
        if ftype == "IQ3_XS":
            return "IQ3_XXS"
        if ftype == "IQ3_XXS":
            return "IQ2_S"
        return new
    if cat == "attn_q":
        if ftype == "IQ3_XS":
            return "IQ3_XXS"
        if ftype == "IQ3_XXS":
            return "IQ2_S"
        return new
    if cat == "ffn_down":
        i, n = i_layer, n_layer
        if ftype == "Q2_K":
            return "Q3_K"
        if ftype == "Q2_K_S":
            return "Q4_K" if i < n // 8 else new
        if ftype == "IQ3_XXS" and not c.has_imatrix:
            return "Q4_K" if i < n // 8 else "Q3_K"
        if ftype == "Q3_K_M":
            if i < n // 16:
                return "Q5_K"
            return "Q4_K" if not falcon or _use_more_bits(i, n) else "Q3_K"
        if ftype == "IQ3_M" and (i < n // 8 or (m.n_expert == 8 and _use_more_bits(i, n))):
            return "Q4_K"
        if ftype == "Q3_K_L":
            return "Q4_K" if falcon else "Q5_K"
        if ftype == "Q4_K_M":
            if falcon:
                return "Q6_K" if i < n // 16 else "Q5_K" if _use_more_bits(i, n) else "Q4_K"
            return "Q6_K" if _use_more_bits(i, n) else new
        if i < n // 8 and ftype in ("IQ4_NL", "IQ4_XS") and not c.has_imatrix:
            return "Q5_K"
        if ftype == "Q5_K_M" and _use_more_bits(i, n):
            return "Q6_K"
        if ftype == "Q4_K_S" and not falcon and i < n // 8:
            return "Q5_K"
        if ftype in ("Q4_0", "Q5_0") and c.has_imatrix and i < n // 8:
            return "Q4_1" if ftype == "Q4_0" else "Q5_1"
        return new
    if cat == "attn_output":
        if falcon:
            return "Q4_K" if ftype == "Q3_K_L" else new
        if m.n_expert == 8:
            if ftype in (
                "Q2_K",
                "IQ3_XS",
                "IQ3_XXS",
                "Q3_K_S",
                "Q3_K_M",
                "IQ4_NL",
                "Q4_K_S",
                "Q4_K_M",
                "IQ3_S",
                "IQ3_M",
                "IQ4_XS",
            ):
                return "Q5_K"
            return new
        return {
            "Q2_K": "Q3_K",
            "IQ3_XXS": "IQ3_S",
            "Q3_K_M": "Q4_K",
            "Q3_K_L": "Q5_K",
            "IQ3_M": "Q4_K",
        }.get(ftype, new)
    if cat in ("ffn_gate", "ffn_up"):
        if ftype == "IQ3_XS" and n_layer // 8 <= i_layer < 7 * n_layer // 8:
            return "IQ3_XXS"
        return new
    return new


def _layer_key(name: str) -> tuple[int, str]:
    m = _BLK.match(name)
    return (int(m.group(1)) if m else -1, name)


def recipe_plan(
    ftype: str, tensors: Sequence[RecipeTensor], model: ModelFacts
) -> dict[str, frozenset[str]] | None:
    """Tensor name -> the types llama-quantize's ``ftype`` mix may give it (fallbacks applied).

    Tensors llama-quantize leaves alone (norms, routers, 1-D) are not in the map. None for an
    ftype this module has no recipe for.
    """
    if ftype not in FTYPE_DEFAULT:
        return None
    default = FTYPE_DEFAULT[ftype]
    ordered = sorted(tensors, key=lambda t: _layer_key(t.name))
    cats = {t.name: tensor_category(t.name) for t in ordered}
    n_wv = sum(1 for c in cats.values() if c in ("attn_v", "attn_qkv", "attn_kv_b"))
    gqa = (model.n_gqa,) if model.n_gqa is not None else (1, 8)
    cases = [
        _Case(has_imatrix=h, is_70b=b, n_gqa=g)
        for h, b, g in product((False, True), (False, model.n_layer == 80), gqa)
    ]
    out: dict[str, frozenset[str]] = {}
    i_wv = 0
    counters = {"ffn_down": 0, "ffn_gate": 0, "ffn_up": 0}
    for t in ordered:
        if not quantized_by_llama(t.name, t.shape):
            continue
        cat = cats[t.name]
        if default in _FLOATS:
            # Not a quantized mix: every quantizable tensor at the default type; convert keeps
            # some at F32 (llama-quant.cpp applies no rules when the default is not quantized).
            out[t.name] = frozenset({default, "F32"})
            continue
        i_layer = 0
        if cat in counters:
            i_layer = counters[cat]
            if model.n_expert > 1:
                i_layer = _layer_key(t.name)[0]
            counters[cat] += 1
        types = {
            _impl(ftype, cat, t, model, c, i_wv, n_wv, i_layer if i_layer >= 0 else 0)
            for c in cases
        }
        if cat == "attn_qkv" and ftype in _QKV_BRANCH:
            # The branch llama-quant.cpp still has after the attn_v one (unreachable there now,
            # since attn_qkv counts as attn_v): what earlier llama.cpp versions gave fused QKV.
            types.add(_QKV_BRANCH[ftype])
        if cat in ("attn_v", "attn_qkv", "attn_kv_b"):
            i_wv += 1
        out[t.name] = frozenset(fallback(x, t.shape[0]) for x in types)
    return out
