"""Header -> MemoryCoefficients: everything the estimator needs, without the header (pure).

Rules mirror llama.cpp 0c1e57098; layouts come from metadata, unverified ones say "unknown".
Details: docs/internals/fit.md#coefficients
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from crawler.fit.header import Meta, Unknown
from crawler.fit.layout import Recurrent, WeightTotals, recurrent_layout, swa_layout, weight_totals
from crawler.gguf.parse import GGUFHeader

__all__ = [
    "SCHEMA_VERSION",
    "KVGroup",
    "MemoryCoefficients",
    "coefficients",
    "sliding_window_layers",
]

SCHEMA_VERSION = 1

# src/llama-arch.cpp llm_arch_supports_rs_rollback: these allocate the recurrent state
# (1 + n_rs_seq) times when speculative drafting asks for rollback.
_RS_ROLLBACK = frozenset(
    {
        "kimi-k3",
        "qwen35",
        "qwen35moe",
        "qwen4exp",
        "deepseek4",
        "glm5-next",
        "nemotron_h",
        "nemotron_h_moe",
        "lfm2",
        "lfm2moe",
        "bailingmoe3",
    }
)
# Metadata that means memory rules we do not model (other recurrent kinds, shared/reused KV,
# sparse-attention indexer caches).
_UNMODELLED_KEYS = (
    "wkv.head_size",
    "shortconv.l_cache",
    "kda.head_dim",
    "attention.shared_kv_layers",
    "attention.indexer.head_count",
)


#: src/llama-hparams.h ``LLAMA_MAX_LAYERS``: llama.cpp keeps per-layer hparams in arrays of this
#: size and refuses to load a model with more blocks (found by fuzz/header.py: a mutated
#: block_count of 2.5M took 11 s here).
LLAMA_MAX_LAYERS = 512


@dataclass(frozen=True, slots=True)
class KVGroup:
    """``count`` layers whose K rows hold ``k_width`` and V rows ``v_width`` elements per token.

    ``swa`` layers get the sliding-window cell count; ``v_width`` is 0 for MLA (V is a view of K).
    ``k_head``/``v_head`` are the head dims llama.cpp checks against quantized block sizes.
    """

    count: int
    k_width: int
    v_width: int
    swa: bool
    k_head: int
    v_head: int


@dataclass(frozen=True, slots=True)
class MemoryCoefficients:
    """Per-quant memory coefficients; crawler.fit.estimate needs nothing else.

    Byte fields are CUDA device buffer sizes (per-tensor row padding and 128-byte alignment
    included) unless named ``*_host_*``. ``status`` is "ok" or "unknown" (then ``reason`` says why
    and the estimator refuses).
    """

    status: str
    reason: str | None = None
    architecture: str | None = None
    n_layer: int = 0  # trunk layers (block_count - nextn_predict_layers)
    n_nextn: int = 0
    n_embd: int = 0
    n_vocab: int = 0
    n_head: int = 0  # max over layers
    n_ff: int = 0  # max dense FFN width over layers (0 if none)
    n_ff_exp: int = 0
    n_expert: int = 0
    n_expert_used: int = 0
    n_ctx_train: int = 0
    # Weights.
    weights_bytes: int = (
        0  # device: trunk, non-expert; includes the output copy of a tied embedding
    )
    mtp_weights_bytes: int = 0  # device, only loaded with --spec-type draft-mtp (experts included)
    expert_bytes: int = 0  # device: routed experts of trunk layers
    host_bytes: int = 0  # token_embd, kept in host memory by llama.cpp
    # (layer, device bytes, host bytes) of routed experts, trunk and MTP layers, for --n-cpu-moe.
    expert_layers: tuple[tuple[int, int, int], ...] = ()
    weights_quantized: bool = True
    # KV cache.
    kv_groups: tuple[KVGroup, ...] = ()  # main context: trunk layers that own KV
    mtp_kv_groups: tuple[KVGroup, ...] = ()  # MTP draft context: the nextn layers
    n_swa: int = 0
    mla: bool = False
    v_width_max: int = 0  # V rows are padded to this without flash attention (TAG_V_CACHE_VARIABLE)
    # Recurrent state (f32 elements per layer per sequence).
    recurrent_layers: int = 0
    recurrent_r: int = 0
    recurrent_s: int = 0
    rs_rollback: bool = False
    conv_dim: int = 0  # GDN conv channels (d_inner + 2 n_group d_state), for the compute model
    ssm_d_inner: int = 0
    ssm_d_state: int = 0
    q_dim: int = 0  # rows of attn_q (n_head * head_k; x2 when it carries a gate), for compute
    mla_kv_lora: int = 0
    # Device compute bytes added when routed experts stay on the host (--cpu-moe / --n-cpu-moe):
    # ggml's scheduler copies the weights of the offloaded expert matmuls into the compute buffer;
    # measured 0.8-2.5x one expert tensor on five MoE models, modelled as 1.25x their mean.
    expert_copy_bytes: int = 0
    mtp_available: bool = False  # nextn layers present with their eh_proj tensor
    # Per-layer layout for partial offload (crawler/fit/offload.py); empty in coefficients stored
    # before it existed (offload then spreads the weights evenly). (layer, device bytes, host
    # bytes) of each block's non-expert tensors, trunk and nextn blocks.
    layer_weights: tuple[tuple[int, int, int], ...] = ()
    output_weights: tuple[int, int] = (0, 0)  # output.weight + output_norm (device, host bytes)
    # Per trunk layer: index into kv_groups of its KV, -1 for a layer without KV (recurrent).
    kv_layer_group: tuple[int, ...] = ()
    largest_layer_tensor: int = 0  # host bytes of the largest non-expert block matrix
    schema: int = field(default=SCHEMA_VERSION)

    # ---- scalar columns for the catalog's SQL prefilter (crawler/catalog/tables.py MemoryModel)
    @property
    def kv_bytes_per_token_f16(self) -> int:
        """f16 K+V bytes per context token over the main-context layers that grow with ctx."""
        return sum(2 * g.count * (g.k_width + g.v_width) for g in self.kv_groups if not g.swa)

    @property
    def mtp_kv_bytes_per_token_f16(self) -> int:
        """f16 K+V bytes per context token of the MTP draft context (its nextn layers)."""
        return sum(2 * g.count * (g.k_width + g.v_width) for g in self.mtp_kv_groups if not g.swa)

    @property
    def fixed_bytes_f16(self) -> int:
        """Cache bytes at f16 that stop growing with the context, 1 sequence, ubatch 512: the
        SWA layers' full window (swa_cells of swa_bytes_per_cell_f16) and the recurrent state.
        A context below the window holds fewer SWA cells (crawler.fit.estimate)."""
        return self.swa_bytes_per_cell_f16 * self.swa_cells + self.recurrent_bytes_per_seq

    @property
    def swa_bytes_per_cell_f16(self) -> int:
        """f16 K+V bytes of one cache cell over the main context's sliding-window layers."""
        return sum(2 * g.count * (g.k_width + g.v_width) for g in self.kv_groups if g.swa)

    @property
    def swa_cells(self) -> int:
        """The SWA cache's cells at long contexts, 1 sequence, ubatch 512: pad(n_swa + 512, 256)
        (0 without SWA layers); a shorter context caps them at its own cells."""
        from crawler.fit.cache import pad

        return pad(self.n_swa + 512, 256) if self.n_swa and self.swa_bytes_per_cell_f16 else 0

    @property
    def recurrent_bytes_per_seq(self) -> int:
        """f32 recurrent state of all recurrent layers for one sequence, one snapshot."""
        return self.recurrent_layers * (self.recurrent_r + self.recurrent_s) * 4

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict; from_json restores an equal object."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MemoryCoefficients:
        """Inverse of to_json (unknown keys are ignored, missing ones take defaults)."""
        known = {f.name for f in fields(cls)}
        kw: dict[str, Any] = {k: v for k, v in data.items() if k in known}
        kw["kv_groups"] = tuple(KVGroup(**g) for g in kw.get("kv_groups", ()))
        kw["mtp_kv_groups"] = tuple(KVGroup(**g) for g in kw.get("mtp_kv_groups", ()))
        kw["expert_layers"] = tuple(
            (int(a), int(b), int(c)) for a, b, c in kw.get("expert_layers", ())
        )
        kw["layer_weights"] = tuple(
            (int(a), int(b), int(c)) for a, b, c in kw.get("layer_weights", ())
        )
        kw["output_weights"] = tuple(int(x) for x in kw.get("output_weights", (0, 0)))
        kw["kv_layer_group"] = tuple(int(x) for x in kw.get("kv_layer_group", ()))
        return cls(**kw)

    def dumps(self) -> str:
        """Compact JSON text."""
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True)


