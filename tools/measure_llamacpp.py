"""Measure llama.cpp's real buffers for synthetic GGUFs; the ground truth for crawler.fit.

Three jobs, one file:

* ``MODELS`` + write_model: synthetic GGUFs (header + sparse zero data) that llama.cpp
  loads: llama (GQA), qwen3, gemma3 (SWA), qwen35 (hybrid Gated-DeltaNet + MTP block), deepseek2
  (MLA + MoE), glm4moe (MoE + nextn), plus real-width variants. Tests import this to rebuild the
  same headers without llama.cpp.
* ``python tools/measure_llamacpp.py prepare SDIST OUT.tar.xz``: trim llama.cpp's tree out of the
  llama-cpp-python source distribution (it vendors llama.cpp) so it can travel to a GPU machine.
* ``python tools/measure_llamacpp.py build SRC BUILD``: build llama.cpp's ``llama`` library with
  CUDA and the probe ``tools/measure_llamacpp.cpp`` against it.
* ``python tools/measure_llamacpp.py run BUILD OUT [--deadline S] [--only NAME]``: write the
  models, run the probe once per configuration (a fresh process each), and append one JSON line per
  run to ``OUT/measurements.jsonl``: the configuration, llama.cpp's exact buffer bytes
  (``llama_get_memory_breakdown``), its log lines (KV / RS / compute / output sizes) and the device
  memory used (NVML free before the process - cudaMemGetInfo free at the peak).

The fixture ``tests/fixtures/llamacpp/measurements.jsonl`` was made this way; its header line
records the llama.cpp commit, GPU, driver and CUDA version.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

F32, F16, Q4_0, Q8_0, Q3_K, Q4_K, Q5_K, Q6_K = 0, 1, 2, 8, 11, 12, 13, 14


@dataclass
class Model:
    """A synthetic model: architecture, metadata (without the arch prefix) and tensors."""

    name: str
    arch: str
    meta: dict[str, Any]
    tensors: list[tuple[str, tuple[int, ...], int]] = field(default_factory=list)
    vocab: str = (
        "llama-spm"  # which ggml-vocab-*.gguf of llama.cpp's models/ supplies the tokenizer
    )
    n_vocab: int = 32000

    def t(self, name: str, shape: tuple[int, ...], type_id: int = F16) -> None:
        # 1-D tensors (norms, biases) are always F32, as llama.cpp's quantizer leaves them.
        self.tensors.append((name, shape, F32 if len(shape) == 1 else type_id))

    def gqa(self, b: str, n_embd: int, q_width: int, kv_width: int, t: int = F16) -> None:
        """Q/K/V/output projections of one softmax-attention layer (llama-arch.cpp names)."""
        self.t(b + "attn_q.weight", (n_embd, q_width), t)
        self.t(b + "attn_k.weight", (n_embd, kv_width), t)
        self.t(b + "attn_v.weight", (n_embd, kv_width), t)
        self.t(b + "attn_output.weight", (q_width, n_embd), t)

    def dense_ffn(self, b: str, n_embd: int, n_ff: int, up: int = F16, down: int = F16) -> None:
        """Gated dense FFN of one layer."""
        self.t(b + "ffn_gate.weight", (n_embd, n_ff), up)
        self.t(b + "ffn_up.weight", (n_embd, n_ff), up)
        self.t(b + "ffn_down.weight", (n_ff, n_embd), down)


def _common(m: Model, *, n_embd: int, tied: bool, wt: int = F16, embd_t: int = F16) -> None:
    m.t("token_embd.weight", (n_embd, m.n_vocab), embd_t)
    m.t("output_norm.weight", (n_embd,))
    if not tied:
        m.t("output.weight", (n_embd, m.n_vocab), wt if wt != F16 else F16)


def _base_meta(
    n_layer: int, n_embd: int, n_head: int, n_kv: int, n_ff: int, **kw: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "context_length": 262144,
        "embedding_length": n_embd,
        "block_count": n_layer,
        "feed_forward_length": n_ff,
        "attention.head_count": n_head,
        "attention.head_count_kv": n_kv,
        "attention.layer_norm_rms_epsilon": 1e-6,
        "rope.freq_base": 1000000.0,
    }
    meta.update(kw)
    return meta


def llama(
    name: str = "llama",
    *,
    n_layer: int = 4,
    n_embd: int = 1024,
    n_head: int = 8,
    n_kv: int = 4,
    n_ff: int = 2816,
    tied: bool = True,
    wt: int = F16,
    n_vocab: int = 32000,
) -> Model:
    """Plain GQA transformer (src/models/llama.cpp)."""
    hd = n_embd // n_head
    m = Model(
        name,
        "llama",
        _base_meta(n_layer, n_embd, n_head, n_kv, n_ff, **{"rope.dimension_count": hd}),
        n_vocab=n_vocab,
    )
    _common(m, n_embd=n_embd, tied=tied, wt=wt, embd_t=wt if wt != F16 else F16)
    for i in range(n_layer):
        b = f"blk.{i}."
        m.t(b + "attn_norm.weight", (n_embd,))
        m.gqa(b, n_embd, n_embd, hd * n_kv, wt)
        m.t(b + "ffn_norm.weight", (n_embd,))
        m.dense_ffn(b, n_embd, n_ff, wt, wt)
    return m


def qwen3(
    name: str = "qwen3",
    *,
    n_layer: int = 4,
    n_embd: int = 1024,
    n_head: int = 16,
    n_kv: int = 8,
    hd: int = 128,
    n_ff: int = 3072,
) -> Model:
    """Qwen3 dense (src/models/qwen3.cpp): explicit head dim, Q/K norms."""
    m = Model(
        name,
        "qwen3",
        _base_meta(
            n_layer,
            n_embd,
            n_head,
            n_kv,
            n_ff,
            **{
                "attention.key_length": hd,
                "attention.value_length": hd,
                "rope.dimension_count": hd,
            },
        ),
    )
    _common(m, n_embd=n_embd, tied=True)
    for i in range(n_layer):
        b = f"blk.{i}."
        m.t(b + "attn_norm.weight", (n_embd,))
        m.gqa(b, n_embd, hd * n_head, hd * n_kv)
        m.t(b + "attn_q_norm.weight", (hd,))
        m.t(b + "attn_k_norm.weight", (hd,))
        m.t(b + "ffn_norm.weight", (n_embd,))
        m.dense_ffn(b, n_embd, n_ff)
    return m


def gemma3(
    name: str = "gemma3",
    *,
    n_layer: int = 6,
    n_embd: int = 640,
    n_head: int = 4,
    n_kv: int = 1,
    hd: int = 256,
    n_ff: int = 2048,
    n_swa: int = 512,
) -> Model:
    """Gemma 3 (src/models/gemma3.cpp): 5 sliding-window layers then 1 full, by default pattern."""
    m = Model(
        name,
        "gemma3",
        _base_meta(
            n_layer,
            n_embd,
            n_head,
            n_kv,
            n_ff,
            **{
                "attention.key_length": hd,
                "attention.value_length": hd,
                "attention.sliding_window": n_swa,
                "rope.dimension_count": hd,
            },
        ),
    )
    _common(m, n_embd=n_embd, tied=True)
    for i in range(n_layer):
        b = f"blk.{i}."
        m.t(b + "attn_norm.weight", (n_embd,))
        m.gqa(b, n_embd, hd * n_head, hd * n_kv)
        m.t(b + "post_attention_norm.weight", (n_embd,))
        m.t(b + "attn_q_norm.weight", (hd,))
        m.t(b + "attn_k_norm.weight", (hd,))
        m.t(b + "ffn_norm.weight", (n_embd,))
        m.dense_ffn(b, n_embd, n_ff)
        m.t(b + "post_ffw_norm.weight", (n_embd,))
    return m


def qwen35(
    name: str = "qwen35",
    *,
    n_layer: int = 8,
    n_embd: int = 512,
    n_ff: int = 1024,
    tied: bool = True,
    types: dict[str, int] | None = None,
    vocab: str = "llama-spm",
    n_vocab: int = 32000,
) -> Model:
    """Qwen3.5/3.6 hybrid (src/models/qwen35.cpp) with Qwen3.6-27B per-layer widths + 1 MTP block.

    Attention: 24 Q (+ gate) / 4 KV heads x 256; Gated-DeltaNet: 16 K groups x 128,
    48 V heads x 128,
    conv kernel 4; full attention every 4th layer; the MTP block is ``blk.{n_layer}``.
    """
    ty = {
        "attn": F16,
        "ssm": F16,
        "ffn_up": F16,
        "ffn_down": F16,
        "mtp": F16,
        "embd": F16,
        "out": F16,
        **(types or {}),
    }
    n_head, n_kv, hd = 24, 4, 256
    d_state, n_group, dt_rank, d_inner = 128, 16, 48, 6144
    conv = 2 * n_group * d_state + d_inner
    m = Model(
        name,
        "qwen35",
        _base_meta(
            n_layer + 1,
            n_embd,
            n_head,
            n_kv,
            n_ff,
            **{
                "attention.key_length": hd,
                "attention.value_length": hd,
                "rope.dimension_count": 64,
                "rope.dimension_sections": [11, 11, 10, 0],
                "full_attention_interval": 4,
                "nextn_predict_layers": 1,
                "ssm.conv_kernel": 4,
                "ssm.state_size": d_state,
                "ssm.group_count": n_group,
                "ssm.time_step_rank": dt_rank,
                "ssm.inner_size": d_inner,
            },
        ),
        vocab=vocab,
        n_vocab=n_vocab,
    )
    m.t("token_embd.weight", (n_embd, n_vocab), ty["embd"])
    m.t("output_norm.weight", (n_embd,))
    if not tied:
        m.t("output.weight", (n_embd, n_vocab), ty["out"])

    def attn(b: str, t: int) -> None:
        m.t(b + "attn_q.weight", (n_embd, hd * n_head * 2), t)
        m.t(b + "attn_k.weight", (n_embd, hd * n_kv), t)
        m.t(b + "attn_v.weight", (n_embd, hd * n_kv), t)
        m.t(b + "attn_output.weight", (hd * n_head, n_embd), t)
        m.t(b + "attn_q_norm.weight", (hd,))
        m.t(b + "attn_k_norm.weight", (hd,))

    for i in range(n_layer):
        b = f"blk.{i}."
        m.t(b + "attn_norm.weight", (n_embd,))
        m.t(b + "post_attention_norm.weight", (n_embd,))
        if (i + 1) % 4 == 0:
            attn(b, ty["attn"])
        else:
            m.t(b + "attn_qkv.weight", (n_embd, conv), ty["ssm"])
            m.t(b + "attn_gate.weight", (n_embd, d_inner), ty["ssm"])
            m.t(b + "ssm_conv1d.weight", (4, conv), F32)
            m.t(b + "ssm_dt.bias", (dt_rank,))
            m.t(b + "ssm_a", (dt_rank,))
            m.t(b + "ssm_beta.weight", (n_embd, dt_rank), ty["ssm"])
            m.t(b + "ssm_alpha.weight", (n_embd, dt_rank), ty["ssm"])
            m.t(b + "ssm_norm.weight", (d_state,))
            m.t(b + "ssm_out.weight", (d_inner, n_embd), ty["ssm"])
        m.dense_ffn(b, n_embd, n_ff, ty["ffn_up"], ty["ffn_down"])
    b = f"blk.{n_layer}."
    m.t(b + "attn_norm.weight", (n_embd,))
    m.t(b + "post_attention_norm.weight", (n_embd,))
    attn(b, ty["mtp"])
    m.dense_ffn(b, n_embd, n_ff, ty["mtp"], ty["mtp"])
    m.t(b + "nextn.eh_proj.weight", (2 * n_embd, n_embd), ty["mtp"])
    m.t(b + "nextn.enorm.weight", (n_embd,))
    m.t(b + "nextn.hnorm.weight", (n_embd,))
    m.t(b + "nextn.shared_head_norm.weight", (n_embd,))
    return m


def _moe_ffn(
    m: Model,
    b: str,
    n_embd: int,
    n_ff_exp: int,
    n_expert: int,
    n_shared: int,
    t: int,
    probs_b: bool,
) -> None:
    m.t(b + "ffn_gate_inp.weight", (n_embd, n_expert), F32)
    if probs_b:
        m.t(b + "exp_probs_b.bias", (n_expert,))
    m.t(b + "ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), t)
    m.t(b + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), t)
    m.t(b + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), t)
    if n_shared:
        m.t(b + "ffn_gate_shexp.weight", (n_embd, n_ff_exp * n_shared), t)
        m.t(b + "ffn_up_shexp.weight", (n_embd, n_ff_exp * n_shared), t)
        m.t(b + "ffn_down_shexp.weight", (n_ff_exp * n_shared, n_embd), t)


def deepseek2(
    name: str = "deepseek2", *, n_layer: int = 3, n_embd: int = 1024, n_head: int = 16
) -> Model:
    """DeepSeek-V2/V3 MLA + MoE (src/models/deepseek2.cpp), MLA-style GGUF (key_length 576)."""
    kv_lora, q_lora, rope, k_mla, v_mla = 512, 384, 64, 192, 128
    n_ff, n_ff_exp, n_expert = 2048, 512, 8
    m = Model(
        name,
        "deepseek2",
        _base_meta(
            n_layer,
            n_embd,
            n_head,
            1,
            n_ff,
            **{
                "attention.key_length": kv_lora + rope,
                "attention.value_length": kv_lora,
                "attention.key_length_mla": k_mla,
                "attention.value_length_mla": v_mla,
                "attention.q_lora_rank": q_lora,
                "attention.kv_lora_rank": kv_lora,
                "rope.dimension_count": rope,
                "leading_dense_block_count": 1,
                "expert_feed_forward_length": n_ff_exp,
                "expert_count": n_expert,
                "expert_used_count": 2,
                "expert_shared_count": 1,
                "expert_weights_scale": 1.0,
            },
        ),
    )
    _common(m, n_embd=n_embd, tied=True)
    for i in range(n_layer):
        b = f"blk.{i}."
        m.t(b + "attn_norm.weight", (n_embd,))
        m.t(b + "attn_q_a_norm.weight", (q_lora,))
        m.t(b + "attn_kv_a_norm.weight", (kv_lora,))
        m.t(b + "attn_q_a.weight", (n_embd, q_lora))
        m.t(b + "attn_q_b.weight", (q_lora, n_head * k_mla))
        m.t(b + "attn_kv_a_mqa.weight", (n_embd, kv_lora + rope))
        m.t(b + "attn_k_b.weight", (k_mla - rope, kv_lora, n_head))
        m.t(b + "attn_v_b.weight", (kv_lora, v_mla, n_head))
        m.t(b + "attn_output.weight", (n_head * v_mla, n_embd))
        m.t(b + "ffn_norm.weight", (n_embd,))
        if i < 1:
            m.dense_ffn(b, n_embd, n_ff)
        else:
            _moe_ffn(m, b, n_embd, n_ff_exp, n_expert, 1, F16, probs_b=False)
    return m


def glm4moe(
    name: str = "glm4moe",
    *,
    n_layer: int = 3,
    n_embd: int = 1024,
    n_head: int = 16,
    n_kv: int = 4,
    hd: int = 128,
    n_ff: int = 2048,
    n_ff_exp: int = 512,
    n_expert: int = 8,
    wt: int = F16,
    tied: bool = True,
) -> Model:
    """GLM-4.5-style MoE with a nextn (MTP) layer (src/models/glm4-moe.cpp); no nextn embed/head."""
    m = Model(
        name,
        "glm4moe",
        _base_meta(
            n_layer + 1,
            n_embd,
            n_head,
            n_kv,
            n_ff,
            **{
                "attention.key_length": hd,
                "attention.value_length": hd,
                "rope.dimension_count": hd // 2,
                "leading_dense_block_count": 1,
                "expert_feed_forward_length": n_ff_exp,
                "expert_count": n_expert,
                "expert_used_count": 2,
                "expert_shared_count": 1,
                "expert_weights_scale": 1.0,
                "nextn_predict_layers": 1,
            },
        ),
    )
    _common(m, n_embd=n_embd, tied=tied, wt=wt)
    for i in range(n_layer + 1):
        b = f"blk.{i}."
        m.t(b + "attn_norm.weight", (n_embd,))
        m.gqa(b, n_embd, hd * n_head, hd * n_kv, wt)
        m.t(b + "post_attention_norm.weight", (n_embd,))
        if i < 1:
            m.dense_ffn(b, n_embd, n_ff, wt, wt)
        else:
            _moe_ffn(m, b, n_embd, n_ff_exp, n_expert, 1, wt, probs_b=True)
        if i == n_layer:
            m.t(b + "nextn.eh_proj.weight", (2 * n_embd, n_embd), wt)
            m.t(b + "nextn.enorm.weight", (n_embd,))
            m.t(b + "nextn.hnorm.weight", (n_embd,))
            m.t(b + "nextn.shared_head_norm.weight", (n_embd,))
    return m


def qwen36_27b_ud_q3_k_xl(n_vocab: int = 151936, vocab: str = "qwen35") -> Model:
    """Qwen3.6-27B shapes (64 + 1 MTP blocks, d 5120, ff 17408), UD-Q3_K_XL-like mix, untied."""
    return qwen35(
        "qwen36-27b-q3kxl",
        n_layer=64,
        n_embd=5120,
        n_ff=17408,
        tied=False,
        types={
            "attn": Q6_K,
            "ssm": Q6_K,
            "ffn_up": Q3_K,
            "ffn_down": Q4_K,
            "mtp": Q8_0,
            "embd": Q6_K,
            "out": Q6_K,
        },
        vocab=vocab,
        n_vocab=n_vocab,
    )


MODELS = {
    "llama": lambda: llama(),
    "qwen3": lambda: qwen3(),
    "gemma3": lambda: gemma3(),
    "qwen35": lambda: qwen35(),
    "deepseek2": lambda: deepseek2(),
    "glm4moe": lambda: glm4moe(),
    # Real widths: untied Llama-3-8B-shaped Q4_0, a wider MoE at Q8_0, Qwen3.6-27B-shaped.
    "llama8b-q4": lambda: llama(
        "llama8b-q4", n_layer=32, n_embd=4096, n_head=32, n_kv=8, n_ff=14336, tied=False, wt=Q4_0
    ),
    "glm4moe-wide-q8": lambda: glm4moe(
        "glm4moe-wide-q8",
        n_layer=6,
        n_embd=4096,
        n_head=32,
        n_kv=8,
        n_ff=10944,
        n_ff_exp=1408,
        n_expert=64,
        wt=Q8_0,
        tied=False,
    ),
    "qwen36-27b": qwen36_27b_ud_q3_k_xl,
}


def _nbytes(shape: tuple[int, ...], type_id: int) -> int:
    import gguf

    blck, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(type_id)]
    n = 1
    for d in shape:
        n *= d
    return n // blck * size


def write_model(m: Model, path: Path, vocab_file: Path | None = None) -> Path:
    """Write ``m`` as a GGUF: real header, zero (sparse) data; tokenizer from ``vocab_file``."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), m.arch)
    w.add_name(m.name)
    for key, value in m.meta.items():
        full = f"{m.arch}.{key}"
        if isinstance(value, bool):
            w.add_bool(full, value)
        elif isinstance(value, float):
            w.add_float32(full, value)
        elif isinstance(value, list):
            w.add_array(full, value)
        else:
            w.add_uint32(full, int(value))
    if vocab_file is not None:
        r = gguf.GGUFReader(str(vocab_file))
        for key, f in r.fields.items():
            if not key.startswith("tokenizer."):
                continue
            vtype = f.types[0]
            if vtype == gguf.GGUFValueType.ARRAY:
                sub = f.types[-1]
                if sub == gguf.GGUFValueType.STRING:
                    vals: Any = [
                        bytes(f.parts[i]).decode("utf-8", "surrogateescape") for i in f.data
                    ]
                else:
                    vals = [f.parts[i].tolist()[0] for i in f.data]
                w.add_key_value(key, vals, vtype, sub_type=sub)
            elif vtype == gguf.GGUFValueType.STRING:
                w.add_key_value(key, bytes(f.parts[f.data[0]]).decode("utf-8"), vtype)
            else:
                w.add_key_value(key, f.parts[f.data[0]].tolist()[0], vtype)
    total = 0
    for name, shape, type_id in m.tensors:
        nbytes = _nbytes(shape, type_id)
        # GGUFWriter takes numpy order (last ggml dim first).
        w.add_tensor_info(
            name,
            tuple(reversed(shape)),
            np.dtype(np.float32),
            nbytes,
            raw_dtype=gguf.GGMLQuantizationType(type_id),
        )
        total += (nbytes + 31) // 32 * 32
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    size = path.stat().st_size
    data_offset = (size + 31) // 32 * 32
    with path.open("r+b") as fh:
        fh.truncate(data_offset + total)
    return path


