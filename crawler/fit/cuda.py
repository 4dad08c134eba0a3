"""CUDA compute buffers and runtime overhead: a fitted model (pure).

Not closed-form in llama.cpp, so fitted to our own measurements on an H200.
Details: docs/internals/fit.md#cuda
"""

from __future__ import annotations

from dataclasses import dataclass

from crawler.base.units import MIB as MiB
from crawler.fit.coefficients import MemoryCoefficients

__all__ = [
    "CUDA_CONTEXT_BYTES",
    "ComputeInputs",
    "compute_bytes",
    "context_floor_per_ubatch",
    "host_context_bytes",
    "overhead_bytes",
]

#: cudaFree(0) on an idle H200 with lazy module loading (the CUDA 13 default): 526.81 MiB measured.
CUDA_CONTEXT_BYTES = 527 * MiB
#: kernel code and library state loaded lazily by the first decodes, kept until exit: 68 MiB.
LAZY_KERNELS_BYTES = 68 * MiB
#: cudaMalloc rounds each of llama.cpp's buffers to 2 MiB pages: 2.7-10.6 MiB measured in total.
PAGE_ROUNDING_BYTES = 6 * MiB
#: The smaller of overhead_bytes' two per-context runtime constants (the MMQ path's).
RUNTIME_FLOOR_BYTES = 10 * MiB


@dataclass(frozen=True, slots=True)
class ComputeInputs:
    """The configuration of one llama_context as the compute model sees it."""

    kv_cells: int  # cells of a full-attention layer per stream (the mask width)
    swa_cells: int  # cells of a SWA layer per stream (0 without SWA layers)
    n_stream: int
    n_ubatch: int
    n_outputs: int  # n_outputs_max of the context
    flash_attn: bool
    k_quant: bool
    v_quant: bool
    k_width_max: int
    v_width_max: int
    mtp: bool  # this is the MTP draft context (only the nextn layers run)
    host_expert_copy: int = 0  # experts kept on the host are copied in for large batches


def compute_bytes(c: MemoryCoefficients, x: ComputeInputs) -> int:
    """Device compute buffer of one context (``sched_reserve`` worst case), fitted model.

    ``mask + max(base, attention + copies, logits)`` where

    * mask: FA on, the f16 KQ mask ``kv_cells * ubatch * 2`` B per stream (+ a SWA mask), exact
      in every measured row; FA off, the f32 KQ of one layer plus its mask,
      ``kv_cells * ubatch * (4 n_head + 4)`` B.
    * base (activations, linear in ubatch): dense FFN ``4 ub (3 n_ff + 4 n_embd)``, MoE
      ``4 ub n_used (3 n_ff_exp + 2 n_embd)``, Gated-DeltaNet ``4 ub (3 conv_dim + 2 n_embd)``.
    * attention: ``8 ub (q_dim + n_embd)`` (+ ``4 ub (d_inner + d_state)`` for GDN hybrids,
      + ``6 ub n_head kv_lora`` for MLA).
    * copies: with a quantized K/V and FA, the CUDA FA op reserves f16 copies of one layer's whole
      cache inside the compute buffer (``ggml_cuda_flash_attn_ext_get_alloc_size``):
      ``kv_cells * n_stream * width * 2`` B (MLA: K only, V is a view of it).
    * logits: ``n_outputs (n_vocab + n_embd) 4`` B.
    """
    ub = x.n_ubatch
    if x.flash_attn:
        mask = (x.kv_cells + x.swa_cells) * ub * 2
    else:
        mask = x.kv_cells * ub * (4 * c.n_head + 4)
    ffn = 4 * ub * (3 * c.n_ff + 4 * c.n_embd) if c.n_ff else 0
    # mul_mat_id: gate/up/act outputs and the gathered input/down rows of every used expert.
    moe = 4 * ub * max(c.n_expert_used, 1) * (3 * c.n_ff_exp + 2 * c.n_embd) if c.n_expert else 0
    gdn = 4 * ub * (3 * c.conv_dim + 2 * c.n_embd) if c.conv_dim and not x.mtp else 0
    base = max(ffn, moe, gdn)
    attn = 8 * ub * (c.q_dim + c.n_embd)
    if c.conv_dim:
        attn += 4 * ub * (c.ssm_d_inner + c.ssm_d_state)
    if c.mla:
        attn += 6 * ub * c.n_head * c.mla_kv_lora
    copies = 0
    if x.flash_attn and (x.k_quant or x.v_quant):
        width = x.k_width_max * x.k_quant + (x.v_width_max * x.v_quant if not c.mla else 0)
        copies = x.kv_cells * x.n_stream * width * 2
    logits = x.n_outputs * (c.n_vocab + c.n_embd) * 4
    return mask + max(base, attn + copies, logits) + x.host_expert_copy