#: ``reason`` of a file without tensors (llama.cpp's ``ggml-vocab-*.gguf``): not a model.
VOCAB_ONLY = "vocabulary only, no tensors"


def _group_index(groups: tuple[KVGroup, ...], g: KVGroup) -> int:
    for i, x in enumerate(groups):
        if (x.k_width, x.v_width, x.swa, x.k_head, x.v_head) == (
            g.k_width,
            g.v_width,
            g.swa,
            g.k_head,
            g.v_head,
        ):
            return i
    return -1


def _unknown(reason: str, arch: str | None) -> MemoryCoefficients:
    return MemoryCoefficients(status="unknown", reason=reason, architecture=arch)


def coefficients(header: GGUFHeader) -> MemoryCoefficients:
    """Memory coefficients of one GGUF (pass the merged header of all shards).

    Never raises for a well-formed header: unmodelled rules give ``status="unknown"``.
    """
    arch = header.architecture
    if not header.tensors:
        return _unknown(VOCAB_ONLY, arch)
    if arch is None:
        return _unknown("no general.architecture", None)
    try:
        return _coefficients(header, arch)
    except Unknown as exc:
        return _unknown(str(exc), arch)


def sliding_window_layers(header: GGUFHeader) -> list[bool] | None:
    """Per block: does it attend through the sliding window? None where the rules are not known
    (the estimate refuses such a file the same way)."""
    arch = header.architecture
    if arch is None:
        return None
    m = Meta(header.metadata, arch)
    try:
        n_layer_all = m.num("block_count")
        n_layer = n_layer_all - m.num("nextn_predict_layers", 0)
        if not 0 < n_layer <= n_layer_all <= LLAMA_MAX_LAYERS:
            return None
        return swa_layout(m, n_layer, n_layer_all)[1]
    except Unknown:
        return None


