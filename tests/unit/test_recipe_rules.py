"""One synthetic file per llama-quantize rule that no real file of tests/corpus covers: each is
written by hand from src/llama-quant.cpp (llama_tensor_get_type_impl), named honestly (no claim)
and renamed (the true claims)."""

from __future__ import annotations

from dataclasses import replace

from crawler.gguf.parse import parse_header_bytes
from crawler.profile.build import build_profile
from crawler.profile.labels import parse_quant_label
from crawler.profile.mixes import mix_for
from tests import synth
from tests.synth.recipe import Recipe, TensorSlot
from tests.unit.test_real_corpus import _kinds

LLAMA16 = replace(synth.preset("llama"), n_layer=16)  # n_layer / 8 = 2


def _claims(spec, recipe: Recipe, name: str) -> list[str]:
    header = parse_header_bytes(synth.header_bytes(spec, recipe))
    return _kinds(build_profile(header, file_name=name).claims)


def _more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _iq3_m(slot: TensorSlot) -> str:
    # IQ3_M: default IQ3_S; attn_v and attn_output Q4_K; ffn_down Q4_K in the first n/8 layers;
    # output Q6_K (an untied model's token_embd keeps the default).
    if slot.role == "output":
        return "Q6_K"
    if slot.role in ("attn_v", "attn_output"):
        return "Q4_K"
    if slot.role == "ffn_down" and slot.layer is not None and slot.layer < slot.n_layer_all // 8:
        return "Q4_K"
    return "IQ3_S"


def test_iq3_m_is_judged_against_its_own_recipe():
    iq3_m = Recipe("IQ3_M", 27, _iq3_m)
    assert _claims(LLAMA16, iq3_m, "L-IQ3_M.gguf") == []
    assert _claims(LLAMA16, iq3_m, "L-IQ3_S.gguf") == ["file_type", "tensors:more"]
    assert _claims(LLAMA16, iq3_m, "L.gguf") == []  # general.file_type alone agrees too


def _mxfp4_moe(slot: TensorSlot) -> str:
    # MXFP4_MOE: 3-D expert tensors MXFP4, every other quantized tensor Q8_0 (output included).
    return "MXFP4" if slot.is_moe_expert else "Q8_0"


def test_mxfp4_moe_puts_only_the_experts_at_4_bit():
    spec = synth.preset("qwen3moe")
    rec = Recipe("MXFP4_MOE", 38, _mxfp4_moe)
    assert _claims(spec, rec, "M-MXFP4_MOE.gguf") == []
    assert _claims(spec, rec, "M-Q8_0.gguf") == ["file_type", "tensors:fewer"]


def _q4_k_m_8_experts(slot: TensorSlot) -> str:
    # Q4_K_M with n_expert == 8: attn_v and attn_k Q8_0, attn_output Q5_K, ffn_down by layer.
    if slot.role == "output":
        return "Q6_K"
    if slot.role in ("attn_v", "attn_k"):
        return "Q8_0"
    if slot.role == "attn_output":
        return "Q5_K"
    if slot.role.startswith("ffn_down") and _more_bits(slot.layer or 0, slot.n_layer_all):
        return "Q6_K"
    return "Q4_K"


def test_the_eight_expert_rule():
    spec = synth.preset("qwen3moe")
    assert spec.moe is not None and spec.moe.n_expert == 8
    assert _claims(spec, Recipe("Q4_K_M", 15, _q4_k_m_8_experts), "M-Q4_K_M.gguf") == []
    # The dense rule on an 8-expert model is not what llama-quantize writes.
    assert _claims(spec, synth.q4_k_m_like(), "M-Q4_K_M.gguf") == ["tensors:fewer"]


def test_bartowski_l_keeps_embeddings_and_output_at_q8_0():
    def q4_k_l(slot: TensorSlot) -> str:
        if slot.role in ("token_embd", "output"):
            return "Q8_0"
        return synth.q4_k_m_like().choose(slot)  # type: ignore[return-value]

    rec = Recipe("Q4_K_L", 15, q4_k_l)
    assert _claims(LLAMA16, rec, "L-Q4_K_L.gguf") == []
    assert _claims(LLAMA16, rec, "L-Q4_K_M.gguf") == []  # raised token_embd/output: allowed
    assert _claims(LLAMA16, synth.q4_k_m_like(), "L-Q4_K_L.gguf") == ["edge:fewer"]


def test_dynamic_names_on_the_stock_recipe_say_so():
    kinds = _claims(LLAMA16, synth.q4_k_m_like(), "L-UD-Q4_K_XL.gguf")
    assert "stock" in kinds and "file_type" not in kinds
    # A real-size Unsloth-like UD-Q3_K_XL (per-layer choices above the base) gets none.
    spec = synth.preset("qwen35", "real")
    assert _claims(spec, synth.ud_q3_k_xl_like(), "Qwen3.6-27B-UD-Q3_K_XL.gguf") == []


def test_mix_names():
    def mix(name: str):  # type: ignore[no-untyped-def]
        label = parse_quant_label(name)
        assert label is not None
        return mix_for(label)

    assert mix("x-UD-Q8_K_XL.gguf").ftypes == ("Q8_0",)
    assert mix("x-Q4_K_L.gguf").kind == "embed8" and mix("x-Q4_K_L.gguf").ftypes == ("Q4_K_M",)
    assert mix("x-Q3_K_XL.gguf").kind == "embed8"  # bartowski's, not Unsloth's
    assert mix("x-Q4_K_XL.gguf").kind == "dynamic"
    assert mix("x-IQ2_M.gguf").ftypes == ("IQ2_M",)
    assert mix("x-Q4_K.gguf").ftypes == ("Q4_K_S", "Q4_K_M")
    assert mix("x-IQ4_KS.gguf") is None  # ik_llama.cpp: no llama-quantize recipe


# Qwen2.5-0.5B's shape (896 wide: not a multiple of 256; tied embeddings; 24 layers; 14 / 2
# heads of 64). No registry package found ships that file, so it is written by hand here.
QWEN05 = replace(
    synth.preset("llama"),
    n_vocab=512,
    n_embd=896,
    n_layer=24,
    n_head=14,
    n_head_kv=2,
    head_dim=64,
    n_ff=4864,
    tied_embeddings=True,
)


def _q4_k_m_dense(slot: TensorSlot) -> str:
    # Q4_K_M before the fallback (tests/synth applies tensor_type_fallback: Q4_K -> Q5_0 and
    # Q6_K -> Q8_0 on the 896-wide rows): the output rule on the tied token_embd, use_more_bits
    # attn_v and ffn_down at Q6_K, the rest Q4_K.
    if slot.role in ("token_embd", "output"):
        return "Q6_K"
    if slot.role in ("attn_v", "ffn_down") and _more_bits(slot.layer or 0, slot.n_layer_all):
        return "Q6_K"
    return "Q4_K"


def test_fallbacks_on_896_wide_rows_are_the_recipe():
    rec = Recipe("Q4_K_M", 15, _q4_k_m_dense)
    header = parse_header_bytes(synth.header_bytes(QWEN05, rec))
    types = {t.name: t.type_id for t in header.tensors}
    assert types["blk.0.ffn_gate.weight"] == 6 and types["token_embd.weight"] == 8  # Q5_0, Q8_0
    for name in ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "model.gguf"):
        assert build_profile(header, file_name=name).claims == ()
    assert _claims(QWEN05, rec, "q-Q8_0.gguf") == ["file_type", "tensors:fewer"]