def context_floor_per_ubatch(c: MemoryCoefficients) -> int:
    """Bytes per ubatch token that the main context's compute buffer and runtime overhead hold at
    least, for any cache type and context with FA on (the search's lower bound,
    ``crawler.ranking.bounds.lower_bound_bytes``, adds ``ubatch`` of them and
    RUNTIME_FLOOR_BYTES).

    compute_bytes is at least ``max(base, attention)`` (the mask, cache copies, logits
    and expert copies are >= 0; the mask is counted apart), each linear in ubatch; the
    activation part of overhead_bytes is at least its smaller factor, 0.8 x the width
    (rounded down here; the 0.9 branch's int() rounding stays above it).
    """
    ffn = 4 * (3 * c.n_ff + 4 * c.n_embd) if c.n_ff else 0
    moe = 4 * max(c.n_expert_used, 1) * (3 * c.n_ff_exp + 2 * c.n_embd) if c.n_expert else 0
    gdn = 4 * (3 * c.conv_dim + 2 * c.n_embd) if c.conv_dim else 0
    attn = 8 * (c.q_dim + c.n_embd)
    if c.conv_dim:
        attn += 4 * (c.ssm_d_inner + c.ssm_d_state)
    if c.mla:
        attn += 6 * c.n_head * c.mla_kv_lora
    width = c.n_ff or c.n_ff_exp * max(c.n_expert_used, 1) or c.n_embd
    return max(ffn, moe, gdn, attn) + 4 * width // 5


def host_context_bytes(c: MemoryCoefficients, x: ComputeInputs, n_seq: int) -> int:
    """Pinned host memory of one context: the ``CUDA_Host`` compute buffer and the output buffer.

    Measured: the host compute buffer is the KQ mask (f16 with FA, f32 without) plus the f32
    input embeddings of a ubatch in and out (``8 ub n_embd``; the embedding matrix lives on the
    host); the output buffer is ``n_vocab * 4`` B per sequence at creation (llama-context.cpp
    ``output_reserve``; it grows on demand for larger verification batches).
    """
    mask = (x.kv_cells + x.swa_cells) * x.n_ubatch * (2 if x.flash_attn else 4)
    return mask + 8 * x.n_ubatch * c.n_embd + c.n_vocab * 4 * n_seq


def overhead_bytes(c: MemoryCoefficients, x: ComputeInputs, *, first: bool) -> int:
    """Device memory outside llama.cpp's buffers for one context (+ the process's fixed part).

    Per context: with quantized dense weights and FA, matmuls take the MMQ path and ggml's CUDA
    pool holds quantized activations (~14-24 MiB); float weights, MoE (mul_mat_id) or FA off take
    cuBLAS, whose workspace and handles hold ~110 MiB. FA off adds the f16 KQ temporary of the
    cuBLAS path once the context fills (``n_head * kv_cells * ub * 2``; measured 248 MiB for 8
    heads at 32k). ``first`` adds the CUDA context and the lazily loaded kernels.
    """
    ub = x.n_ubatch
    width = c.n_ff or c.n_ff_exp * max(c.n_expert_used, 1) or c.n_embd
    if c.weights_quantized and x.flash_attn and not c.n_expert:
        runtime = 10 * MiB + int(ub * width * 0.9)
    else:
        runtime = 110 * MiB + int(ub * width * 0.8)
    if not x.flash_attn:
        runtime += c.n_head * x.kv_cells * ub * 2
    fixed = CUDA_CONTEXT_BYTES + LAZY_KERNELS_BYTES + PAGE_ROUNDING_BYTES if first else 0
    return fixed + runtime