# ---------------------------------------------------------------------------------------------
# Configurations measured, in priority order (the run stops at its deadline).

CTXS = (4096, 32768, 131072, 262144)
CACHES = (("f16", "f16"), ("q8_0", "q8_0"), ("q4_0", "f16"), ("q4_0", "q4_0"))
TINY = ("llama", "qwen3", "gemma3", "qwen35", "deepseek2", "glm4moe")
MTP_MODELS = ("qwen35", "glm4moe")


#: Second pass: filled contexts (FA off), FA auto, real-width variants, padding, n_cpu_moe.
EXTRA: tuple[dict[str, Any], ...] = (
    *(
        {"model": m, "ctx": 32768, "ctk": "f16", "ctv": "f16", "fa": "off", "fill": 1}
        for m in (
            "llama",
            "qwen3",
            "qwen35",
            "gemma3",
            "llama8b-q4",
            "qwen36-27b",
            "glm4moe-wide-q8",
        )
    ),
    *(
        {"model": m, "ctx": 32768, "ctk": "q8_0", "ctv": "q8_0", "fill": 1}
        for m in ("qwen35", "llama8b-q4", "qwen36-27b")
    ),
    *(
        {"model": m, "ctx": 131072, "ctk": "q4_0", "ctv": "q4_0", "fa": "auto"}
        for m in ("llama", "qwen36-27b")
    ),
    {"model": "qwen36-27b", "ctx": 262144, "ctk": "q4_0", "ctv": "q4_0", "np": 4},
    {"model": "qwen36-27b", "ctx": 262144, "ctk": "q4_0", "ctv": "q4_0", "mtp": 1, "draft": 5},
    {
        "model": "qwen36-27b",
        "ctx": 262144,
        "ctk": "q8_0",
        "ctv": "q8_0",
        "mtp": 1,
        "ctkd": "q8_0",
        "ctvd": "q8_0",
    },
    {"model": "qwen36-27b", "ctx": 200000, "ctk": "q4_0", "ctv": "q4_0", "mtp": 1},
    {"model": "qwen36-27b", "ctx": 131072, "ctk": "q8_0", "ctv": "q8_0", "ub": 2048},
    {"model": "qwen36-27b", "ctx": 65536, "ctk": "f16", "ctv": "f16", "np": 4, "unified": 1},
    {"model": "llama8b-q4", "ctx": 131072, "ctk": "q8_0", "ctv": "q8_0", "ub": 2048},
    {"model": "llama8b-q4", "ctx": 100000, "ctk": "f16", "ctv": "f16", "np": 3},
    {"model": "glm4moe-wide-q8", "ctx": 32768, "ctk": "f16", "ctv": "f16", "ncmoe": 3},
    {"model": "glm4moe-wide-q8", "ctx": 131072, "ctk": "q8_0", "ctv": "q8_0", "ub": 2048},
    {"model": "gemma3", "ctx": 5000, "ctk": "f16", "ctv": "f16", "np": 2},
    {"model": "deepseek2", "ctx": 32768, "ctk": "q8_0", "ctv": "q8_0", "ub": 256},
    {"model": "qwen35", "ctx": 32768, "ctk": "q4_0", "ctv": "q4_0", "mtp": 1, "draft": 5, "np": 4},
)


