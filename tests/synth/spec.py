"""Declarative model specs for synthetic GGUFs: hyperparameters -> metadata keys and tensor table.

Every key and tensor here is one that mainline llama.cpp reads or creates when it LOADS the file
(checked against ggml-org/llama.cpp at commit 0c1e57098, as vendored by llama-cpp-python 0.3.36):
generic keys in ``src/llama-model.cpp`` ``llama_model_base::load_hparams``, per-arch keys and
tensors in ``src/models/<arch>.cpp`` ``load_arch_hparams`` / ``load_arch_tensors``, names in
``src/llama-arch.cpp``. The loader refuses a file with a tensor it does not create ("wrong number
of tensors") or a missing required one, so the lists are exact, not "roughly right".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: Layer kinds (TensorSlot.kind).
GLOBAL, ATTENTION, SWA_ATTN, MLA_ATTN, LINEAR, MTP = (
    "global",
    "attention",
    "swa",
    "mla",
    "linear_attention",
    "mtp",
)


@dataclass(frozen=True, slots=True)
class MoE:
    """Routed experts (``ffn_*_exps``), optional shared experts (``ffn_*_shexp``), leading dense
    layers. ``probs_bias`` adds ``exp_probs_b.bias`` (GLM-4.5 / DeepSeek-V3 routers)."""

    n_expert: int
    n_expert_used: int
    n_ff_exp: int
    n_expert_shared: int = 0
    n_dense_lead: int = 0
    gating_func: int = 0  # llama_expert_gating_func_type: 1 softmax, 2 sigmoid; 0 = not written
    weights_norm: bool | None = None
    weights_scale: float | None = None
    probs_bias: bool = False


@dataclass(frozen=True, slots=True)
class MLA:
    """DeepSeek multi-head latent attention ranks and dims (``q_lora_rank`` 0: plain attn_q)."""

    q_lora_rank: int
    kv_lora_rank: int
    rope_dim: int
    qk_nope_dim: int
    v_head_dim: int


@dataclass(frozen=True, slots=True)
class Hybrid:
    """Qwen3.5/3.6 Gated DeltaNet layers; full attention on layers with (il+1) % interval == 0.

    ``ssm.state_size`` = linear key/value head dim, ``ssm.group_count`` = linear K heads,
    ``ssm.time_step_rank`` = linear V heads, ``ssm.inner_size`` = V heads x head dim
    (llamacpp-oracle.md §2, conversion/qwen.py).
    """

    full_attention_interval: int
    conv_kernel: int
    state_size: int
    group_count: int
    time_step_rank: int

    @property
    def inner_size(self) -> int:
        """``ssm.inner_size`` = value dim of a GDN layer."""
        return self.state_size * self.time_step_rank


@dataclass(frozen=True, slots=True)
class SWA:
    """Sliding-window attention: window tokens and pattern (every ``pattern``-th layer is full)."""

    window: int
    pattern: int
    rope_base_swa: float = 10000.0


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One synthetic model. ``n_layer`` counts trunk layers; ``block_count`` adds ``n_nextn``.

    ``mtp_full_head`` adds ``nextn.embed_tokens`` and ``nextn.shared_head_head`` (optional in
    llama.cpp; real Qwen3.6-27B and GLM-4.6 files lack them: Qwen3.6-27B's blk.64 has 15 tensors,
    4 of them nextn.*). ``extra`` metadata is written after the architecture keys.
    """

    arch: str
    name: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_ctx_train: int
    rope_base: float = 10000.0
    rope_dim: int | None = None
    rope_sections: tuple[int, ...] | None = None
    rms_eps: float = 1e-6
    tokenizer_pre: str = "default"
    qk_norm: bool = False
    attn_bias: bool = False
    tied_embeddings: bool = False
    n_nextn: int = 0
    mtp_full_head: bool = False
    moe: MoE | None = None
    mla: MLA | None = None
    hybrid: Hybrid | None = None
    swa: SWA | None = None
    extra: tuple[tuple[str, Any], ...] = field(default=())

    @property
    def block_count(self) -> int:
        """``{arch}.block_count``: trunk plus MTP blocks."""
        return self.n_layer + self.n_nextn

    def layer_kind(self, il: int) -> str:
        """Kind of block ``il``: mtp / linear_attention / swa / mla / attention."""
        if il >= self.n_layer:
            return MTP
        if self.hybrid is not None and (il + 1) % self.hybrid.full_attention_interval != 0:
            return LINEAR
        if self.swa is not None and il % self.swa.pattern < self.swa.pattern - 1:
            # llama-hparams.cpp set_swa_pattern: the last layer of each group of N is full.
            return SWA_ATTN
        if self.mla is not None:
            return MLA_ATTN
        return ATTENTION


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


