"""Predicted vs logged: the estimate of a run next to what llama.cpp's log says it allocated (pure).

Lines the estimate's components up with the logged buffers, device buffers in the total.
Details: docs/internals/base.md#checklog
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawler.base.units import MIB
from crawler.fit import FitEstimate, MemoryCoefficients, RunConfig, estimate
from crawler.fit.estimate import SERVER_AUTO_PARALLEL
from crawler.fit.llamalog import LogConfig, LoggedBuffer, ParsedLog
from crawler.fit.offload import device_estimate, estimate_offload

if TYPE_CHECKING:
    from crawler.gguf.parse import GGUFHeader

__all__ = [
    "TOLERANCE_BYTES",
    "TOLERANCE_PCT",
    "BufferRow",
    "CheckReport",
    "compare",
    "estimate_run",
    "run_config",
]

TOLERANCE_PCT = 3.0
TOLERANCE_BYTES = 256 * MIB


@dataclass(frozen=True, slots=True)
class BufferRow:
    """One buffer: logged and predicted bytes (predicted None where the estimate has no part)."""

    name: str
    device: str
    logged_bytes: int
    predicted_bytes: int | None

    def to_json(self) -> dict[str, Any]:
        """``buffers[]`` item (docs/check-log.md)."""
        return {
            "name": self.name,
            "device": self.device,
            "logged_bytes": self.logged_bytes,
            "predicted_bytes": self.predicted_bytes,
        }


@dataclass(frozen=True, slots=True)
class CheckReport:
    """The comparison ``quants check-log`` prints."""

    config: LogConfig
    run: RunConfig
    buffers: tuple[BufferRow, ...]
    logged_total: int
    predicted_total: int
    notes: tuple[str, ...] = ()
    source: str = "buffers"  # "buffers" (the ... buffer size lines) or "breakdown"
    #: The GGUF the estimate was computed from (a path, URL, or repo/path from the catalog).
    estimated_from: str = ""
    #: Where the total was taken: "GPU" (device buffers) or "host" (a run with no GPU buffer).
    scope: str = "GPU"
    #: Buffers with both a logged and a predicted size in the total.
    n_compared: int = 0

    @property
    def diff_bytes(self) -> int:
        """Predicted minus logged (positive: the estimate is above what llama.cpp allocated)."""
        return self.predicted_total - self.logged_total

    @property
    def diff_pct(self) -> float | None:
        """``diff_bytes`` as a percentage of the logged total."""
        return 100 * self.diff_bytes / self.logged_total if self.logged_total else None

    @property
    def tolerance_bytes(self) -> int:
        """The estimate's tolerance at this size: 3% of the logged total or 256 MiB."""
        return max(int(self.logged_total * TOLERANCE_PCT / 100), TOLERANCE_BYTES)

    @property
    def within_tolerance(self) -> bool | None:
        """Whether the estimate agrees with the log; None when nothing was compared (no buffer
        with both sizes: 0 = 0 is no agreement)."""
        if not self.n_compared or not self.logged_total:
            return None
        return abs(self.diff_bytes) <= self.tolerance_bytes

    def to_json(self) -> dict[str, Any]:
        """``quants check-log --json`` (docs/check-log.md)."""
        c = self.config
        pct = self.diff_pct
        return {
            "model": c.model_path,
            "estimated_from": self.estimated_from,
            "config": {
                "ctx": c.ctx,
                "type_k": self.run.type_k,
                "type_v": self.run.type_v,
                "flash_attn": self.run.flash_attn,
                "n_seq": c.n_seq,
                "ubatch": self.run.ubatch,
                "n_gpu_layers": c.n_gpu_layers,
            },
            "source": self.source,
            "buffers": [b.to_json() for b in self.buffers],
            "total": {
                "logged_bytes": self.logged_total,
                "predicted_bytes": self.predicted_total,
                "diff_bytes": self.diff_bytes,
                "diff_pct": None if pct is None else round(pct, 2),
                "tolerance_bytes": self.tolerance_bytes,
                "within_tolerance": self.within_tolerance,
                "scope": self.scope,
                "n_compared": self.n_compared,
            },
            "notes": list(self.notes),
        }