#: Third pass: real-size presets of tests/synth (the project's shared synthetic-model builder),
#: named ``synth:<arch>:<recipe>``: MoE at real size, expert offload, MLA, SWA, MTP.
SYNTH: tuple[dict[str, Any], ...] = tuple(
    cfg
    for model, mtp, moe in (
        ("synth:qwen35moe:q4_k_m_like", True, True),
        ("synth:qwen3moe:ud_q3_k_xl_like", False, True),
        ("synth:deepseek2:q4_k_m_like", False, True),
        ("synth:gemma3:q4_k_m_like", False, False),
        ("synth:glm4moe:ud_q3_k_xl_like", True, True),
        ("synth:llama:q4_k_m_like", False, False),
    )
    for cfg in (
        {"model": model, "ctx": 32768, "ctk": "f16", "ctv": "f16"},
        {"model": model, "ctx": 131072, "ctk": "q8_0", "ctv": "q8_0"},
        {"model": model, "ctx": 262144, "ctk": "q4_0", "ctv": "q4_0"},
        *(
            [
                {"model": model, "ctx": 32768, "ctk": "f16", "ctv": "f16", "ncmoe": -1},
                {"model": model, "ctx": 32768, "ctk": "f16", "ctv": "f16", "ncmoe": 8},
            ]
            if moe
            else []
        ),
        *([{"model": model, "ctx": 131072, "ctk": "q4_0", "ctv": "q4_0", "mtp": 1}] if mtp else []),
    )
)