def _meta(spec: ModelSpec) -> dict[str, Any]:
    """Architecture keys (``{arch}.*``) llama.cpp reads for ``spec``."""
    a = spec.arch
    m: dict[str, Any] = {
        f"{a}.context_length": spec.n_ctx_train,
        f"{a}.embedding_length": spec.n_embd,
        f"{a}.block_count": spec.block_count,
        f"{a}.feed_forward_length": spec.n_ff,
        f"{a}.attention.head_count": spec.n_head,
        f"{a}.attention.head_count_kv": spec.n_head_kv,
        f"{a}.attention.layer_norm_rms_epsilon": spec.rms_eps,
        f"{a}.rope.freq_base": spec.rope_base,
        f"{a}.rope.dimension_count": spec.rope_dim or spec.head_dim,
        f"{a}.vocab_size": spec.n_vocab,
    }
    if spec.head_dim * spec.n_head != spec.n_embd or spec.mla is not None:
        m[f"{a}.attention.key_length"] = spec.head_dim
        m[f"{a}.attention.value_length"] = spec.head_dim
    if spec.rope_sections is not None:
        m[f"{a}.rope.dimension_sections"] = list(spec.rope_sections)
    if spec.n_nextn:
        m[f"{a}.nextn_predict_layers"] = spec.n_nextn
    if (h := spec.hybrid) is not None:
        m[f"{a}.ssm.conv_kernel"] = h.conv_kernel
        m[f"{a}.ssm.state_size"] = h.state_size
        m[f"{a}.ssm.group_count"] = h.group_count
        m[f"{a}.ssm.time_step_rank"] = h.time_step_rank
        m[f"{a}.ssm.inner_size"] = h.inner_size
        m[f"{a}.full_attention_interval"] = h.full_attention_interval
    if (e := spec.moe) is not None:
        m[f"{a}.expert_count"] = e.n_expert
        m[f"{a}.expert_used_count"] = e.n_expert_used
        m[f"{a}.expert_feed_forward_length"] = e.n_ff_exp
        if e.n_expert_shared:
            m[f"{a}.expert_shared_count"] = e.n_expert_shared
        if e.n_dense_lead:
            m[f"{a}.leading_dense_block_count"] = e.n_dense_lead
        if e.gating_func:
            m[f"{a}.expert_gating_func"] = e.gating_func
        if e.weights_norm is not None:
            m[f"{a}.expert_weights_norm"] = e.weights_norm
        if e.weights_scale is not None:
            m[f"{a}.expert_weights_scale"] = e.weights_scale
    if (mla := spec.mla) is not None:
        # MLA GGUFs store the compressed cache dims as key/value length (576/512 on DeepSeek) and
        # the decompressed per-head dims as *_mla; head_count_kv = 1 (llamacpp-oracle.md §2).
        m[f"{a}.attention.head_count_kv"] = 1
        m[f"{a}.attention.key_length"] = mla.kv_lora_rank + mla.rope_dim
        m[f"{a}.attention.value_length"] = mla.kv_lora_rank
        m[f"{a}.attention.key_length_mla"] = mla.qk_nope_dim + mla.rope_dim
        m[f"{a}.attention.value_length_mla"] = mla.v_head_dim
        m[f"{a}.attention.kv_lora_rank"] = mla.kv_lora_rank
        if mla.q_lora_rank:
            m[f"{a}.attention.q_lora_rank"] = mla.q_lora_rank
        m[f"{a}.rope.dimension_count"] = mla.rope_dim
    if (w := spec.swa) is not None:
        m[f"{a}.attention.sliding_window"] = w.window
        m[f"{a}.attention.sliding_window_pattern"] = w.pattern
        m[f"{a}.rope.freq_base_swa"] = w.rope_base_swa
    m.update(dict(spec.extra))
    return m


def architecture_metadata(spec: ModelSpec) -> dict[str, Any]:
    """Public view of the ``{arch}.*`` keys written for ``spec`` (values as Python scalars)."""
    return _meta(spec)


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
    if m.n_expert_shared:
        f = m.n_ff_exp * m.n_expert_shared
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
    # src/models/qwen35.cpp load_block_trunk / load_block_mtp. Full-attention Q is doubled
    # (query + output gate): attn_q = {n_embd, head_dim * n_head * 2}.
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
    "glm4moe": _blk_glm4moe,
    "deepseek2": _blk_deepseek2,
}