def run_config(
    cfg: LogConfig,
    c: MemoryCoefficients,
    model_path: str,
    *,
    n_cpu_moe: int | None = None,
    cpu_only: bool = False,
) -> tuple[RunConfig, list[str]]:
    """The estimate's configuration for the logged run, and notes on what it cannot reproduce.

    ``cpu_only``: the log has no GPU buffer at all (a CPU build, or no device): the run is
    estimated as ``-ngl 0``, every weight and cache in host memory.
    """
    notes: list[str] = []
    n_seq = cfg.n_seq or 1
    if cfg.kv_unified and n_seq == SERVER_AUTO_PARALLEL:
        parallel: int | None = None  # llama-server's default: 4 slots, one unified cache
    else:
        parallel = n_seq
        if cfg.kv_unified and n_seq > 1:
            notes.append(f"unified cache with {n_seq} sequences: estimated as {n_seq} streams")
    mtp = cfg.n_contexts >= 2 and c.mtp_available
    if cfg.n_contexts >= 2 and not mtp:
        notes.append("the log has a second (draft) context; only the target is estimated")
    # "offloaded N/M layers": M is llama.cpp's n_layer + 1 slots (the output layer counts), the
    # -ngl of the run is N (src/llama-model.cpp load_tensors); fewer than all is a partial run.
    partial = cfg.n_gpu_layers is not None and cfg.n_layers and cfg.n_gpu_layers < cfg.n_layers
    n_gpu_layers = cfg.n_gpu_layers if partial else None
    if cpu_only:
        n_gpu_layers = 0
        notes.append(
            "no GPU buffer in the log: estimated as a CPU-only run (-ngl 0: weights, cache and"
            " compute in host memory); the total compares host buffers"
        )
    if cfg.n_ctx_train and cfg.ctx and cfg.ctx > cfg.n_ctx_train:
        notes.append(
            f"n_ctx {cfg.ctx} is above the trained context {cfg.n_ctx_train}: llama.cpp allocated"
            f" the cache for {cfg.ctx} (compared here); llama-server caps a slot at"
            f" {cfg.n_ctx_train}"
        )
    ctx = cfg.ctx or 4096
    # --cpu-moe / --n-cpu-moe N keep the experts of blocks 0..N-1 on the host (common/arg.cpp).
    layers = cfg.expert_host_layers
    n_cpu_moe_logged = layers[-1] + 1 if layers else 0
    given = n_cpu_moe
    n_cpu_moe = given if given is not None else n_cpu_moe_logged
    if cfg.cpu_overrides and not layers and given is None:
        notes.append(
            "the run kept tensors on the CPU (--cpu-moe / --n-cpu-moe / -ot), which this log does"
            " not detail: pass the same --cpu-moe or --n-cpu-moe N to check-log"
        )
    cpu_moe = n_cpu_moe > 0 and n_cpu_moe >= c.n_layer
    if layers and list(layers) != list(range(layers[0], n_cpu_moe_logged)):
        notes.append(
            "experts of non-leading blocks are on the host (-ot): estimated as --n-cpu-moe"
        )
    run = RunConfig(
        ctx=ctx,
        type_k=cfg.type_k or "f16",
        type_v=cfg.type_v or "f16",
        flash_attn=cfg.flash_attn or "auto",
        parallel=parallel,
        ubatch=cfg.ubatch or 512,
        batch=cfg.batch or 2048,
        mtp=mtp,
        cpu_moe=cpu_moe,
        n_cpu_moe=0 if cpu_moe else n_cpu_moe,
        model_path=model_path,
        n_gpu_layers=n_gpu_layers,
    )
    return run, notes


def estimate_run(c: MemoryCoefficients, run: RunConfig) -> FitEstimate:
    """The estimate of the logged run: with ``-ngl`` below all layers, the GPU's share
    (crawler.fit.offload.device_estimate)."""
    if run.n_gpu_layers is None:
        return estimate(c, run)
    return device_estimate(c, run, run.n_gpu_layers)