def _check_modelled(m: Meta, arch: str) -> None:
    """Unknown for metadata whose memory rules are not modelled."""
    for key in _UNMODELLED_KEYS:
        if m.has(key):
            raise Unknown(f"{arch}: metadata {arch}.{key} means memory rules not modelled")
    if m.has("attention.causal") and not m.md.get(f"{arch}.attention.causal"):
        raise Unknown(f"{arch}: non-causal model (embedding/reranker) not modelled")


def _layer_counts(m: Meta, arch: str) -> tuple[int, int]:
    """(block_count, nextn_predict_layers): all blocks, and the MTP ones among them."""
    n_layer_all = m.num("block_count")
    n_nextn = m.num("nextn_predict_layers", 0)
    n_layer = n_layer_all - n_nextn  # src/llama-hparams.cpp n_layer()
    if n_layer <= 0 or n_nextn < 0:
        raise Unknown(f"{arch}: block_count {n_layer_all} with {n_nextn} nextn layers")
    if n_layer_all > LLAMA_MAX_LAYERS:
        # Per-layer lists below are block_count long: a hostile count must not cost CPU/memory.
        raise Unknown(f"{arch}: block_count {n_layer_all} exceeds llama.cpp's {LLAMA_MAX_LAYERS}")
    return n_layer_all, n_nextn


@dataclass(frozen=True, slots=True)
class _Heads:
    """Attention heads per layer and their widths (``*_swa``: of sliding-window layers)."""

    n_embd: int
    n_head: list[int]
    n_head_kv: list[int]
    head_k: int
    head_v: int
    head_k_swa: int
    head_v_swa: int
    mla: bool