def synth_model(name: str, path: Path) -> Path:
    """Write ``synth:<arch>:<recipe>`` (real size) with tests/synth; returns the first file."""
    from tests import synth

    _, arch, recipe = name.split(":")
    return Path(synth.write_gguf(path, synth.preset(arch, "real"), getattr(synth, recipe)())[0])


def configs(only: str | None = None, grid: str = "main") -> Iterator[dict[str, Any]]:
    """The measured grid, most important first (``grid="extra"``/``"synth"``: later passes)."""
    if grid == "synth":
        yield from (c for c in SYNTH if only is None or c["model"] == only)
        return
    if grid == "extra":
        yield from (c for c in EXTRA if only is None or c["model"] == only)
        return
    out: list[dict[str, Any]] = []
    for model in TINY:
        for ctx in CTXS:
            for k, v in CACHES:
                out.append({"model": model, "ctx": ctx, "ctk": k, "ctv": v})
    for model in MTP_MODELS:
        for ctx in (32768, 262144):
            for k, v in (("f16", "f16"), ("q4_0", "q4_0")):
                out.append({"model": model, "ctx": ctx, "ctk": k, "ctv": v, "mtp": 1})
                out.append(
                    {
                        "model": model,
                        "ctx": ctx,
                        "ctk": k,
                        "ctv": v,
                        "mtp": 1,
                        "ctkd": "q4_0",
                        "ctvd": "q4_0",
                    }
                )
    for model in TINY:
        out.append({"model": model, "ctx": 32768, "ctk": "f16", "ctv": "f16", "np": 4})
        out.append(
            {"model": model, "ctx": 32768, "ctk": "f16", "ctv": "f16", "np": 4, "unified": 1}
        )
        out.append({"model": model, "ctx": 32768, "ctk": "f16", "ctv": "f16", "fa": "off"})
        out.append({"model": model, "ctx": 32768, "ctk": "q8_0", "ctv": "q8_0", "ub": 2048})
    out.append(
        {
            "model": "qwen35",
            "ctx": 32768,
            "ctk": "q4_0",
            "ctv": "q4_0",
            "np": 4,
            "unified": 1,
            "mtp": 1,
        }
    )
    out.append({"model": "glm4moe", "ctx": 32768, "ctk": "f16", "ctv": "f16", "ncmoe": -1})
    out.append({"model": "glm4moe", "ctx": 32768, "ctk": "f16", "ctv": "f16", "ncmoe": 2})
    for model in ("qwen36-27b", "llama8b-q4", "glm4moe-wide-q8"):
        for ctx, k, v in (
            (4096, "f16", "f16"),
            (131072, "q8_0", "q8_0"),
            (262144, "q4_0", "f16"),
            (262144, "q4_0", "q4_0"),
        ):
            out.append({"model": model, "ctx": ctx, "ctk": k, "ctv": v})
        if model != "llama8b-q4":
            out.append({"model": model, "ctx": 262144, "ctk": "q4_0", "ctv": "q4_0", "mtp": 1})
            out.append(
                {
                    "model": model,
                    "ctx": 262144,
                    "ctk": "q4_0",
                    "ctv": "q4_0",
                    "mtp": 1,
                    "ctkd": "q4_0",
                    "ctvd": "q4_0",
                }
            )
        out.append({"model": model, "ctx": 32768, "ctk": "f16", "ctv": "f16", "fa": "off"})
    out.append({"model": "glm4moe-wide-q8", "ctx": 32768, "ctk": "f16", "ctv": "f16", "ncmoe": -1})
    out.append(
        {
            "model": "qwen36-27b",
            "ctx": 262144,
            "ctk": "q4_0",
            "ctv": "q4_0",
            "np": 4,
            "unified": 1,
            "mtp": 1,
        }
    )
    for c in out:
        if only is None or c["model"] == only:
            yield c


