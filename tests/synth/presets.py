"""Size presets of the synthetic architectures: ``"tiny"`` (loads in llama.cpp in milliseconds)
and ``"real"`` (the real model's dims; written sparse, so a "15 GB" file costs no disk).

Real dims come from the models' config.json on the Hub and from the llama.cpp type switches in
``src/models/<arch>.cpp`` (e.g. qwen35 ``case 64: LLM_TYPE_27B``, glm4moe ``case 46`` = Air).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .spec import MLA, SWA, Hybrid, ModelSpec, MoE

#: Tiny dims: n_embd 256 is a multiple of 256, so K-quants apply to most matrices as on real models.
_TINY: dict[str, Any] = {
    "n_vocab": 512,
    "n_embd": 256,
    "n_head": 4,
    "n_head_kv": 2,
    "head_dim": 64,
    "n_ff": 512,
}


def _check(size: str) -> None:
    if size not in ("tiny", "real"):
        raise ValueError(f"size must be 'tiny' or 'real', not {size!r}")


def llama(size: str = "tiny") -> ModelSpec:
    """Dense GQA llama; real = Llama-3-8B (32 layers, 32 Q / 8 KV heads, vocab 128256)."""
    _check(size)
    if size == "tiny":
        return ModelSpec("llama", "Synth-Llama-tiny", n_layer=2, n_ctx_train=4096, **_TINY)
    return ModelSpec(
        "llama", "Meta-Llama-3-8B", n_vocab=128256, n_embd=4096, n_layer=32, n_head=32,
        n_head_kv=8, head_dim=128, n_ff=14336, n_ctx_train=8192, rope_base=500000.0,
        rms_eps=1e-5, tokenizer_pre="llama-bpe",
    )  # fmt: skip


def qwen3(size: str = "tiny") -> ModelSpec:
    """Dense GQA with q/k norm; real = Qwen3-8B (36 layers, 32/8 heads, vocab 151936)."""
    _check(size)
    if size == "tiny":
        return ModelSpec(
            "qwen3", "Synth-Qwen3-tiny", n_layer=2, n_ctx_train=4096, qk_norm=True,
            tokenizer_pre="qwen2", **_TINY,
        )  # fmt: skip
    return ModelSpec(
        "qwen3", "Qwen3-8B", n_vocab=151936, n_embd=4096, n_layer=36, n_head=32, n_head_kv=8,
        head_dim=128, n_ff=12288, n_ctx_train=40960, rope_base=1000000.0, qk_norm=True,
        tokenizer_pre="qwen2",
    )  # fmt: skip


def qwen3moe(size: str = "tiny") -> ModelSpec:
    """MoE without shared experts; real = Qwen3-30B-A3B (48 layers, 128 experts, 8 used)."""
    _check(size)
    if size == "tiny":
        return ModelSpec(
            "qwen3moe", "Synth-Qwen3MoE-tiny", n_layer=2, n_ctx_train=4096, qk_norm=True,
            tokenizer_pre="qwen2", moe=MoE(n_expert=8, n_expert_used=2, n_ff_exp=256), **_TINY,
        )  # fmt: skip
    return ModelSpec(
        "qwen3moe", "Qwen3-30B-A3B", n_vocab=151936, n_embd=2048, n_layer=48, n_head=32,
        n_head_kv=4, head_dim=128, n_ff=6144, n_ctx_train=40960, rope_base=1000000.0,
        qk_norm=True, tokenizer_pre="qwen2",
        moe=MoE(n_expert=128, n_expert_used=8, n_ff_exp=768),
    )  # fmt: skip


def qwen35(size: str = "tiny") -> ModelSpec:
    """Hybrid Gated DeltaNet + full attention every 4th layer + 1 MTP block.

    real = Qwen3.6-27B: 64 trunk layers + MTP block 64 (block_count 65), full attention on
    3, 7, ..., 63; attention 24 Q / 4 KV heads x 256 (Q doubled for the output gate), partial
    rope 64 dims in sections [11, 11, 10, 0]; GDN 16 QK / 48 V heads x 128, conv 4; FFN 17408;
    vocab 248320. 866 tensors (48 GDN x 14 + 16 attention x 11 + MTP 15 + 3), as the real file.
    """
    _check(size)
    if size == "tiny":
        return ModelSpec(
            "qwen35", "Synth-Qwen3.5-tiny", n_layer=4, n_ctx_train=4096, rope_dim=16,
            rope_sections=(3, 3, 2, 0), tokenizer_pre="qwen35", n_nextn=1,
            hybrid=Hybrid(full_attention_interval=4, conv_kernel=4, state_size=64,
                          group_count=2, time_step_rank=4),
            **_TINY,
        )  # fmt: skip
    return ModelSpec(
        "qwen35", "Qwen3.6-27B", n_vocab=248320, n_embd=5120, n_layer=64, n_head=24,
        n_head_kv=4, head_dim=256, n_ff=17408, n_ctx_train=262144, rope_base=10000000.0,
        rope_dim=64, rope_sections=(11, 11, 10, 0), tokenizer_pre="qwen35", n_nextn=1,
        hybrid=Hybrid(full_attention_interval=4, conv_kernel=4, state_size=128, group_count=16,
                      time_step_rank=48),
    )  # fmt: skip


def qwen35moe(size: str = "tiny") -> ModelSpec:
    """Hybrid GDN + MoE (routed + gated shared expert) + 1 MTP block.

    real = Qwen3.6-35B-A3B: 40 trunk layers + MTP block 40; attention 16 Q / 2 KV heads x 256;
    GDN 16 QK / 32 V heads x 128; 256 experts (8 used) x 512, shared expert 512; vocab 248320.
    753 tensors, 443 of them quantizable: the real Q8_0 file's counts (q8_0 443, f32 308, bf16 2,
    as the Hub's GGUF viewer lists them).
    """
    _check(size)
    if size == "tiny":
        return ModelSpec(
            "qwen35moe", "Synth-Qwen3.5-MoE-tiny", n_layer=4, n_ctx_train=4096, rope_dim=16,
            rope_sections=(3, 3, 2, 0), tokenizer_pre="qwen35", n_nextn=1,
            hybrid=Hybrid(full_attention_interval=4, conv_kernel=4, state_size=64,
                          group_count=2, time_step_rank=4),
            moe=MoE(n_expert=8, n_expert_used=2, n_ff_exp=256, n_ff_shexp=256),
            **{**_TINY, "n_ff": 0},
        )  # fmt: skip
    return ModelSpec(
        "qwen35moe", "Qwen3.6-35B-A3B", n_vocab=248320, n_embd=2048, n_layer=40, n_head=16,
        n_head_kv=2, head_dim=256, n_ff=0, n_ctx_train=262144, rope_base=10000000.0,
        rope_dim=64, rope_sections=(11, 11, 10, 0), tokenizer_pre="qwen35", n_nextn=1,
        hybrid=Hybrid(full_attention_interval=4, conv_kernel=4, state_size=128, group_count=16,
                      time_step_rank=32),
        moe=MoE(n_expert=256, n_expert_used=8, n_ff_exp=512, n_ff_shexp=512),
    )  # fmt: skip


def glm4moe(size: str = "tiny") -> ModelSpec:
    """MoE with shared expert, sigmoid router with bias, leading dense layer, 1 nextn block
    (no nextn.embed_tokens / shared_head_head); real = GLM-4.5-Air (46 + 1 blocks, 128 experts)."""
    _check(size)
    if size == "tiny":
        return ModelSpec(
            "glm4moe", "Synth-GLM-4.5-tiny", n_layer=3, n_ctx_train=4096, rope_dim=32,
            attn_bias=True, tokenizer_pre="glm4", n_nextn=1,
            moe=MoE(n_expert=8, n_expert_used=2, n_ff_exp=256, n_expert_shared=1,
                    n_dense_lead=1, gating_func=2, weights_norm=True, weights_scale=1.0,
                    probs_bias=True),
            **_TINY,
        )  # fmt: skip
    return ModelSpec(
        "glm4moe", "GLM-4.5-Air", n_vocab=151552, n_embd=4096, n_layer=46, n_head=96,
        n_head_kv=8, head_dim=128, n_ff=10944, n_ctx_train=131072, rope_base=1000000.0,
        rope_dim=64, rms_eps=1e-5, attn_bias=True, tokenizer_pre="glm4", n_nextn=1,
        moe=MoE(n_expert=128, n_expert_used=8, n_ff_exp=1408, n_expert_shared=1, n_dense_lead=1,
                gating_func=2, weights_norm=True, weights_scale=1.0, probs_bias=True),
    )  # fmt: skip


def deepseek2(size: str = "tiny") -> ModelSpec:
    """MLA + MoE. tiny uses q_lora (V3-style attn_q_a/attn_q_b: deepseek2.cpp requires
    q_lora_rank unless the model is a 26/27-layer "lite"); real = DeepSeek-V2-Lite (27 layers,
    plain attn_q, kv_lora 512, rope 64, nope 128, v 128, 64 experts / 6 used, 2 shared)."""
    _check(size)
    if size == "tiny":
        return ModelSpec(
            "deepseek2", "Synth-DeepSeek-V2-tiny", n_vocab=512, n_embd=256, n_layer=3,
            n_head=4, n_head_kv=4, head_dim=96, n_ff=512, n_ctx_train=4096,
            tokenizer_pre="deepseek-llm",
            mla=MLA(q_lora_rank=128, kv_lora_rank=128, rope_dim=32, qk_nope_dim=64, v_head_dim=64),
            moe=MoE(n_expert=8, n_expert_used=2, n_ff_exp=256, n_expert_shared=1,
                    n_dense_lead=1, gating_func=1, weights_scale=1.0, weights_norm=False),
        )  # fmt: skip
    return ModelSpec(
        "deepseek2", "DeepSeek-V2-Lite", n_vocab=102400, n_embd=2048, n_layer=27, n_head=16,
        n_head_kv=16, head_dim=192, n_ff=10944, n_ctx_train=163840, tokenizer_pre="deepseek-llm",
        mla=MLA(q_lora_rank=0, kv_lora_rank=512, rope_dim=64, qk_nope_dim=128, v_head_dim=128),
        moe=MoE(n_expert=64, n_expert_used=6, n_ff_exp=1408, n_expert_shared=2, n_dense_lead=1,
                gating_func=1, weights_scale=1.0, weights_norm=False),
    )  # fmt: skip


def gemma3(size: str = "tiny") -> ModelSpec:
    """Sliding window (5 SWA : 1 full), q/k norm, post norms, tied embeddings (no output.weight);
    real = Gemma-3-12B (48 layers, 16/8 heads x 256, window 1024, vocab 262208)."""
    _check(size)
    if size == "tiny":
        return ModelSpec(
            "gemma3", "Synth-Gemma-3-tiny", n_layer=6, n_ctx_train=4096, tied_embeddings=True,
            swa=SWA(window=128, pattern=6), **_TINY,
        )  # fmt: skip
    return ModelSpec(
        "gemma3", "gemma-3-12b-it", n_vocab=262208, n_embd=3840, n_layer=48, n_head=16,
        n_head_kv=8, head_dim=256, n_ff=15360, n_ctx_train=131072, rope_base=1000000.0,
        tied_embeddings=True, swa=SWA(window=1024, pattern=6),
    )  # fmt: skip


#: Preset constructors by architecture name.
PRESETS: dict[str, Callable[[str], ModelSpec]] = {
    "llama": llama,
    "qwen3": qwen3,
    "qwen3moe": qwen3moe,
    "qwen35": qwen35,
    "qwen35moe": qwen35moe,
    "glm4moe": glm4moe,
    "deepseek2": deepseek2,
    "gemma3": gemma3,
}


def preset(arch: str, size: str = "tiny") -> ModelSpec:
    """``PRESETS[arch](size)``."""
    return PRESETS[arch](size)