def _predictions(
    c: MemoryCoefficients, est: FitEstimate, *, cpu_only: bool = False
) -> dict[tuple[str, bool], int]:
    """Estimate components by (logged kind, on host).

    With ``-ngl N`` below all layers the host holds the CPU layers' weights and their caches
    (crawler.fit.offload): the host rows get those shares. A CPU-only run (no GPU backend) has
    no pinned CUDA_Host buffer: its compute buffer is the CPU backend's own, estimated as the
    graph's compute buffer (the same allocator sizes the same graph).
    """
    n_seq = est.n_stream if est.config.parallel is not None else SERVER_AUTO_PARALLEL
    contexts = 2 if est.config.mtp else 1
    # src/llama-context.cpp output_reserve: logits of n_outputs_max = n_seq_max rows at f32.
    output = c.n_vocab * 4 * max(1, n_seq) * contexts
    host_kv = host_rs = cpu_compute = 0
    host_model = est.host_bytes - est.host_buffers
    if est.config.n_gpu_layers is not None:
        off = estimate_offload(c, est.config.replace(n_gpu_layers=None), est.config.n_gpu_layers)
        full = off.full
        host_kv = full.kv + full.mtp_kv - off.kv - off.mtp_kv
        host_rs = full.recurrent - off.recurrent
        if off.partial:
            cpu_compute = full.compute  # estimate_offload's CPU backend compute buffer
        host_model = off.host_bytes - full.host_buffers - host_kv - host_rs - cpu_compute
    pred = {
        ("model", False): est.weights,
        ("model", True): host_model,
        ("kv", False): est.kv + est.mtp_kv,
        ("rs", False): est.recurrent,
        ("compute", False): est.compute,
        ("output", True): output,
        ("compute", True): cpu_compute if cpu_only else est.host_buffers - output,
        # memory breakdown rows
        ("context", False): est.kv + est.mtp_kv + est.recurrent,
        ("context", True): host_kv + host_rs,
    }
    if host_kv:
        pred[("kv", True)] = host_kv
    if host_rs:
        pred[("rs", True)] = host_rs
    return pred


def _rows(
    logged: tuple[LoggedBuffer, ...], pred: dict[tuple[str, bool], int]
) -> tuple[list[BufferRow], list[str]]:
    sums: dict[tuple[str, str], int] = defaultdict(int)
    host: dict[str, bool] = {}
    for b in logged:
        if b.kind.startswith("mmproj_"):
            continue
        sums[(b.kind, b.device)] += b.bytes
        host[b.device] = b.on_host
    gpus = [d for d, h in host.items() if not h]
    notes = []
    mmproj = sum(b.bytes for b in logged if b.kind.startswith("mmproj_"))
    if mmproj:
        notes.append(
            f"the multimodal projector's compute buffers ({mmproj / MIB:.2f} MiB) are not estimated"
            " and are left out"
        )
    if len(gpus) > 1:
        notes.append(f"buffers on {len(gpus)} GPUs; the estimate is for one GPU: compare the total")
    rows = []
    used: set[tuple[str, bool]] = set()
    for (kind, device), n in sums.items():
        key = (kind, host[device])
        # The first logged buffer of a (kind, host/GPU) takes the prediction; later ones (a second
        # GPU, CPU beside CPU_Mapped) have none of their own.
        rows.append(BufferRow(kind, device, n, None if key in used else pred.get(key)))
        used.add(key)
    kinds = {b.kind for b in logged}
    if "kv" in kinds and "rs" not in kinds and pred[("rs", False)]:
        rows.append(BufferRow("rs", "-", 0, pred[("rs", False)]))  # predicted, not logged
    return rows, notes


def compare(
    log: ParsedLog,
    c: MemoryCoefficients,
    est: FitEstimate,
    notes: list[str],
    *,
    estimated_from: str = "",
) -> CheckReport:
    """Line the estimate up with the log's buffers (or, without them, its memory breakdown)."""
    logged = log.buffers or log.breakdown
    cpu_only = bool(logged) and all(b.on_host for b in logged)
    pred = _predictions(c, est, cpu_only=cpu_only)
    source = "buffers" if log.buffers else "breakdown"
    rows, more = _rows(logged, pred)
    # A run with GPU buffers is judged on them; one without any, on its host buffers.
    in_scope = [r for r in rows if r.device != "-" and _host_name(r.device) == cpu_only]
    logged_total = sum(r.logged_bytes for r in in_scope)
    predicted_total = sum(
        r.predicted_bytes or 0
        for r in rows
        if (r.device == "-" and not cpu_only)
        or (r.device != "-" and _host_name(r.device) == cpu_only)
    )
    n_compared = sum(1 for r in in_scope if r.predicted_bytes is not None)
    if not n_compared:
        more.append("no logged buffer has a prediction to compare with: no verdict")
    return CheckReport(
        config=log.config,
        run=est.config,
        buffers=tuple(rows),
        logged_total=logged_total,
        predicted_total=predicted_total,
        notes=tuple(notes + more),
        source=source,
        estimated_from=estimated_from,
        scope="host" if cpu_only else "GPU",
        n_compared=n_compared,
    )