_LOG_PATTERNS = {
    "kv_mib": re.compile(r"llama_kv_cache: +(\S+) KV buffer size = +([\d.]+) MiB"),
    "rs_mib": re.compile(r"llama_memory_recurrent: +(\S+) RS buffer size = +([\d.]+) MiB"),
    "compute_mib": re.compile(r"sched_reserve: +(\S+) compute buffer size = +([\d.]+) MiB"),
    "output_mib": re.compile(r"(\S+) +output buffer size = +([\d.]+) MiB"),
    "model_mib": re.compile(r"load_tensors: +(\S+) model buffer size = +([\d.]+) MiB"),
}


def _parse_log(text: str) -> dict[str, list[list[Any]]]:
    found: dict[str, list[list[Any]]] = {}
    for key, pat in _LOG_PATTERNS.items():
        found[key] = [[m.group(1), float(m.group(2))] for m in pat.finditer(text)]
    return found


def _nvml_free() -> int:
    import pynvml  # nvidia-ml-py, present on the device image

    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return int(pynvml.nvmlDeviceGetMemoryInfo(h).free)
    finally:
        pynvml.nvmlShutdown()


#: What the CUDA build and the model writer need from llama.cpp's tree (a < 4 MB .tar.xz, so it
#: travels to a GPU machine): build files, headers, src/, ggml core + CPU + CUDA backends, the
#: vendored libraries CMake adds, gguf-py (the device has no gguf package) and two vocabularies.
_TRIM = (
    "CMakeLists.txt", "LICENSE", "cmake", "include", "src", "vendor", "common", "gguf-py",
    "ggml/CMakeLists.txt", "ggml/cmake", "ggml/include", "ggml/src/ggml-cpu", "ggml/src/ggml-cuda",
    "ggml/src/ggml-blas", "models/ggml-vocab-llama-spm.gguf", "models/ggml-vocab-qwen35.gguf",
)  # fmt: skip