def _heads(m: Meta, arch: str, n_layer_all: int) -> _Heads:
    n_embd = m.num("embedding_length")
    n_head = m.per_layer("attention.head_count", n_layer_all)
    n_head_kv = m.per_layer("attention.head_count_kv", n_layer_all, default=n_head[0])
    if not n_head[0]:
        raise Unknown(f"{arch}: head_count of layer 0 is 0")
    # src/llama-model.cpp load_hparams: head dims default to n_embd / n_head(0).
    head_k = m.num("attention.key_length", n_embd // n_head[0])
    head_v = m.num("attention.value_length", n_embd // n_head[0])
    head_k_swa = m.num("attention.key_length_swa", head_k)
    head_v_swa = m.num("attention.value_length_swa", head_v)
    mla = m.num("attention.key_length_mla", 0) > 0 and m.num("attention.value_length_mla", 0) > 0
    return _Heads(n_embd, n_head, n_head_kv, head_k, head_v, head_k_swa, head_v_swa, mla)


@dataclass(frozen=True, slots=True)
class _KVLayout:
    """Each layer's cache widths (``swa``: per layer), merged into KVGroups of equal layers."""

    heads: _Heads
    swa: list[bool]

    def group(self, il: int) -> KVGroup:
        h, swa = self.heads, self.swa[il]
        hk = h.head_k_swa if swa else h.head_k
        hv = h.head_v_swa if swa else h.head_v
        return KVGroup(
            count=1,
            k_width=hk * h.n_head_kv[il],
            v_width=0 if h.mla else hv * h.n_head_kv[il],
            swa=swa,
            k_head=hk,
            v_head=0 if h.mla else hv,
        )

    def merge(self, layers: list[int]) -> tuple[KVGroup, ...]:
        counts = Counter(
            (g.k_width, g.v_width, g.swa, g.k_head, g.v_head) for g in map(self.group, layers)
        )
        return tuple(
            KVGroup(n, kw, vw, s, kh, vh) for (kw, vw, s, kh, vh), n in sorted(counts.items())
        )


def _coefficients(header: GGUFHeader, arch: str) -> MemoryCoefficients:
    m = Meta(header.metadata, arch)
    _check_modelled(m, arch)
    n_layer_all, n_nextn = _layer_counts(m, arch)
    n_layer = n_layer_all - n_nextn
    heads = _heads(m, arch, n_layer_all)
    rec = recurrent_layout(m, header, n_layer, n_layer_all)
    n_swa, swa = swa_layout(m, n_layer, n_layer_all)
    kv = _KVLayout(heads, swa)
    # src/llama-model.cpp create_memory: the main context's cache filters il < n_layer(), the MTP
    # context's keeps il >= n_layer(); recurrent layers own no KV (llama-memory-hybrid).
    kv_layers = [il for il in range(n_layer) if not rec.layers[il] and heads.n_head_kv[il] > 0]
    mtp_layers = [il for il in range(n_layer, n_layer_all) if heads.n_head_kv[il] > 0]
    w = weight_totals(header, n_layer, n_nextn)
    n_ff = max(m.per_layer("feed_forward_length", n_layer_all, default=0), default=0)
    return _assemble(m, arch, n_layer, n_nextn, n_ff, heads, kv, kv_layers, mtp_layers, rec, w,
                     n_swa if any(swa) else 0)  # fmt: skip


def _assemble(
    m: Meta,
    arch: str,
    n_layer: int,
    n_nextn: int,
    n_ff: int,
    heads: _Heads,
    kv: _KVLayout,
    kv_layers: list[int],
    mtp_layers: list[int],
    rec: Recurrent,
    w: WeightTotals,
    n_swa: int,
) -> MemoryCoefficients:
    """The coefficients from the layouts read off the header."""
    mla, head_v, n_head = heads.mla, heads.head_v, heads.n_head
    kv_groups = kv.merge(kv_layers)
    kv_set = set(kv_layers)
    first_kv = kv_layers[0] if kv_layers else 0
    q_dim = w.q_rows.get(f"blk.{first_kv}.attn_q.weight", n_head[first_kv] * heads.head_k)
    if mla:
        q_dim = n_head[first_kv] * heads.head_k  # absorbed MLA attends with kv_lora + rope per head
    return MemoryCoefficients(
        status="ok", architecture=arch, n_layer=n_layer, n_nextn=n_nextn, n_embd=heads.n_embd,
        n_vocab=w.vocab, n_head=max(n_head), n_ff=n_ff,
        n_ff_exp=m.num("expert_feed_forward_length", 0), n_expert=m.num("expert_count", 0),
        n_expert_used=m.num("expert_used_count", 0), n_ctx_train=m.num("context_length", 0),
        weights_bytes=w.weights, mtp_weights_bytes=w.mtp_weights, expert_bytes=w.experts,
        host_bytes=w.host,
        expert_layers=tuple((il, d, h) for il, (d, h) in sorted(w.expert_layers.items())),
        weights_quantized=w.quant_bytes >= w.float_bytes,
        kv_groups=kv_groups, mtp_kv_groups=kv.merge(mtp_layers), n_swa=n_swa, mla=mla,
        v_width_max=max(((0 if mla else head_v) * h for h in heads.n_head_kv), default=0),
        recurrent_layers=sum(rec.layers), recurrent_r=rec.r, recurrent_s=rec.s,
        rs_rollback=arch in _RS_ROLLBACK, conv_dim=rec.conv_dim, ssm_d_inner=rec.d_inner,
        ssm_d_state=rec.d_state, q_dim=q_dim, mla_kv_lora=head_v if mla else 0,
        expert_copy_bytes=(
            5 * sum(w.expert_sizes) // (4 * len(w.expert_sizes)) if w.expert_sizes else 0
        ),
        mtp_available=(
            n_nextn > 0 and f"blk.{n_layer + n_nextn - 1}.nextn.eh_proj.weight" in w.names
        ),
        layer_weights=tuple((il, d, h) for il, (d, h) in sorted(w.layer_weights.items())),
        output_weights=(w.output_dev, w.output_host),
        kv_layer_group=tuple(
            _group_index(kv_groups, kv.group(il)) if il in kv_set else -1 for il in range(n_layer)
        ),
        largest_layer_tensor=w.largest,
    )  # fmt: skip
