"""Quant recipes for synthetic GGUFs: which ggml type each tensor gets, and how many bytes it takes.

A Recipe maps a TensorSlot (tensor role, layer, layer kind) to a ggml type id.
Recipe.type_for then applies what llama.cpp's quantizer does regardless of the recipe:
tensors it never quantizes stay F32, and a type whose block size does not divide ``ne0`` falls back
(``src/llama-quant.cpp`` ``tensor_allows_quantization`` and ``tensor_type_fallback``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from math import prod

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

#: Mainline ggml type ids by name (gguf-py constants; Q2_0 = 42 from ggml/include/ggml.h).
GGML_TYPES: dict[str, int] = {t.name: int(t.value) for t in GGMLQuantizationType}
GGML_TYPES["Q2_0"] = 42

#: (elements per block, bytes per block) of every type the builder can lay out.
TYPE_SIZES: dict[int, tuple[int, int]] = {int(t.value): bs for t, bs in GGML_QUANT_SIZES.items()}
TYPE_SIZES[42] = (32, 10)  # Q2_0 (ggml-common.h block_q2_0: fp16 d + 32 2-bit quants)

#: ik_llama.cpp-only types (github.com/ikawrakow/ik_llama.cpp gguf-py/gguf/constants.py).
IK_TYPES: dict[str, int] = {
    "Q6_0": 133,
    "IQ2_K": 137,
    "IQ3_K": 138,
    "IQ4_K": 139,
    "IQ5_K": 140,
    "IQ6_K": 141,
    "IQ4_KS": 144,
    "IQ2_KS": 145,
    "IQ4_KSS": 146,
    "IQ5_KS": 152,
    "IQ3_KS": 156,
}
TYPE_SIZES.update(
    {
        133: (32, 26),
        137: (256, 76),
        138: (256, 110),
        139: (256, 144),
        140: (256, 176),
        141: (256, 212),
        144: (256, 136),
        145: (256, 70),
        146: (256, 128),
        152: (256, 168),
        156: (256, 102),
    }
)

#: A fork-only type seen on the Hub ("PXQ4" in a Qwen3.8-27B file). Its
#: block layout is not published; the builder ASSUMES 256 elements in 144 bytes (4.5 bpw) to lay
#: the file out. A parser cannot know this size: it must infer it from offsets, or report unknown.
FORK_PXQ4 = 252
TYPE_SIZES[FORK_PXQ4] = (256, 144)

#: Exclusive upper bound of mainline type ids at the reference commit ("should be in [0, 43)",
#: ggml/src/gguf.cpp); anything at or above it makes mainline refuse the file.
MAINLINE_TYPE_COUNT = 43

#: llama_ftype values (include/llama.h) written as ``general.file_type``.
FILE_TYPES: dict[str, int] = {
    "F32": 0,
    "F16": 1,
    "Q4_0": 2,
    "Q8_0": 7,
    "Q4_K_S": 14,
    "Q4_K_M": 15,
    "Q3_K_M": 12,
    "Q5_K_M": 17,
    "Q6_K": 18,
    "IQ4_XS": 30,
    "BF16": 32,
    "MXFP4_MOE": 38,
}

# Fallback targets of llama-quant.cpp tensor_type_fallback (256-block types -> 32-block types).
_FALLBACK: dict[str, str] = {
    "IQ1_S": "IQ4_NL",
    "IQ1_M": "IQ4_NL",
    "IQ2_XXS": "IQ4_NL",
    "IQ2_XS": "IQ4_NL",
    "IQ2_S": "IQ4_NL",
    "IQ3_XXS": "IQ4_NL",
    "IQ3_S": "IQ4_NL",
    "IQ4_XS": "IQ4_NL",
    "Q2_K": "Q4_0",
    "Q3_K": "Q4_0",
    "TQ1_0": "Q4_0",
    "TQ2_0": "Q4_0",
    "Q4_K": "Q5_0",
    "Q5_K": "Q5_1",
    "Q6_K": "Q8_0",
}

F32 = GGML_TYPES["F32"]
F16 = GGML_TYPES["F16"]


def type_id(t: str | int) -> int:
    """Resolve a type name (mainline or ik_llama.cpp, e.g. ``"Q4_K"``, ``"IQ4_K"``) or raw id."""
    if isinstance(t, int):
        return t
    if t in GGML_TYPES:
        return GGML_TYPES[t]
    if t in IK_TYPES:
        return IK_TYPES[t]
    raise KeyError(f"unknown ggml type {t!r}")


def type_name(tid: int) -> str:
    """Name of a type id, ``"TYPE_<id>"`` for ids without a name."""
    for table in (GGML_TYPES, IK_TYPES):
        for name, value in table.items():
            if value == tid:
                return name
    return f"TYPE_{tid}"


def tensor_nbytes(shape: tuple[int, ...], tid: int) -> int:
    """Bytes of a tensor of ggml ``shape`` (ne0 first): rows of ``ne0 / block * bytes``."""
    block, size = TYPE_SIZES[tid]
    if shape[0] % block:
        raise ValueError(f"ne0={shape[0]} is not a multiple of block {block} of type {tid}")
    return shape[0] // block * size * prod(shape[1:])


def fallback(tid: int, ne0: int) -> int:
    """The type llama.cpp's quantizer really writes for ``tid`` on rows of ``ne0`` elements.

    ``src/llama-quant.cpp`` ``tensor_type_fallback``: a 256-block type on an incompatible row goes
    to its 32-block cousin (Q4_K -> Q5_0, Q6_K -> Q8_0, IQ* -> IQ4_NL ...); if that still does not
    divide ``ne0`` (or the type has no cousin: fork types here), F16.
    """
    block = TYPE_SIZES[tid][0]
    if ne0 % block == 0:
        return tid
    cousin = _FALLBACK.get(type_name(tid))
    if cousin is not None and ne0 % TYPE_SIZES[GGML_TYPES[cousin]][0] == 0:
        return GGML_TYPES[cousin]
    return F16


@dataclass(frozen=True, slots=True)
class TensorSlot:
    """Where a tensor sits, which is what a recipe decides on.

    ``role`` is the fine role (docs/inspect.md: name without ``blk.N.`` and ``.weight``: ``attn_q``,
    ``ffn_down_exps``, ``nextn.eh_proj``, ``ssm_dt.bias``). ``kind`` is the layer kind: ``global``
    (token_embd, output, output_norm), ``attention``, ``swa``, ``mla``, ``linear_attention`` or
    ``mtp`` (every tensor of an MTP block, its ordinary layer tensors included). ``role_index`` /
    ``role_count`` number the tensors of the same llama.cpp quantizer category (attn_v-like,
    ffn_down-like), in file order, for the "use more bits" layer rules.
    """

    name: str
    role: str
    layer: int | None
    kind: str
    shape: tuple[int, ...]
    n_layer_all: int
    n_expert: int = 0
    role_index: int = 0
    role_count: int = 0

    @property
    def is_moe_expert(self) -> bool:
        """Routed-expert tensor (``*_exps``)."""
        return self.role.endswith("_exps")


def quantizable(slot: TensorSlot) -> bool:
    """Mirror of llama-quant.cpp ``tensor_allows_quantization``: 2-D+ ``*.weight`` tensors only,
    never norms, the MoE router (``ffn_gate_inp``) or ``ssm_conv1d``."""
    name = slot.name
    return (
        len(slot.shape) >= 2
        and name.endswith("weight")
        and "_norm.weight" not in name
        and "ffn_gate_inp.weight" not in name
        and "ssm_conv1d" not in name
    )


Chooser = Callable[[TensorSlot], "str | int"]


@dataclass(frozen=True, slots=True)
class Recipe:
    """A named quant mix: ``choose(slot)`` gives the wanted type of each quantizable tensor.

    ``label`` is the Hub-style label (``Q4_K_M``, ``UD-Q3_K_XL``), ``file_type`` the
    ``general.file_type`` written, ``drop_mtp`` removes the MTP blocks' tensors while the metadata
    still declares ``nextn_predict_layers``.
    """

    label: str
    file_type: int
    choose: Chooser
    drop_mtp: bool = False

    def type_for(self, slot: TensorSlot) -> int:
        """Final type id of a tensor: F32 if llama.cpp would not quantize it, else the recipe's
        choice after the block-size fallback."""
        if not quantizable(slot):
            return F32
        return fallback(type_id(self.choose(slot)), slot.shape[0])


def _use_more_bits(i: int, n: int) -> bool:
    # llama-quant.cpp llama_tensor_get_type_impl: first and last eighth, and every third between.
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def uniform(t: str | int, *, label: str | None = None, file_type: int | None = None) -> Recipe:
    """Every quantizable tensor at type ``t`` (a "pure" quant)."""
    name = t if isinstance(t, str) else type_name(t)
    return Recipe(
        label=label or name,
        file_type=file_type if file_type is not None else FILE_TYPES.get(name, 0),
        choose=lambda _slot: t,
    )


def q8_0() -> Recipe:
    """``Q8_0``: every weight matrix Q8_0."""
    return uniform("Q8_0")


def bf16() -> Recipe:
    """``BF16``: every weight matrix BF16 (norms, router and conv F32, as the converter writes)."""
    return uniform("BF16")


def _q4_k_m(slot: TensorSlot) -> str:
    # llama.cpp's Q4_K_M mix (llama-quant.cpp llama_tensor_get_type_impl, ftype MOSTLY_Q4_K_M):
    # output Q6_K; attn_v-like (attn_v, attn_qkv) Q6_K on "more bits" layers; ffn_down-like
    # (incl. _exps/_shexp) Q6_K on "more bits" layers (layer index for MoE); the rest Q4_K.
    if slot.role == "output":
        return "Q6_K"
    if slot.role in ("attn_v", "attn_qkv"):
        return "Q6_K" if _use_more_bits(slot.role_index, slot.role_count) else "Q4_K"
    if slot.role.startswith("ffn_down"):
        i = slot.layer if slot.n_expert > 1 and slot.layer is not None else slot.role_index
        return "Q6_K" if _use_more_bits(i, slot.n_layer_all) else "Q4_K"
    return "Q4_K"


def q4_k_m_like() -> Recipe:
    """``Q4_K_M`` as llama-quantize makes it (roughly: the Q4_K_M branch of the type rules)."""
    return Recipe("Q4_K_M", FILE_TYPES["Q4_K_M"], _q4_k_m)


_LINEAR_ATTN = ("attn_qkv", "attn_gate", "ssm_out", "ssm_alpha", "ssm_beta")


def _ud_q3_k_xl(slot: TensorSlot) -> str:
    if slot.kind == "mtp":
        return "Q8_0"
    if slot.role == "token_embd":
        return "Q6_K"
    if slot.role == "output":
        return "Q8_0"
    if slot.role in ("attn_k", "attn_v", "attn_kv_a_mqa", "attn_k_b", "attn_v_b"):
        return "Q8_0"
    if slot.role.startswith("attn_") or slot.role in _LINEAR_ATTN:
        return "Q6_K"
    if slot.role.endswith("_shexp"):
        return "Q6_K"
    if slot.role == "ffn_down_exps":
        return "Q3_K"
    if slot.is_moe_expert:
        return "IQ3_XXS"
    if slot.role == "ffn_down":
        return "Q3_K"
    return "IQ3_XXS"


def ud_q3_k_xl_like() -> Recipe:
    """Unsloth-Dynamic-like ``UD-Q3_K_XL``: token_embd Q6_K, output Q8_0, attention Q6_K/Q8_0
    (k/v Q8_0), linear attention and shared experts Q6_K, MTP block Q8_0, dense FFN
    IQ3_XXS/Q3_K (down), routed experts IQ3_XXS/Q3_K. ``general.file_type`` stays Q3_K_M (12)."""
    return Recipe("UD-Q3_K_XL", FILE_TYPES["Q3_K_M"], _ud_q3_k_xl)


def _mxfp4_attn(slot: TensorSlot) -> str:
    if slot.role == "output":
        return "Q6_K"
    if slot.role.startswith("attn_") or slot.role in _LINEAR_ATTN or slot.is_moe_expert:
        return "MXFP4"
    return "Q4_K"


def ud_bad_mxfp4_attn() -> Recipe:
    """The bad first Qwen3.5 ``UD-Q4_K_XL``: attention (and linear attention, routed experts) in
    MXFP4, output Q6_K, the rest Q4_K; ``general.file_type`` 15 like a Q4_K_M."""
    return Recipe("UD-Q4_K_XL", FILE_TYPES["Q4_K_M"], _mxfp4_attn)


def _mtp_downgraded(slot: TensorSlot) -> str:
    if slot.kind == "mtp":
        return "Q4_K"
    if slot.role == "output":
        return "Q6_K"
    if slot.kind in ("attention", "swa", "mla") and slot.role.startswith("attn_"):
        return "Q8_0"
    return "Q4_K"


def mtp_downgraded() -> Recipe:
    """Trunk attention Q8_0 and output Q6_K, but every MTP-block tensor (nextn.eh_proj and the
    block's own attention/FFN) at Q4_K: attention is preserved, the MTP head is not."""
    return Recipe("Q4_K_M", FILE_TYPES["Q4_K_M"], _mtp_downgraded)


def _fork_252(slot: TensorSlot) -> str | int:
    if slot.role in ("ffn_gate", "ffn_up", "ffn_down") or slot.is_moe_expert:
        return FORK_PXQ4
    if slot.role == "ssm_out":
        return "MXFP4"
    return _q4_k_m(slot)


def fork_type_252() -> Recipe:
    """Like the Qwen3.8-27B "PXQ4" file: FFN matrices in fork type 252, ssm_out MXFP4, the rest
    Q4_K_M-like. Mainline rejects it ("invalid ggml type 252")."""
    return Recipe("PXQ4", FILE_TYPES["Q4_K_M"], _fork_252)


def _ik(slot: TensorSlot) -> str:
    if slot.role in ("token_embd", "output"):
        return "Q8_0"
    if slot.role.startswith("attn_") or slot.role in _LINEAR_ATTN or slot.kind == "mtp":
        return "IQ6_K"
    if slot.is_moe_expert:
        return "IQ2_KS"
    return "IQ4_K"


def ik_llama_mix() -> Recipe:
    """ubergarm-style ik_llama.cpp recipe: token_embd/output Q8_0, attention and MTP IQ6_K (141),
    dense FFN/shared experts IQ4_K (139), routed experts IQ2_KS (145). Mainline cannot load it.

    ik_llama.cpp numbers its ftypes apart from its type ids; ``general.file_type`` 139 here is a
    placeholder, not a verified ik ftype."""
    return Recipe("IQ4_K", 139, _ik)


def mtp_graft(trunk: Recipe, head: Recipe) -> Recipe:
    """A head grafted from another quant: ``trunk``'s types everywhere except the MTP blocks,
    which get ``head``'s (havenoammo "UD + MTP graft", localweights "...-Q8nextn")."""

    def choose(slot: TensorSlot) -> str | int:
        return head.choose(slot) if slot.kind == "mtp" else trunk.choose(slot)

    return Recipe(f"{trunk.label}+{head.label}nextn", trunk.file_type, choose)


def drop_mtp_tensors(recipe: Recipe) -> Recipe:
    """``recipe`` without the MTP blocks' tensors; ``nextn_predict_layers`` stays declared."""
    return replace(recipe, drop_mtp=True)
