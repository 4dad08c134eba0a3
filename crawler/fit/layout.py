"""A model's layer layout and tensor bytes as llama.cpp places them (pure: no I/O).

Inputs of the memory coefficients: layer kinds from metadata, bytes by where llama.cpp keeps them.
Details: docs/internals/fit.md#layout
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from crawler.fit.header import Meta, Unknown, cuda_tensor_bytes
from crawler.gguf.parse import GGUFHeader

__all__ = ["Recurrent", "WeightTotals", "recurrent_layout", "swa_layout", "weight_totals"]

# common/common.h LLM_FFN_EXPS_REGEX: what --cpu-moe / --n-cpu-moe move to host memory.
_EXPS = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")
_BLK = re.compile(r"^blk\.(\d+)\.")
# Hybrid archs whose recurrent layout is `attention.recurrent_layers` else `full_attention_interval`
# (src/models/qwen35.cpp, qwen35moe.cpp, qwen3next.cpp load_arch_hparams) and whose recurrent state
# is the Gated-DeltaNet conv + ssm state of src/llama-hparams.cpp n_embd_r()/n_embd_s().
_GDN_HYBRIDS = frozenset({"qwen35", "qwen35moe", "qwen3next"})
# SWA archs whose pattern rule we verified: src/models/gemma2.cpp (n_swa default 4096, pattern 2),
# gemma3.cpp (pattern 6, SWA only when sliding_window > 0). Others -> "unknown".
_SWA_DEFAULTS: dict[str, tuple[int, int | None]] = {"gemma2": (2, 4096), "gemma3": (6, None)}
_FLOAT_TYPES = frozenset({0, 1, 30})  # F32, F16, BF16: matmuls take the cuBLAS path on CUDA


@dataclass(frozen=True, slots=True)
class Recurrent:
    """Which layers are recurrent (hybrid models) and their state sizes."""

    layers: list[bool]
    r: int = 0  # n_embd_r()
    s: int = 0  # n_embd_s()
    conv_dim: int = 0
    d_inner: int = 0
    d_state: int = 0


def recurrent_layout(m: Meta, header: GGUFHeader, n_layer: int, n_layer_all: int) -> Recurrent:
    arch = m.arch
    has_ssm = any(k.startswith(f"{arch}.ssm.") for k in header.metadata)
    if not (has_ssm or m.has("attention.recurrent_layers")):
        return Recurrent([False] * n_layer_all)
    if arch not in _GDN_HYBRIDS:
        raise Unknown(f"{arch}: recurrent/hybrid memory rules not modelled for this arch")
    arr = m.md.get(f"{arch}.attention.recurrent_layers")
    if isinstance(arr, Sequence) and not isinstance(arr, str):
        if len(arr) != n_layer_all:
            raise Unknown(f"{arch}.attention.recurrent_layers has {len(arr)} entries")
        recurrent = [bool(v) for v in arr]
    else:
        interval = m.num("full_attention_interval", 4)
        if interval <= 0:
            raise Unknown(f"{arch}.full_attention_interval is {interval}")
        recurrent = [il < n_layer and (il + 1) % interval != 0 for il in range(n_layer_all)]
    d_conv = m.num("ssm.conv_kernel")
    d_inner = m.num("ssm.inner_size")
    d_state = m.num("ssm.state_size")
    conv_dim = d_inner + 2 * m.num("ssm.group_count") * d_state
    return Recurrent(
        recurrent, max(d_conv - 1, 0) * conv_dim, d_state * d_inner, conv_dim, d_inner, d_state
    )


def swa_layout(m: Meta, n_layer: int, n_layer_all: int) -> tuple[int, list[bool]]:
    """The sliding window and which layers use it."""
    arch = m.arch
    n_swa = m.num("attention.sliding_window", 0)
    swa = [False] * n_layer_all
    if arch in _SWA_DEFAULTS:
        pattern_default, swa_default = _SWA_DEFAULTS[arch]
        if swa_default is not None and not n_swa:
            n_swa = swa_default
        if n_swa > 0:
            raw = m.md.get(f"{arch}.attention.sliding_window_pattern", pattern_default)
            if isinstance(raw, Sequence) and not isinstance(raw, str):
                if len(raw) != n_layer_all:
                    raise Unknown(f"{arch}.attention.sliding_window_pattern length {len(raw)}")
                swa = [bool(v) and il < n_layer for il, v in enumerate(raw)]
            else:
                n_pat = int(raw)
                # llama_hparams::set_swa_pattern: every n_pat-th layer is full; nextn never SWA.
                swa = [
                    il < n_layer and (n_pat == 0 or il % n_pat < n_pat - 1)
                    for il in range(n_layer_all)
                ]
    elif n_swa > 0 or m.has("attention.sliding_window_pattern"):
        raise Unknown(f"{arch}: sliding-window layout rules not modelled for this arch")
    return n_swa, swa


@dataclass(slots=True)
class WeightTotals:
    """The tensor table's bytes, by where llama.cpp puts them."""

    names: set[str]
    q_rows: dict[str, int]
    weights: int = 0
    mtp_weights: int = 0
    experts: int = 0
    host: int = 0
    output_dev: int = 0
    output_host: int = 0
    largest: int = 0
    float_bytes: int = 0
    quant_bytes: int = 0
    vocab: int = 0
    expert_layers: dict[int, list[int]] = field(default_factory=dict)
    layer_weights: dict[int, list[int]] = field(default_factory=dict)
    expert_sizes: list[int] = field(default_factory=list)


