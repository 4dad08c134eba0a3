"""Per-architecture tensor tables: exactly the tensors llama.cpp's ``load_arch_tensors`` creates.

Sources: ggml-org/llama.cpp at commit 0c1e57098 (vendored by llama-cpp-python 0.3.36),
``src/models/<arch>.cpp`` and names from ``src/llama-arch.cpp`` LLM_TENSOR_NAMES. The loader
refuses a file with a tensor it does not create ("wrong number of tensors") or without a required
one ("tensor ... not found"), so these lists are exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .spec import GLOBAL, LINEAR, MTP, ModelSpec


@dataclass(frozen=True, slots=True)
class TensorDef:
    """A tensor of the model: name, ggml shape (ne0 first), fine role, block index, layer kind."""

    name: str
    shape: tuple[int, ...]
    role: str
    layer: int | None
    kind: str


#: ``blk(suffix, *shape)`` adds ``blk.{il}.{suffix}`` to the table being built.
_Blk = Callable[..., None]


def _role(name: str) -> str:
    parts = name.split(".")
    if parts[0] == "blk":
        parts = parts[2:]
    if parts[-1] == "weight":
        parts = parts[:-1]
    return ".".join(parts)


def tensor_defs(spec: ModelSpec) -> list[TensorDef]:
    """The exact tensor table llama.cpp's ``load_arch_tensors`` creates for ``spec``, file order:
    token_embd, blocks 0..block_count-1, output_norm, output (unless tied)."""
    out: list[TensorDef] = []

    def add(name: str, *shape: int, layer: int | None = None, kind: str = GLOBAL) -> None:
        out.append(TensorDef(name, tuple(shape), _role(name), layer, kind))

    e, v = spec.n_embd, spec.n_vocab
    add("token_embd.weight", e, v)
    for il in range(spec.block_count):
        kind = spec.layer_kind(il)

        def blk(suffix: str, *shape: int, _il: int = il, _kind: str = kind) -> None:
            add(f"blk.{_il}.{suffix}", *shape, layer=_il, kind=_kind)

        _BLOCKS[spec.arch](spec, il, kind, blk)
    add("output_norm.weight", e)
    if not spec.tied_embeddings:
        add("output.weight", e, v)
    return out


def _attn_gqa(s: ModelSpec, blk: _Blk, q_mult: int = 1) -> None:
    # create_tensor_qkv (src/llama-model.cpp): separate attn_q/k/v, optional biases.
    d, e = s.head_dim, s.n_embd
    blk("attn_q.weight", e, d * s.n_head * q_mult)
    blk("attn_k.weight", e, d * s.n_head_kv)
    blk("attn_v.weight", e, d * s.n_head_kv)
    if s.attn_bias:
        blk("attn_q.bias", d * s.n_head * q_mult)
        blk("attn_k.bias", d * s.n_head_kv)
        blk("attn_v.bias", d * s.n_head_kv)
    blk("attn_output.weight", d * s.n_head, e)


def _ffn_dense(s: ModelSpec, blk: _Blk) -> None:
    blk("ffn_gate.weight", s.n_embd, s.n_ff)
    blk("ffn_up.weight", s.n_embd, s.n_ff)
    blk("ffn_down.weight", s.n_ff, s.n_embd)


def _ffn_moe(s: ModelSpec, blk: _Blk) -> None:
    assert s.moe is not None
    m, e = s.moe, s.n_embd
    blk("ffn_gate_inp.weight", e, m.n_expert)
    if m.probs_bias:
        blk("exp_probs_b.bias", m.n_expert)
    blk("ffn_gate_exps.weight", e, m.n_ff_exp, m.n_expert)
    blk("ffn_up_exps.weight", e, m.n_ff_exp, m.n_expert)
    blk("ffn_down_exps.weight", m.n_ff_exp, e, m.n_expert)
    if m.n_ff_shexp:
        # qwen35moe.cpp: sigmoid gate of the shared expert, 1-D {n_embd}.
        blk("ffn_gate_inp_shexp.weight", e)
    if m.n_expert_shared or m.n_ff_shexp:
        f = m.n_ff_shexp or m.n_ff_exp * m.n_expert_shared
        blk("ffn_gate_shexp.weight", e, f)
        blk("ffn_up_shexp.weight", e, f)
        blk("ffn_down_shexp.weight", f, e)


def _nextn(s: ModelSpec, blk: _Blk) -> None:
    # Qwen35 / GLM4_MOE / DeepSeek2 load_arch_tensors: eh_proj, enorm, hnorm required;
    # embed_tokens, shared_head_head, shared_head_norm TENSOR_NOT_REQUIRED.
    e = s.n_embd
    blk("nextn.eh_proj.weight", 2 * e, e)
    blk("nextn.enorm.weight", e)
    blk("nextn.hnorm.weight", e)
    if s.mtp_full_head:
        blk("nextn.embed_tokens.weight", e, s.n_vocab)
        blk("nextn.shared_head_head.weight", e, s.n_vocab)
    blk("nextn.shared_head_norm.weight", e)


def _blk_llama(s: ModelSpec, il: int, kind: str, blk: _Blk) -> None:
    # src/models/llama.cpp, qwen3.cpp (+ q/k norm), qwen3moe.cpp (+ experts).
    blk("attn_norm.weight", s.n_embd)
    _attn_gqa(s, blk)
    if s.qk_norm:
        blk("attn_q_norm.weight", s.head_dim)
        blk("attn_k_norm.weight", s.head_dim)
    blk("ffn_norm.weight", s.n_embd)
    if s.moe is not None:
        _ffn_moe(s, blk)
    else:
        _ffn_dense(s, blk)


def _blk_gemma3(s: ModelSpec, il: int, kind: str, blk: _Blk) -> None:
    # src/models/gemma3.cpp: post-attention and post-FFN norms, q/k norm.
    blk("attn_norm.weight", s.n_embd)
    _attn_gqa(s, blk)
    blk("post_attention_norm.weight", s.n_embd)
    blk("attn_q_norm.weight", s.head_dim)
    blk("attn_k_norm.weight", s.head_dim)
    blk("ffn_norm.weight", s.n_embd)
    _ffn_dense(s, blk)
    blk("post_ffw_norm.weight", s.n_embd)


def _blk_qwen35(s: ModelSpec, il: int, kind: str, blk: _Blk) -> None:
    # src/models/qwen35.cpp (qwen35moe.cpp: MoE FFN) load_block_trunk / load_block_mtp.
    # Full-attention Q is doubled (query + output gate): attn_q = {n_embd, head_dim * n_head * 2}.
    assert s.hybrid is not None
    h, e = s.hybrid, s.n_embd
    blk("attn_norm.weight", e)
    blk("post_attention_norm.weight", e)
    if kind == LINEAR:
        key_dim = h.state_size * h.group_count
        value_dim = h.inner_size
        blk("attn_qkv.weight", e, 2 * key_dim + value_dim)
        blk("attn_gate.weight", e, value_dim)
        blk("ssm_conv1d.weight", h.conv_kernel, 2 * key_dim + value_dim)
        blk("ssm_dt.bias", h.time_step_rank)
        blk("ssm_a", h.time_step_rank)
        blk("ssm_beta.weight", e, h.time_step_rank)
        blk("ssm_alpha.weight", e, h.time_step_rank)
        blk("ssm_norm.weight", h.state_size)
        blk("ssm_out.weight", value_dim, e)
    else:
        _attn_gqa(s, blk, q_mult=2)
        blk("attn_q_norm.weight", s.head_dim)
        blk("attn_k_norm.weight", s.head_dim)
    if s.moe is not None:
        _ffn_moe(s, blk)
    else:
        _ffn_dense(s, blk)
    if kind == MTP:
        _nextn(s, blk)


def _blk_glm4moe(s: ModelSpec, il: int, kind: str, blk: _Blk) -> None:
    # src/models/glm4-moe.cpp: biased q/k/v, post_attention_norm (no ffn_norm), dense leading
    # layers, MoE with exp_probs_b and shared experts, nextn tensors on blocks >= n_layer.
    assert s.moe is not None
    blk("attn_norm.weight", s.n_embd)
    _attn_gqa(s, blk)
    if s.qk_norm:
        blk("attn_q_norm.weight", s.head_dim)
        blk("attn_k_norm.weight", s.head_dim)
    blk("post_attention_norm.weight", s.n_embd)
    if il < s.moe.n_dense_lead:
        _ffn_dense(s, blk)
    else:
        _ffn_moe(s, blk)
    if kind == MTP:
        _nextn(s, blk)


def _blk_deepseek2(s: ModelSpec, il: int, kind: str, blk: _Blk) -> None:
    # src/models/deepseek2.cpp with is_mla() (key_length_mla/value_length_mla set): split
    # attn_k_b {nope, kv_lora, n_head} / attn_v_b {kv_lora, v_dim, n_head}, no legacy attn_kv_b.
    assert s.mla is not None and s.moe is not None
    mla, e, nh = s.mla, s.n_embd, s.n_head
    qk = mla.qk_nope_dim + mla.rope_dim
    blk("attn_norm.weight", e)
    if mla.q_lora_rank:
        blk("attn_q_a_norm.weight", mla.q_lora_rank)
    blk("attn_kv_a_norm.weight", mla.kv_lora_rank)
    if mla.q_lora_rank:
        blk("attn_q_a.weight", e, mla.q_lora_rank)
        blk("attn_q_b.weight", mla.q_lora_rank, nh * qk)
    else:
        blk("attn_q.weight", e, nh * qk)
    blk("attn_kv_a_mqa.weight", e, mla.kv_lora_rank + mla.rope_dim)
    blk("attn_k_b.weight", mla.qk_nope_dim, mla.kv_lora_rank, nh)
    blk("attn_v_b.weight", mla.kv_lora_rank, mla.v_head_dim, nh)
    blk("attn_output.weight", nh * mla.v_head_dim, e)
    blk("ffn_norm.weight", e)
    if il < s.moe.n_dense_lead:
        _ffn_dense(s, blk)
    else:
        _ffn_moe(s, blk)
    if kind == MTP:
        _nextn(s, blk)


_BLOCKS = {
    "llama": _blk_llama,
    "qwen3": _blk_llama,
    "qwen3moe": _blk_llama,
    "gemma3": _blk_gemma3,
    "qwen35": _blk_qwen35,
    "qwen35moe": _blk_qwen35,
    "glm4moe": _blk_glm4moe,
    "deepseek2": _blk_deepseek2,
}