def _host_name(device: str) -> bool:
    return LoggedBuffer("", device, 0).on_host


# --- reading a log file, and what it says beyond memory ----------------------------------


def speed_check(
    text: str, coeffs: MemoryCoefficients, run: RunConfig, gpu: str | None, source: str = ""
) -> dict[str, Any] | None:
    """Measured decode speed (and acceptance) of the log's last request, with the estimate
    for the same run on ``gpu`` at the acceptance and the depth the log shows (the mean
    tokens in the cache while it decoded; an empty cache where the log does not say)."""
    import dataclasses

    from crawler.fit.gpus import resolve_gpu
    from crawler.fit.speedlog import parse_timings
    from crawler.ranking.evaluate import speed_inputs
    from crawler.ranking.speed import (
        DEFAULT_ACCEPTANCE,
        estimate_speed,
        gpu_platform,
        per_token_acceptance,
    )

    t = parse_timings(text)
    if t is None:
        return None
    out: dict[str, Any] = {"measured": t.to_json(), "predicted_tok_s": None}
    if gpu is None:
        return out
    g = resolve_gpu(gpu).gpu
    drafting = t.draft_generated > 0
    k = run.spec_draft_n_max if drafting else 0
    a = DEFAULT_ACCEPTANCE
    if drafting and t.mean_len is not None:
        a = per_token_acceptance(t.mean_len, k)
    label = Path(source).name if source else None
    x = speed_inputs(coeffs, run, label=label)
    x = dataclasses.replace(x, mtp=drafting, draft_n_max=k, ctx=t.depth or 0)
    est = estimate_speed(
        x,
        g.bandwidth_gb_s,
        acceptance=a,
        platform=gpu_platform(g.name),
        fp32_tflops=g.fp32_tflops,
    )
    predicted = est.tok_s_at_ctx
    out.update(
        gpu=g.name,
        predicted_tok_s=round(predicted, 1),
        diff_pct=round(100 * (predicted / t.tok_s - 1), 1),
        acceptance_used=round(a, 4) if drafting else None,
        basis=est.basis,
    )
    return out


def parse_log_file(path: Path) -> ParsedLog:
    """A log file parsed as a stream (bounded memory and line length: crawler/fit/llamalog.py)."""
    from crawler.base.errors import UsageError
    from crawler.fit.llamalog import LogError, parse_log, read_log_lines

    try:
        with path.open("rb") as fh:
            if not fh.read(1 << 16).strip():
                raise LogError(f"{path} is empty")
            fh.seek(0)
            return parse_log(read_log_lines(fh))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None


def log_lines(path: Path) -> Iterator[str]:
    from crawler.fit.llamalog import read_log_lines

    with path.open("rb") as fh:
        yield from read_log_lines(fh)


def draft_check(
    text: str | Iterable[str] | None, header: GGUFHeader, source: str
) -> tuple[dict[str, Any], str] | None:
    """The log's measured draft acceptance beside the file's graded MTP reading (JSON, a line);
    None when the log has no draft lines."""
    from crawler.profile.build import build_profile
    from crawler.profile.mtp_grade import draft_acceptance, mtp_grade

    acc = draft_acceptance(text) if text is not None else None
    if acc is None:
        return None
    mtp = build_profile(header, file_name=source.rsplit("/", 1)[-1]).mtp
    grade = mtp_grade(mtp.state, mtp.min_bits)
    line = (
        f"MTP drafting, measured in this log: {acc.rate:.1%} accepted ({acc.accepted} of"
        f" {acc.generated} drafted tokens, {acc.requests} request(s)); head: {grade.reading}"
    )
    return {**acc.to_json(), **grade.to_json()}, line
