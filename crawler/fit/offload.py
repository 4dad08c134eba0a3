"""Partial offload (-ngl N): which buffers stay on the GPU and which go to host memory (pure).

Slots, caches and op_offload copies as llama.cpp 0c1e57098 places them; -ngl auto searched exactly.
Details: docs/internals/fit.md#offload
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from crawler.fit.cache import cache_type
from crawler.fit.coefficients import MemoryCoefficients
from crawler.fit.estimate import FitEstimate, RunConfig, _kv_tensor_bytes, estimate

__all__ = [
    "OffloadEstimate",
    "auto_gpu_layers",
    "device_estimate",
    "estimate_offload",
    "layer_weights",
    "n_slots",
]

#: ggml-cuda.cu ``ggml_backend_cuda_device_offload_op``: ops of batches this large are offloaded.
OP_OFFLOAD_MIN_BATCH = 32
#: FITTED: the most a quantized host cache's copy area held over one copy of a layer's K+V.
QUANTIZED_KV_COPY_EXTRA = 200 * 1024**2


def n_slots(c: MemoryCoefficients) -> int:
    """``n_layer_all + 1``: every block plus the output layer; ``-ngl`` at or above it = all."""
    return c.n_layer + c.n_nextn + 1


@dataclass(frozen=True, slots=True)
class OffloadEstimate:
    """Device and host bytes of one configuration with ``n_gpu_layers`` slots on the GPU."""

    full: FitEstimate  # everything offloaded (the single-GPU estimate)
    n_gpu_layers: int  # slots on the GPU, clamped to n_slots
    n_slots: int
    weights: int
    kv: int
    mtp_kv: int
    recurrent: int
    compute: int
    overhead: int
    host_bytes: int  # all host memory: input embedding, CPU slots, their caches, CPU compute
    host_weights: int  # weight bytes read from host memory per token (for the speed estimate)

    @property
    def total(self) -> int:
        """Device bytes."""
        return self.weights + self.kv + self.mtp_kv + self.recurrent + self.compute + self.overhead

    @property
    def partial(self) -> bool:
        """Some block or the output layer is on the CPU."""
        return self.n_gpu_layers < self.n_slots


def layer_weights(c: MemoryCoefficients) -> dict[int, tuple[int, int]]:
    """Per block (device, host) non-expert bytes; even shares when the coefficients predate the
    per-layer fields (stored before partial offload was modelled)."""
    if c.layer_weights:
        return {il: (d, h) for il, d, h in c.layer_weights}
    per = c.weights_bytes // max(1, c.n_layer + 1)
    return dict.fromkeys(range(c.n_layer), (per, per))


def estimate_offload(c: MemoryCoefficients, cfg: RunConfig, n_gpu_layers: int) -> OffloadEstimate:
    """Device and host bytes of ``cfg`` with ``-ngl n_gpu_layers`` on one GPU (see module)."""
    full = estimate(c, cfg)
    slots = n_slots(c)
    ngl = max(0, min(n_gpu_layers, slots))
    start = slots - ngl  # first slot on the GPU
    weights, kv, mtp_kv, recurrent = full.weights, full.kv, full.mtp_kv, full.recurrent
    host = full.host_bytes
    host_weights = 0
    if ngl == slots:
        return OffloadEstimate(
            full, ngl, slots, weights, kv, mtp_kv, recurrent, full.compute, full.overhead,
            host, 0,
        )  # fmt: skip
    layers = layer_weights(c)
    experts = {il: (d, h) for il, d, h in c.expert_layers}
    tk, tv = cache_type(cfg.type_k), cache_type(cfg.type_v)
    v_pad = 0 if full.flash_attn else c.v_width_max
    rec_per_layer = recurrent // c.recurrent_layers if c.recurrent_layers else 0
    largest = host_layer_kv = nextn_expert_copy = 0
    n_layer_all = c.n_layer + c.n_nextn
    for il in range(min(start, n_layer_all)):
        nextn = il >= c.n_layer
        if nextn and not cfg.mtp:
            continue  # nextn tensors are skipped without draft-mtp
        d, h = layers.get(il, (0, 0))
        moved_dev, moved_host = d, h
        # What a prompt batch copies in of this block: its largest matrix, and its experts' share
        # (the same fitted copy as --cpu-moe's) when -ngl, not --cpu-moe, moved them.
        expert_copy = 0
        if il in experts and not (cfg.cpu_moe or il < cfg.n_cpu_moe):
            moved_dev += experts[il][0]
            moved_host += experts[il][1]
            expert_copy = c.expert_copy_bytes
        weights -= moved_dev
        host += moved_host
        host_weights += moved_host
        if nextn:
            nextn_expert_copy = expert_copy
            continue
        largest = max(largest, (c.largest_layer_tensor if moved_host else 0) + expert_copy)
        # This layer's KV (or recurrent state) goes to host memory with it.
        gi = c.kv_layer_group[il] if il < len(c.kv_layer_group) else -2
        if gi >= 0:
            g = c.kv_groups[gi]
            cells = full.swa_cells if g.swa else full.kv_cells
            v_width = max(g.v_width, v_pad) if g.v_width else 0
            b = _kv_tensor_bytes(tk, g.k_width, cells, full.n_stream) + _kv_tensor_bytes(
                tv, v_width, cells, full.n_stream
            )
        elif gi == -1:
            b = rec_per_layer
        else:  # old coefficients: spread the caches evenly over the trunk
            b = (full.kv + full.recurrent) // max(1, c.n_layer)
        if gi == -1:
            recurrent -= b
        else:
            kv -= b
            host_layer_kv = max(host_layer_kv, b)
        host += b
    draft_copy = 0
    if cfg.mtp and start > c.n_layer:
        # the nextn block is on the CPU: the draft context's cache follows it, and that
        # context's GPU compute buffer copies in, for a prompt batch, its cache and a block
        # matrix or (MoE) its experts' share. FITTED on the 7 rows of the mtp_host grid (-ngl
        # 0/1): a dense draft buffer grew by the draft K+V plus 8-52 MiB (the matrix bounds
        # that); an MoE one reached the expert copy whatever the context (274 MiB at 32K and 64K).
        host += mtp_kv
        if cfg.ubatch >= OP_OFFLOAD_MIN_BATCH:
            draft_copy = max(mtp_kv + c.largest_layer_tensor, nextn_expert_copy)
        mtp_kv = 0
    if ngl == 0:  # the output layer (the last slot) is on the CPU too
        weights -= c.output_weights[0]
        host += c.output_weights[1]
        host_weights += c.output_weights[1]
    compute = full.compute
    if largest and cfg.ubatch >= OP_OFFLOAD_MIN_BATCH:
        # FITTED: the copy area holds the larger of one host matrix and one host layer's K+V
        # (10 partial-offload rows of server-measurements.jsonl; 1x the matrix alone left the
        # 131072-token rows 270-390 MiB low). A quantized host cache adds up to 200 MiB more: the
        # GPU's flash-attention op (ggml-backend.cpp does not pin FLASH_ATTN_EXT to its cache's
        # backend) reads copies of the layer's quantized K and V; over one copy of the largest
        # host layer's K+V the measured area held 0-190 MiB more (q4_0/q8_0, 32K-262K, 15
        # configurations): an upper envelope (a 1.75x factor read a 262K Gemma row 0.8 GiB high).
        kv_copy = host_layer_kv
        if tk.quantized or tv.quantized:
            kv_copy += min(host_layer_kv * 3 // 4, QUANTIZED_KV_COPY_EXTRA)
        compute += max(largest, kv_copy)
    compute += draft_copy
    host += full.compute  # the CPU backend's compute buffer
    return OffloadEstimate(
        full, ngl, slots, weights, kv, mtp_kv, recurrent, compute, full.overhead, host,
        host_weights,
    )  # fmt: skip


def auto_gpu_layers(c: MemoryCoefficients, cfg: RunConfig, budget_bytes: int) -> int | None:
    """``-ngl auto``: the most slots on the GPU whose device total fits; None if not even 0 does.

    A binary search: the device total falls as slots leave the GPU except where the op-offload
    copy area grows (the first slot to leave, the first full-attention layer among SWA ones;
    property-tested), so the answer always fits, but next to such a step it can be a few slots
    short of the largest N that fits (a Gemma-3-12B shape at 131072-262144 with a quantized cache:
    2 slots short in a band of budgets about 10 MiB wide).
    """
    slots = n_slots(c)
    if estimate_offload(c, cfg, 0).total > budget_bytes:
        return None
    lo, hi = 0, slots  # lo fits
    if estimate_offload(c, cfg, hi).total <= budget_bytes:
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if estimate_offload(c, cfg, mid).total <= budget_bytes:
            lo = mid
        else:
            hi = mid
    return lo


def device_estimate(c: MemoryCoefficients, cfg: RunConfig, n: int) -> FitEstimate:
    """The estimate of ``cfg`` at ``-ngl n`` in the single-GPU shape: components are the GPU's
    share, ``host_bytes`` all host memory (OffloadEstimate)."""
    off = estimate_offload(c, cfg, n)
    pinned = cfg.replace(n_gpu_layers=n)
    return dataclasses.replace(
        off.full,
        config=pinned,
        weights=off.weights,
        kv=off.kv,
        mtp_kv=off.mtp_kv,
        recurrent=off.recurrent,
        compute=off.compute,
        overhead=off.overhead,
        host_bytes=off.host_bytes,
    )
