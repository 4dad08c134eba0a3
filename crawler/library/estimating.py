"""quants estimate as a library call: one GGUF, one llama-server configuration, one budget.

Orchestration over the pure memory model; the CLI renders EstimateReport.
Details: docs/internals/base.md#estimating
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crawler.base.budget import DEFAULT_HEADROOM_GIB, budget_json, budget_text, usable_bytes
from crawler.base.errors import InvalidConfig, NoSuchFile, TruncatedModel, UsageError
from crawler.base.units import GIB
from crawler.fit import (
    FitEstimate,
    MemoryCoefficients,
    RunConfig,
    cheapest_cache_for,
    check_v_cache,
    command,
    estimate,
    max_ctx,
)
from crawler.fit.devices import DeviceShare, estimate_devices, max_ctx_split, parse_tensor_split
from crawler.fit.gpus import device_set, resolve_gpus
from crawler.fit.setup import Setup, parse_ngl, resolve_setup
from crawler.fit.vision import Projector, projector
from crawler.library.targets import HeaderRead
from crawler.profile.labels import parse_quant_label
from crawler.ranking.commands import llama_server_command
from crawler.ranking.shell import is_safe_argument

__all__ = [
    "EstimateReport",
    "check_options",
    "estimate_report",
    "projector_from_file",
    "target_command",
]


@dataclass(frozen=True, slots=True)
class EstimateReport:
    """What ``quants estimate`` answers (``budget_bytes`` None: no budget was given)."""

    read: HeaderRead
    coefficients: MemoryCoefficients
    config: RunConfig
    estimate: FitEstimate  # device bytes as shown: the GPU's share with -ngl, Metal's on Apple
    command: str
    setup: Setup | None = None  # -ngl below all / a projector
    budget_bytes: int | None = None  # usable bytes: one device's; several: their sum
    vram_bytes: int | None = None  # the memory before the headroom (several GPUs: their sum)
    headroom_bytes: int = 0  # kept free (crawler.base.budget); several GPUs: off the first
    max_ctx: int | None = None  # None: not computed (partial offload keeps the asked context)
    devices: tuple[DeviceShare, ...] = ()
    device_names: tuple[str, ...] = ()
    alternatives: tuple[tuple[str, FitEstimate], ...] = ()
    backend: str | None = None  # "metal" on Apple silicon
    notes: tuple[str, ...] = field(default=())

    @property
    def margin_bytes(self) -> int | None:
        """Budget left (several GPUs: the tightest device's); None without a budget."""
        if self.devices:
            return min(d.margin for d in self.devices)
        if self.budget_bytes is None:
            return None
        return self.budget_bytes - self.estimate.total

    @property
    def budget_line(self) -> str | None:
        """``24.00 GiB - 0.50 headroom = 23.50 GiB`` (None without a budget)."""
        if self.vram_bytes is None:
            return None
        return budget_text(self.vram_bytes, self.headroom_bytes)

    @property
    def fits(self) -> bool | None:
        """Whether it fits (every device); None without a budget."""
        margin = self.margin_bytes
        return None if margin is None else margin >= 0

    def to_json(self) -> dict[str, Any]:
        """``estimate --json`` (docs/estimate.md)."""
        est, cfg = self.estimate, self.config
        data: dict[str, Any] = {
            "source": self.read.source,
            "architecture": self.coefficients.architecture,
            "ctx": est.n_ctx,
            "type_k": cfg.type_k,
            "type_v": cfg.type_v,
            "flash_attn": "on" if est.flash_attn else "off",
            "parallel": cfg.parallel,
            "mtp": cfg.mtp,
            "bytes": est.bytes_dict(),
            "host_bytes": est.host_bytes,
            "command": self.command,
        }
        if self.setup is not None:
            data.update(self.setup.to_json())
        if self.backend is not None:
            data.update(backend=self.backend)
        if self.notes:
            data["note"] = "; ".join(self.notes)
        if self.fits is not None:
            data.update(
                fits=self.fits,
                margin_bytes=self.margin_bytes,
                budget_bytes=self.budget_bytes,
                max_ctx=self.max_ctx,
            )
            if self.vram_bytes is not None:
                data["budget"] = budget_json(self.vram_bytes, self.headroom_bytes)
        if self.devices:
            data["devices"] = [
                {"device": d.index, "name": self.device_names[d.index], "slots": [d.first, d.last],
                 "total_bytes": d.total, "budget_bytes": d.budget, "margin_bytes": d.margin,
                 "fits": d.margin >= 0, "static_bytes": d.static, "compute_bytes": d.compute,
                 "overhead_bytes": d.overhead}
                for d in self.devices
            ]  # fmt: skip
        if self.alternatives:
            data["alternatives"] = [
                {"change": text, "bytes": alt.bytes_dict(), "command": self.command_for(alt.config)}
                for text, alt in self.alternatives
            ]
        return data

    def command_for(self, cfg: RunConfig) -> str:
        """The llama-server command of another configuration of the same file."""
        return target_command(self.read, cfg)


def check_options(
    cfg: RunConfig,
    *,
    n_gpu_layers: str = "all",
    mmproj: str | None = None,
    vram_gib: float | None = None,
    gpus: Sequence[str] = (),
    tensor_split: str | None = None,
    headroom_gib: float = DEFAULT_HEADROOM_GIB,
) -> None:
    """Every check ``quants estimate`` makes that needs no header: cache types, flags, GPU names,
    the budget and its headroom, -ngl, -ts, the projector file. The CLI runs it before reading
    anything from the Hub, so a typo is reported as itself."""
    from crawler.fit import CACHE_TYPES

    for flag, name in (("-ctk", cfg.type_k), ("-ctv", cfg.type_v),
                       ("-ctkd", cfg.type_k_draft), ("-ctvd", cfg.type_v_draft)):  # fmt: skip
        if name not in CACHE_TYPES:
            raise UsageError(
                f"{flag} {name!r}: not a cache type; use one of {', '.join(CACHE_TYPES)}"
            )
    if cfg.flash_attn not in ("on", "off", "auto"):
        raise UsageError(f"-fa {cfg.flash_attn!r}: use on, off or auto")
    check_v_cache(cfg.flash_attn, cfg.type_v, cfg.type_v_draft if cfg.mtp else None)
    if vram_gib is not None and vram_gib <= 0:
        raise UsageError("--vram must be positive")
    matches = resolve_gpus(gpus)
    several = len(matches) > 1 or tensor_split is not None
    if several:
        split = parse_tensor_split(tensor_split) if tensor_split is not None else ()
        ds = device_set(gpus, vram_gib, split)
        usable_bytes(ds.budgets[0], int(headroom_gib * GIB))
    elif vram_gib is not None:
        usable_bytes(int(vram_gib * GIB), int(headroom_gib * GIB))
    elif matches:
        usable_bytes(matches[0].gpu.budget_bytes, int(headroom_gib * GIB))
    ngl = parse_ngl(n_gpu_layers)
    apple = len(matches) == 1 and not several and matches[0].gpu.kind == "apple"
    if (several or apple) and (ngl != "all" or mmproj is not None):
        raise UsageError(
            "-ngl and --mmproj are modelled for one CUDA GPU: leave them out with several GPUs"
            " or Apple silicon"
        )
    if mmproj is not None and not Path(mmproj).is_file():
        raise NoSuchFile(f"--mmproj: no such file: {mmproj!r}")


def estimate_report(
    read: HeaderRead,
    cfg: RunConfig,
    *,
    n_gpu_layers: str = "all",
    mmproj: str | None = None,
    vram_gib: float | None = None,
    gpus: Sequence[str] = (),
    tensor_split: str | None = None,
    headroom_gib: float = DEFAULT_HEADROOM_GIB,
) -> EstimateReport:
    """The estimate of ``read`` run with ``cfg`` (``-ngl``, ``--mmproj``), against ``--vram`` or
    the ``--gpu`` devices (one GPU's memory, Apple's working set, or several GPUs' layer split;
    ``--vram`` wins for one GPU and is per device with ``-ts``), less ``headroom_gib``
    (crawler.base.budget: the rule ``quants search`` applies)."""
    from crawler.fit import coefficients

    header = read.header
    if header.data_truncated:
        have = "?" if header.file_size is None else f"{header.file_size:,}"
        raise TruncatedModel(
            f"{read.file_name} is truncated: it has {have} bytes, its tensors' data needs"
            f" {header.data_end:,}; llama.cpp refuses such a file ('data is not within the file"
            " bounds'), so there is nothing to run"
        )
    check_options(
        cfg, n_gpu_layers=n_gpu_layers, mmproj=mmproj, vram_gib=vram_gib, gpus=gpus,
        tensor_split=tensor_split, headroom_gib=headroom_gib,
    )  # fmt: skip
    coeffs = coefficients(header)
    est = estimate(coeffs, cfg)
    matches = resolve_gpus(gpus)
    several = len(matches) > 1 or tensor_split is not None
    one_gpu = matches[0] if len(matches) == 1 and not several else None
    apple = one_gpu is not None and one_gpu.gpu.kind == "apple"
    headroom = int(headroom_gib * GIB)
    vram: int | None = None
    if vram_gib is not None and not several:
        vram = int(vram_gib * GIB)
    elif one_gpu is not None:
        vram = one_gpu.gpu.budget_bytes
    budget = None if vram is None else usable_bytes(vram, headroom)
    ngl = parse_ngl(n_gpu_layers)
    setup = None
    if ngl != "all" or mmproj is not None:
        proj = projector_from_file(mmproj) if mmproj is not None else None
        setup = resolve_setup(coeffs, cfg, ngl, budget, proj)
    text = target_command(read, cfg)
    report = EstimateReport(read, coeffs, cfg, est, text)
    if setup is not None:
        report = _with_setup(report, setup, mmproj)
    if apple:
        from crawler.fit.apple import NOTE, metal_estimate

        metal = metal_estimate(coeffs, cfg)
        report = _replace(report, estimate=metal, backend="metal", notes=(NOTE,))
    if several:
        return _several(report, gpus, vram_gib, tensor_split, headroom)
    if budget is None:
        return report
    room = budget - (setup.projector.total if setup is not None and setup.projector else 0)
    partial = setup is not None and setup.offload.partial
    # The largest context of the whole-GPU run; a partial offload keeps the asked context.
    largest = None if partial or apple else max_ctx(coeffs, cfg, room)
    if apple:
        from crawler.fit.apple import metal_max_ctx

        largest = metal_max_ctx(coeffs, cfg, budget)
    report = _replace(
        report, budget_bytes=budget, vram_bytes=vram, headroom_bytes=headroom, max_ctx=largest
    )
    if report.fits is False and not apple and not partial:
        report = _replace(report, alternatives=tuple(_what_fits(coeffs, cfg, room)))
    return report


def _with_setup(report: EstimateReport, setup: Setup, mmproj: str | None) -> EstimateReport:
    args = shlex.split(report.command)
    if setup.offload.partial and "-ngl" in args:
        args[args.index("-ngl") + 1] = str(setup.offload.n_gpu_layers)
    if mmproj is not None and is_safe_argument(mmproj):
        args += ["--mmproj", mmproj]
    return _replace(report, setup=setup, estimate=setup.as_fit_estimate(), command=shlex.join(args))


def _several(
    report: EstimateReport,
    gpus: Sequence[str],
    vram_gib: float | None,
    tensor_split: str | None,
    headroom: int,
) -> EstimateReport:
    """Several GPUs: every device's share, the tightest decides; the command carries ``-ts``.
    The headroom comes off the first device, as ``quants search`` takes it."""
    split = parse_tensor_split(tensor_split) if tensor_split is not None else ()
    ds = device_set(gpus, vram_gib, split)
    budgets = (usable_bytes(ds.budgets[0], headroom), *ds.budgets[1:])
    c, cfg = report.coefficients, report.config
    shares = tuple(estimate_devices(c, cfg, ds.split, budgets))
    cap = max(c.n_ctx_train or (1 << 20), cfg.ctx)
    largest = max_ctx_split(c, cfg, ds.split, budgets, limit=cap)
    text = report.command + " -ts " + ",".join(f"{x:g}" for x in ds.split)
    return _replace(
        report,
        budget_bytes=sum(budgets),
        vram_bytes=sum(ds.budgets),
        headroom_bytes=headroom,
        max_ctx=largest,
        devices=shares,
        device_names=ds.names,
        command=text,
        notes=(*report.notes, "several GPUs: modelled from llama.cpp's source, not measured"),
    )


def _replace(report: EstimateReport, **changes: Any) -> EstimateReport:
    import dataclasses

    return dataclasses.replace(report, **changes)


def _what_fits(
    coeffs: MemoryCoefficients, cfg: RunConfig, budget: int
) -> list[tuple[str, FitEstimate]]:
    """Settings that reach the same context within the budget, least lossy first."""
    out: list[tuple[str, FitEstimate]] = []
    best = cheapest_cache_for(coeffs, cfg, budget, cfg.ctx)
    if best is not None:
        change = f"-ctk {best.type_k} -ctv {best.type_v}"
        if best.mtp and (best.type_k_draft, best.type_v_draft) != ("f16", "f16"):
            change += f" -ctkd {best.type_k_draft} -ctvd {best.type_v_draft}"
        out.append((change, estimate(coeffs, best)))
    if cfg.mtp:
        try:
            no_mtp = cheapest_cache_for(coeffs, cfg.replace(mtp=False), budget, cfg.ctx)
        except InvalidConfig:
            no_mtp = None
        if no_mtp is not None:
            text = f"without MTP, -ctk {no_mtp.type_k} -ctv {no_mtp.type_v}"
            out.append((text, estimate(coeffs, no_mtp)))
    if coeffs.expert_bytes and not cfg.cpu_moe:
        moe = cfg.replace(cpu_moe=True, n_cpu_moe=0)
        alt = estimate(coeffs, moe)
        if alt.total <= budget:
            out.append(("--cpu-moe (experts in host memory)", alt))
    return out


def target_command(read: HeaderRead, cfg: RunConfig) -> str:
    """The llama-server command for ``cfg`` that loads this target: a local path as ``-m``, a URL
    as ``-mu`` (common/arg.cpp ``--model-url``), a Hub file as ``-hf``
    (crawler.ranking.commands)."""
    if read.repo_id is not None:
        path = read.shards[0] if read.shards else read.file_name
        label = parse_quant_label(path)
        hub = llama_server_command(
            read.repo_id, path, label.text if label else None, cfg, read.repo_files
        )
        # None: the repo id or path holds a control character no command line carries safely
        # (crawler.ranking.shell); the command then names the model MODEL for the user to fill in.
        return hub if hub is not None else command(cfg.replace(model_path="MODEL"))
    text = command(cfg)
    if read.source.startswith(("http://", "https://")):
        args = shlex.split(text)
        args[args.index("-m")] = "-mu"
        text = shlex.join(args)
    return text


def projector_from_file(path: str) -> Projector:
    """The projector of a local mmproj file (only its header is read)."""
    from crawler.gguf.parse import read_header
    from crawler.library.targets import FileReader

    p = Path(path)
    if not p.is_file():
        raise NoSuchFile(f"--mmproj: no such file: {path!r}")
    reader = FileReader(p)
    try:
        return projector(read_header(reader, file_size=p.stat().st_size, source=str(p)))
    finally:
        reader.close()