def prepare(sdist: Path, out: Path) -> None:
    """llama-cpp-python sdist (``pip download --no-deps --no-binary :all: llama-cpp-python``)
    -> ``out`` (.tar.xz) holding the trimmed ``llama.cpp/`` tree this script builds."""
    import io
    import tarfile

    with tarfile.open(sdist) as src, tarfile.open(out, "w:xz") as dst:
        for member in src.getmembers():
            parts = member.name.split("/")
            if len(parts) < 4 or parts[1:3] != ["vendor", "llama.cpp"]:
                continue
            rel = "/".join(parts[3:])
            top_src = len(parts) == 5 and parts[3:4] == ["ggml"] and parts[4] == "src"
            keep = any(rel == k or rel.startswith(k + "/") for k in _TRIM) or (
                rel.startswith("ggml/src/") and rel.count("/") == 2 and not member.isdir()
            )
            if not keep or top_src:
                continue
            if member.isdir():
                member.name = "llama.cpp/" + rel
                dst.addfile(member)
                continue
            handle = src.extractfile(member)  # links are resolved to their target's bytes
            if handle is None:
                continue
            data = handle.read()
            info = tarfile.TarInfo("llama.cpp/" + rel)
            info.size, info.mode, info.mtime = len(data), member.mode, member.mtime
            dst.addfile(info, io.BytesIO(data))


