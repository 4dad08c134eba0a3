"""Declarative model specs for synthetic GGUFs: hyperparameters and the ``{arch}.*`` metadata keys.

Every key here is one that mainline llama.cpp reads when it LOADS the file (ggml-org/llama.cpp at
commit 0c1e57098, as vendored by llama-cpp-python 0.3.36): generic keys in ``src/llama-model.cpp``
``llama_model_base::load_hparams``, per-arch keys in ``src/models/<arch>.cpp``
``load_arch_hparams``, key names in ``src/llama-arch.cpp`` LLM_KV_NAMES. Tensor tables: arch.py.
"""

from __future__ import annotations

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
    layers. ``probs_bias`` adds ``exp_probs_b.bias`` (GLM-4.5 / DeepSeek-V3 routers).
    ``n_ff_shexp`` (Qwen3.5 MoE) sets the shared expert width explicitly
    (``expert_shared_feed_forward_length``) and adds its sigmoid gate ``ffn_gate_inp_shexp``;
    otherwise the width is ``n_ff_exp * n_expert_shared`` (GLM, DeepSeek)."""

    n_expert: int
    n_expert_used: int
    n_ff_exp: int
    n_expert_shared: int = 0
    n_dense_lead: int = 0
    gating_func: int = 0  # llama_expert_gating_func_type: 1 softmax, 2 sigmoid; 0 = not written
    weights_norm: bool | None = None
    weights_scale: float | None = None
    probs_bias: bool = False
    n_ff_shexp: int = 0


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
    4 of them nextn.*). ``kv_heads_as_array`` writes ``attention.head_count_kv`` as a per-layer
    array (``get_key_or_arr`` accepts either; the length must be block_count). ``extra``
    metadata is written after the architecture keys.
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
    kv_heads_as_array: bool = False
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


def _meta(spec: ModelSpec) -> dict[str, Any]:
    """Architecture keys (``{arch}.*``) llama.cpp reads for ``spec``."""
    a = spec.arch
    m: dict[str, Any] = {
        f"{a}.context_length": spec.n_ctx_train,
        f"{a}.embedding_length": spec.n_embd,
        f"{a}.block_count": spec.block_count,
        f"{a}.attention.head_count": spec.n_head,
        f"{a}.attention.head_count_kv": spec.n_head_kv,
        f"{a}.attention.layer_norm_rms_epsilon": spec.rms_eps,
        f"{a}.rope.freq_base": spec.rope_base,
        f"{a}.rope.dimension_count": spec.rope_dim or spec.head_dim,
        f"{a}.vocab_size": spec.n_vocab,
    }
    if spec.kv_heads_as_array:
        m[f"{a}.attention.head_count_kv"] = [spec.n_head_kv] * spec.block_count
    if spec.n_ff:
        m[f"{a}.feed_forward_length"] = spec.n_ff
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
        if e.n_ff_shexp:
            m[f"{a}.expert_shared_feed_forward_length"] = e.n_ff_shexp
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
