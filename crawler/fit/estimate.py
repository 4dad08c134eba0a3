"""RunConfig + MemoryCoefficients -> FitEstimate, and the inverse questions (pure).

Cell counts and buffers follow llama.cpp 0c1e57098 exactly; compute and overhead come from cuda.
Details: docs/internals/fit.md#estimate
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from crawler.base.errors import InvalidConfig, NothingToEstimate, UnknownArchitecture
from crawler.base.records import replaced
from crawler.fit.cache import (
    CUDA_ALIGNMENT,
    MATRIX_ROW_PADDING,
    CacheType,
    cache_type,
    check_v_cache,
    pad,
)
from crawler.fit.coefficients import VOCAB_ONLY, KVGroup, MemoryCoefficients
from crawler.fit.cuda import ComputeInputs, compute_bytes, host_context_bytes, overhead_bytes

__all__ = [
    "CACHE_LADDER",
    "FitEstimate",
    "RunConfig",
    "cheapest_cache_for",
    "estimate",
    "largest_fitting",
    "max_ctx",
]

#: llama-server defaults (common/common.h): n_batch 2048, n_ubatch 512, --spec-draft-n-max 3.
DEFAULT_BATCH = 2048
DEFAULT_UBATCH = 512
DEFAULT_DRAFT_N_MAX = 3
#: tools/server/server.cpp: -np unset (auto) -> n_parallel 4 with a unified KV cache.
SERVER_AUTO_PARALLEL = 4


@dataclass(frozen=True, slots=True)
class RunConfig:
    """One llama-server configuration (what the estimate and the command both describe).

    ``parallel=None`` is llama-server's default (``-np`` unset: 4 slots, unified cache); an explicit
    value gives per-slot streams as ``-np N`` does. ``flash_attn`` is "on", "off" or "auto" (auto is
    on for CUDA GPUs that support FA, which every GPU llama.cpp's FA kernels target does).
    """

    ctx: int
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: str = "auto"
    parallel: int | None = 1
    ubatch: int = DEFAULT_UBATCH
    batch: int = DEFAULT_BATCH
    mtp: bool = False
    spec_draft_n_max: int = DEFAULT_DRAFT_N_MAX
    type_k_draft: str = "f16"
    type_v_draft: str = "f16"
    cpu_moe: bool = False
    n_cpu_moe: int = 0
    swa_full: bool = False
    model_path: str = "model.gguf"
    #: ``-ngl``: slots on the GPU (crawler/fit/offload.py); None = all. estimate is the
    #: full-offload estimate whatever this says; command writes it.
    n_gpu_layers: int | None = None

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with some fields changed."""
        return replaced(self, **changes)


@dataclass(frozen=True, slots=True)
class FitEstimate:
    """Device bytes by component for one configuration, plus host bytes and the command."""

    config: RunConfig
    n_ctx: int  # context llama.cpp allocates (padded to 256)
    kv_cells: int
    swa_cells: int
    n_stream: int
    flash_attn: bool
    weights: int
    kv: int
    mtp_kv: int
    recurrent: int
    compute: int
    overhead: int
    # Host memory: the input embedding (and experts kept on the CPU) as tensor bytes, plus the
    # pinned CUDA_Host compute and output buffers of each context.
    host_bytes: int
    #: The part of ``host_bytes`` that is pinned CUDA_Host compute and output buffers (the rest is
    #: tensor bytes: the input embedding, and experts kept on the CPU).
    host_buffers: int = 0

    @property
    def command(self) -> str:
        """The llama-server command of ``config`` (built when asked: a search estimates many
        configurations and shows a few)."""
        return command(self.config)

    @property
    def total(self) -> int:
        """All device bytes."""
        return self.weights + self.kv + self.mtp_kv + self.recurrent + self.compute + self.overhead

    def bytes_dict(self) -> dict[str, int]:
        """``bytes{weights, kv, mtp_kv, recurrent, compute, overhead, total}``, docs/estimate.md."""
        return {
            "weights": self.weights,
            "kv": self.kv,
            "mtp_kv": self.mtp_kv,
            "recurrent": self.recurrent,
            "compute": self.compute,
            "overhead": self.overhead,
            "total": self.total,
        }

    def fits(self, budget_bytes: int) -> bool:
        """True when the total is within the budget."""
        return self.total <= budget_bytes


def _kv_tensor_bytes(t: CacheType, width: int, cells: int, n_stream: int) -> int:
    """One ``[width, cells, n_stream]`` cache tensor in a CUDA buffer (llama-kv-cache.cpp ~233)."""
    if width == 0:
        return 0
    size = t.row_bytes(width) * cells * n_stream
    if t.quantized and width % MATRIX_ROW_PADDING:
        size += t.row_bytes(MATRIX_ROW_PADDING - width % MATRIX_ROW_PADDING)
    return pad(size, CUDA_ALIGNMENT)


def _kv_bytes(
    groups: tuple[KVGroup, ...],
    tk: CacheType,
    tv: CacheType,
    cells: int,
    swa_cells: int,
    n_stream: int,
    v_width_pad: int,
) -> int:
    total = 0
    for g in groups:
        n = swa_cells if g.swa else cells
        v_width = max(g.v_width, v_width_pad) if g.v_width else 0
        total += g.count * (
            _kv_tensor_bytes(tk, g.k_width, n, n_stream)
            + _kv_tensor_bytes(tv, v_width, n, n_stream)
        )
    return total


def _check(c: MemoryCoefficients, cfg: RunConfig) -> tuple[CacheType, CacheType, bool]:
    if c.status != "ok" and c.reason == VOCAB_ONLY:
        raise NothingToEstimate(f"{VOCAB_ONLY}: a tokenizer file, nothing to load or estimate")
    if c.status != "ok":
        raise UnknownArchitecture(
            f"memory rules not modelled for {c.architecture or 'this file'}: {c.reason}"
        )
    if cfg.ctx < 1:
        raise InvalidConfig("--ctx must be at least 1")
    if cfg.parallel is not None and cfg.parallel < 1:
        raise InvalidConfig("--parallel must be at least 1")
    if cfg.ubatch < 1 or cfg.batch < 1:
        raise InvalidConfig("batch sizes must be at least 1")
    if cfg.flash_attn not in ("on", "off", "auto"):
        raise InvalidConfig(f"--flash-attn must be on, off or auto, not {cfg.flash_attn!r}")
    if cfg.mtp and not c.mtp_available:
        raise InvalidConfig(
            "MTP drafting needs nextn layers with their tensors; this file has none"
        )
    if cfg.n_cpu_moe < 0:
        raise InvalidConfig("--n-cpu-moe must be >= 0")
    tk, tv = cache_type(cfg.type_k), cache_type(cfg.type_v)
    # src/llama-context.cpp llama_init_from_model ~3835-3870: the order of llama.cpp's own checks.
    if c.mla and tk.name != tv.name:
        raise InvalidConfig(f"MLA models need equal K and V cache types ({tk.name} != {tv.name})")
    check_v_cache(cfg.flash_attn, tv.name)
    fa = cfg.flash_attn != "off"
    groups = c.kv_groups + (c.mtp_kv_groups if cfg.mtp else ())
    for t, attr in ((tk, "k_head"), (tv, "v_head")):
        if fa and t.quantized:
            for g in groups:
                head = getattr(g, attr)
                if head and head % t.blck:
                    raise InvalidConfig(
                        f"cache type {t.name} needs head dims divisible by {t.blck}, got {head}"
                    )
    if cfg.mtp:
        for name in (cfg.type_k_draft, cfg.type_v_draft):
            cache_type(name)
    return tk, tv, fa


def estimate(c: MemoryCoefficients, cfg: RunConfig) -> FitEstimate:
    """Device memory of ``llama-server`` run with ``cfg`` on one CUDA GPU, all layers offloaded.

    Raises UnknownArchitecture for ``status="unknown"`` coefficients and InvalidConfig for a
    configuration llama.cpp itself rejects.
    """
    tk, tv, fa = _check(c, cfg)
    unified = cfg.parallel is None
    n_seq = SERVER_AUTO_PARALLEL if cfg.parallel is None else cfg.parallel
    # src/llama-context.cpp ~290: n_ctx padded to 256; per-sequence streams unless unified.
    n_ctx = pad(cfg.ctx, 256)
    if unified or n_seq == 1:
        cells, n_stream = n_ctx, 1
    else:
        cells, n_stream = pad(n_ctx // n_seq, 256), n_seq
        n_ctx = cells * n_seq
    ubatch = min(cfg.ubatch, cfg.batch, n_ctx)
    # src/llama-kv-cache-iswa.cpp ~73:
    #   SWA cells = PAD(min(size, n_swa * (unified ? n_seq : 1) + ub), 256)
    swa_cells = 0
    if any(g.swa for g in c.kv_groups):
        swa_cells = (
            cells
            if cfg.swa_full
            else pad(min(cells, c.n_swa * (n_seq if unified else 1) + ubatch), 256)
        )
    v_pad = 0 if fa else c.v_width_max  # TAG_V_CACHE_VARIABLE: V rows padded without FA
    kv = _kv_bytes(c.kv_groups, tk, tv, cells, swa_cells, n_stream, v_pad)

    # src/llama-memory-recurrent.cpp ~101: f32 r and s per layer, n_seq * (1 + n_rs_seq) slots;
    # common/common.h need_n_rs_seq: draft-mtp asks n_rs_seq = --spec-draft-n-max, clamped to 0 for
    # archs without rollback (llama-context.cpp ~106).
    n_rs = cfg.spec_draft_n_max if cfg.mtp and c.rs_rollback else 0
    slots = max(1, n_seq) * (1 + n_rs)
    recurrent = c.recurrent_layers * (
        pad(c.recurrent_r * 4 * slots, CUDA_ALIGNMENT)
        + pad(c.recurrent_s * 4 * slots, CUDA_ALIGNMENT)
    )

    # Weights: MTP block only with draft-mtp (TENSOR_SKIP otherwise); experts per --cpu-moe rules.
    weights = c.weights_bytes + c.expert_bytes + (c.mtp_weights_bytes if cfg.mtp else 0)
    host = c.host_bytes
    experts_on_host = False
    for il, dev, hostb in c.expert_layers:
        if il >= c.n_layer and not cfg.mtp:
            continue
        if cfg.cpu_moe or il < cfg.n_cpu_moe:
            weights -= dev
            host += hostb
            experts_on_host = True

    # tools/server/server-context.cpp server_output_limits:
    #   n_outputs_max = min(n_batch, np * (1 + n_draft))
    n_draft = cfg.spec_draft_n_max if cfg.mtp else 0
    n_outputs = max(1, min(cfg.batch, n_seq * (1 + n_draft)))
    k_max = max((g.k_width for g in c.kv_groups), default=0)
    v_max = max((g.v_width for g in c.kv_groups), default=0)
    main = ComputeInputs(
        kv_cells=cells,
        swa_cells=swa_cells,
        n_stream=n_stream,
        n_ubatch=ubatch,
        n_outputs=n_outputs,
        flash_attn=fa,
        k_quant=tk.quantized,
        v_quant=tv.quantized,
        k_width_max=k_max,
        v_width_max=v_max,
        mtp=False,
        # ggml's scheduler offloads the expert matmuls of a large batch to the GPU and copies the
        # host-resident weights into the compute buffer (see MemoryCoefficients.expert_copy_bytes).
        host_expert_copy=c.expert_copy_bytes if experts_on_host else 0,
    )
    compute = compute_bytes(c, main)
    overhead = overhead_bytes(c, main, first=True)
    host_buffers = host_context_bytes(c, main, n_seq)

    mtp_kv = 0
    if cfg.mtp:
        # common/speculative.cpp common_speculative_init_result: a second context on the same
        # weights, n_ctx of the target, draft cache types (-ctkd/-ctvd, default f16), n_rs_seq 0,
        # n_outputs_max = n_parallel; its cache holds only the nextn layers.
        dk, dv = cache_type(cfg.type_k_draft), cache_type(cfg.type_v_draft)
        if dv.quantized and not fa:
            raise InvalidConfig("a quantized draft V cache needs flash attention")
        mtp_kv = _kv_bytes(c.mtp_kv_groups, dk, dv, cells, 0, n_stream, 0)
        draft = dataclasses.replace(
            main,
            n_outputs=n_seq,
            k_quant=dk.quantized,
            v_quant=dv.quantized,
            k_width_max=max((g.k_width for g in c.mtp_kv_groups), default=0),
            v_width_max=max((g.v_width for g in c.mtp_kv_groups), default=0),
            swa_cells=0,
            mtp=True,
            host_expert_copy=0,
        )
        compute += compute_bytes(c, draft)
        overhead += overhead_bytes(c, draft, first=False)
        host_buffers += host_context_bytes(c, draft, n_seq)

    return FitEstimate(
        config=cfg,
        n_ctx=n_ctx,
        kv_cells=cells,
        swa_cells=swa_cells,
        n_stream=n_stream,
        flash_attn=fa,
        weights=weights,
        kv=kv,
        mtp_kv=mtp_kv,
        recurrent=recurrent,
        compute=compute,
        overhead=overhead,
        host_bytes=host + host_buffers,
        host_buffers=host_buffers,
    )


def command(cfg: RunConfig) -> str:
    """The llama-server command line for exactly ``cfg``, shell-quoted (see command_args)."""
    return shlex.join(command_args(cfg))


def command_args(cfg: RunConfig) -> list[str]:
    """The llama-server argv for exactly ``cfg`` (flags of common/arg.cpp at 0c1e57098).

    Flags and their arg.cpp definitions: ``-c``, ``-ngl`` (~2790, also "all"/"auto"), ``-fa
    on|off|auto`` (~1754), ``-ctk``/``-ctv`` (~2437), ``-np`` (~2544, server: -1 = auto),
    ``-ub``/``-b``, ``--swa-full`` (~1690), ``--spec-type draft-mtp`` (~4249),
    ``--spec-draft-n-max`` (~4140), ``-ctkd``/``-ctvd`` (~4090), ``--cpu-moe`` (~2760),
    ``--n-cpu-moe`` (~2767).
    ``-ngl 999`` keeps every layer on the GPU and, being set by the user, stops ``--fit`` (on by
    default) from moving layers (common/fit.cpp). ``-np`` is omitted only for ``parallel=None``.
    """
    ngl = "999" if cfg.n_gpu_layers is None else str(cfg.n_gpu_layers)
    args = ["llama-server", "-m", cfg.model_path, "-c", str(cfg.ctx), "-ngl", ngl]
    args += ["-fa", cfg.flash_attn]
    if cfg.type_k != "f16":
        args += ["-ctk", cfg.type_k]
    if cfg.type_v != "f16":
        args += ["-ctv", cfg.type_v]
    if cfg.parallel is not None:
        args += ["-np", str(cfg.parallel)]
    if cfg.ubatch != DEFAULT_UBATCH:
        args += ["-ub", str(cfg.ubatch)]
    if cfg.batch != DEFAULT_BATCH:
        args += ["-b", str(cfg.batch)]
    if cfg.swa_full:
        args += ["--swa-full"]
    if cfg.mtp:
        args += ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(cfg.spec_draft_n_max)]
        if cfg.type_k_draft != "f16":
            args += ["-ctkd", cfg.type_k_draft]
        if cfg.type_v_draft != "f16":
            args += ["-ctvd", cfg.type_v_draft]
    if cfg.cpu_moe:
        args += ["--cpu-moe"]
    elif cfg.n_cpu_moe:
        args += ["--n-cpu-moe", str(cfg.n_cpu_moe)]
    return args


def _fits(c: MemoryCoefficients, cfg: RunConfig, budget: int) -> bool:
    return estimate(c, cfg).total <= budget


def max_ctx(c: MemoryCoefficients, cfg: RunConfig, budget_bytes: int, *, limit: int = 0) -> int:
    """The largest ``ctx`` (tokens) for which ``cfg`` fits ``budget_bytes``; 0 if none does.

    The estimate is monotone in ctx, so a binary search over integers finds it. ``limit`` caps the
    search (default: the training context, else 1 Mi tokens).
    """
    hi = limit or c.n_ctx_train or 1 << 20
    return largest_fitting(lambda ctx: _fits(c, cfg.replace(ctx=ctx), budget_bytes), hi)


def largest_fitting(fits: Callable[[int], bool], hi: int) -> int:
    """The largest context in [1, hi] for which ``fits`` holds, 0 if none: every estimate grows
    with the context, so a binary search over the integers finds it."""
    if not fits(1):
        return 0
    if fits(hi):
        return hi
    lo = 1
    while hi - lo > 1:  # invariant: lo fits, hi does not
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


#: (K, V) pairs tried by cheapest_cache_for, least lossy first: the pairs with their own
#: CUDA flash-attention kernels in default builds (ggml-cuda/fattn.cu; GGML_CUDA_FA_ALL_QUANTS
#: off). Mixed pairs (q8_0/f16, q4_0/q8_0...) run on a slower fallback, so they are not offered.
CACHE_LADDER: tuple[tuple[str, str], ...] = (
    ("f16", "f16"),
    ("q8_0", "q8_0"),
    ("q4_0", "q4_0"),
)


def cheapest_cache_for(
    c: MemoryCoefficients, cfg: RunConfig, budget_bytes: int, target_ctx: int
) -> RunConfig | None:
    """The least lossy cache setting that reaches ``target_ctx`` within the budget, or None.

    Walks CACHE_LADDER for the main cache; with MTP on it also tries quantizing the draft
    cache (q8_0 then q4_0) at each step. Flash attention is forced on where a quantized V needs it.
    """
    base = cfg.replace(ctx=target_ctx)
    drafts: tuple[tuple[str, str], ...] = (
        ((cfg.type_k_draft, cfg.type_v_draft), ("q8_0", "q8_0"), ("q4_0", "q4_0"))
        if cfg.mtp
        else ((cfg.type_k_draft, cfg.type_v_draft),)
    )
    for k, v in CACHE_LADDER:
        for dk, dv in drafts:
            trial = base.replace(type_k=k, type_v=v, type_k_draft=dk, type_v_draft=dv)
            if cache_type(v).quantized and trial.flash_attn == "off":
                trial = trial.replace(flash_attn="on")
            try:
                if _fits(c, trial, budget_bytes):
                    return trial
            except InvalidConfig:
                continue
    return None