def build(src: Path, build_dir: Path) -> None:
    """Configure and build llama.cpp's library with CUDA, then the probe against it."""
    jobs = str(os.cpu_count() or 4)
    subprocess.run(
        [
            "cmake",
            "-S",
            str(src),
            "-B",
            str(build_dir),
            "-G",
            "Ninja",
            "-DCMAKE_BUILD_TYPE=Release",
            "-DGGML_CUDA=ON",
            "-DCMAKE_CUDA_ARCHITECTURES=90-real",
            "-DGGML_NATIVE=OFF",
            "-DLLAMA_BUILD_COMMON=OFF",
            "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_TOOLS=OFF",
            "-DLLAMA_BUILD_EXAMPLES=OFF",
            "-DLLAMA_BUILD_SERVER=OFF",
            "-DLLAMA_BUILD_APP=OFF",
            "-DLLAMA_OPENSSL=OFF",
            "-DGGML_CUDA_NCCL=OFF",
            "-DGGML_CUDA_COMPRESSION_MODE=none",
        ],
        check=True,
    )
    subprocess.run(
        ["cmake", "--build", str(build_dir), "--target", "llama", "-j", jobs], check=True
    )
    probe = Path(__file__).with_suffix(".cpp")
    cuda = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    subprocess.run(
        [
            "g++",
            "-O2",
            "-std=c++17",
            str(probe),
            "-o",
            str(build_dir / "probe"),
            f"-I{src}/include",
            f"-I{src}/src",
            f"-I{src}/ggml/include",
            f"-I{cuda}/include",
            f"-L{build_dir}/bin",
            "-lllama",
            "-lggml",
            "-lggml-base",
            "-lggml-cpu",
            f"-L{cuda}/lib64",
            "-lcudart",
            f"-Wl,-rpath,{build_dir}/bin",
        ],
        check=True,
    )