def weight_totals(header: GGUFHeader, n_layer: int, n_nextn: int) -> WeightTotals:
    names = {t.name for t in header.tensors}
    if n_nextn and not any(n.startswith("blk.0.") for n in names):
        # An MTP head on its own (convert_hf_to_gguf.py --mtp, "mtp-*.gguf"): llama.cpp loads it
        # only beside its main model, whose memory it adds to.
        raise Unknown(
            f"{header.architecture}: MTP-only file (no trunk layers); estimate its main model"
        )
    w = WeightTotals(
        names, {t.name: t.shape[1] for t in header.tensors if t.name.endswith(".attn_q.weight")}
    )
    for t in header.tensors:
        dev, nbytes = cuda_tensor_bytes(t)
        if t.name == "token_embd.weight":
            # llama.cpp keeps the input embedding on the host (LLM_TENSOR_LAYER_INPUT -> CPU buft);
            # a tied output (no output.weight) is a device copy of it (TENSOR_DUPLICATED).
            w.host += nbytes
            w.vocab = t.shape[1] if len(t.shape) > 1 else 0
            if "output.weight" not in names:
                w.weights += dev
                w.output_dev += dev
                w.output_host += nbytes
            continue
        blk = _BLK.match(t.name)
        layer = int(blk.group(1)) if blk else -1
        expert = bool(_EXPS.search(t.name))
        if expert and layer >= 0:
            row = w.expert_layers.setdefault(layer, [0, 0])
            row[0] += dev
            row[1] += nbytes
            w.expert_sizes.append(nbytes)
            if layer >= n_layer:
                w.mtp_weights += dev
            else:
                w.experts += dev
        elif layer >= n_layer:
            w.mtp_weights += dev
        else:
            w.weights += dev
        if not expert:
            if layer >= 0:
                row = w.layer_weights.setdefault(layer, [0, 0])
                row[0] += dev
                row[1] += nbytes
                if len(t.shape) >= 2:
                    w.largest = max(w.largest, nbytes)
            elif t.name.startswith("output"):  # output.weight, output_norm.weight (+ bias)
                w.output_dev += dev
                w.output_host += nbytes
        if len(t.shape) >= 2:
            if t.type_id in _FLOAT_TYPES:
                w.float_bytes += nbytes
            else:
                w.quant_bytes += nbytes
    if not w.vocab:
        raise Unknown("no token_embd.weight tensor")
    return w