def run(
    build_dir: Path,
    out: Path,
    models_dir: Path,
    vocab_dir: Path,
    deadline: float,
    only: str | None,
    start: int = 0,
    grid: str = "main",
) -> None:
    """Measure every configuration until the deadline; one JSON line per run."""
    out.mkdir(parents=True, exist_ok=True)
    results = out / "measurements.jsonl"
    made: dict[str, Path] = {}
    with results.open("a") as fh:
        for index, cfg in enumerate(configs(only, grid)):
            if index < start:
                continue
            if time.monotonic() > deadline:
                print("deadline reached", file=sys.stderr)
                break
            name = cfg["model"]
            if name not in made and name.startswith("synth:"):
                made[name] = synth_model(name, models_dir / f"{name.replace(':', '_')}.gguf")
            if name not in made:
                model = MODELS[name]()
                made[name] = write_model(
                    model, models_dir / f"{name}.gguf", vocab_dir / f"ggml-vocab-{model.vocab}.gguf"
                )
            args = [f"model={made[name]}"] + [f"{k}={v}" for k, v in cfg.items() if k != "model"]
            free_before = _nvml_free()
            t0 = time.monotonic()
            proc = subprocess.run(
                [str(build_dir / "probe"), *args], capture_output=True, text=True, timeout=300
            )
            row: dict[str, Any] = {
                "grid": grid,
                "index": index,
                "config": cfg,
                "rc": proc.returncode,
                "wall_s": round(time.monotonic() - t0, 2),
                "nvml_free_before": free_before,
            }
            for line in proc.stdout.splitlines():
                if line.startswith("RESULT "):
                    row["result"] = json.loads(line[7:])
            row["log"] = _parse_log(proc.stderr)
            if "result" not in row or row["result"].get("status") != "ok":
                row["stderr_tail"] = proc.stderr[-3000:]
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            print(
                json.dumps({"i": index, "cfg": cfg, "rc": proc.returncode, "wall": row["wall_s"]}),
                file=sys.stderr,
            )


def main() -> None:
    """CLI: ``build SRC BUILD`` or ``run BUILD OUT --models DIR --vocab DIR``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("prepare")
    v.add_argument("sdist", type=Path)
    v.add_argument("out", type=Path)
    b = sub.add_parser("build")
    b.add_argument("src", type=Path)
    b.add_argument("build_dir", type=Path)
    r = sub.add_parser("run")
    r.add_argument("build_dir", type=Path)
    r.add_argument("out", type=Path)
    r.add_argument("--models", type=Path, default=Path("/tmp/models"))
    r.add_argument("--vocab", type=Path, required=True)
    r.add_argument("--seconds", type=float, default=300.0)
    r.add_argument("--only")
    r.add_argument("--start", type=int, default=0, help="skip the first N configurations")
    r.add_argument("--grid", choices=("main", "extra", "synth"), default="main")
    a = p.parse_args()
    if a.cmd == "prepare":
        prepare(a.sdist, a.out)
    elif a.cmd == "build":
        build(a.src, a.build_dir)
    else:
        a.models.mkdir(parents=True, exist_ok=True)
        run(
            a.build_dir,
            a.out,
            a.models,
            a.vocab,
            time.monotonic() + a.seconds,
            a.only,
            a.start,
            a.grid,
        )


if __name__ == "__main__":
    main()
