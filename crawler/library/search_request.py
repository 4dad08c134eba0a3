"""quants search's request: the options by name, their checks, and the budget they give (the
GPUs' memory, split and speed); everything a search checks before it reads the catalog.
Details: docs/internals/base.md#search_request
"""

from __future__ import annotations

import inspect
import math
import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crawler.base.budget import DEFAULT_HEADROOM_GIB, usable_bytes
from crawler.base.errors import UsageError
from crawler.base.units import GIB
from crawler.fit.devices import parse_tensor_split
from crawler.fit.gpus import GPUMatch, device_set, resolve_gpu
from crawler.fit.setup import parse_ngl
from crawler.ranking.model import Budget, Filters, RunSpec
from crawler.ranking.speed import DEFAULT_ACCEPTANCE

__all__ = [
    "COUNT_CAP",
    "SearchRequest",
    "build_request",
    "checked_request",
    "resolve_budget",
    "validate_request",
]


#: A search counts what fits over at most this many candidates (one model's quants are fewer;
#: docs/performance.md has the cost); beyond it the count is a lower bound and says so.
COUNT_CAP = 128


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """Everything ``quants search`` was asked, before the budget is resolved."""

    spec: RunSpec
    filters: Filters
    vram_gib: float | None = None
    gpu: str | None = None  # one GPU (``2x NAME``: two of it)
    headroom_gib: float = DEFAULT_HEADROOM_GIB
    ram_gib: float | None = None
    sort: str = "quality"
    limit: int = 20
    more_gpus: tuple[str, ...] = ()  # further devices (a repeated --gpu)
    tensor_split: tuple[float, ...] = ()  # -ts
    #: Candidates estimated at most to count what fits beyond the shown rows (None: only what
    #: ranking read; saved searches need no count).
    count_cap: int | None = COUNT_CAP


def build_request(
    *,
    query: str | None = None,
    vram: float | None = None,
    ctx: int | None = None,
    gpu: str | Sequence[str] | None = None,
    headroom: float | None = None,
    cache_type_k: str | None = None,
    cache_type_v: str | None = None,
    auto_cache: bool = False,
    mtp: bool | None = None,
    spec_draft_n_max: int | None = None,
    mtp_acceptance: float = DEFAULT_ACCEPTANCE,
    min_attn_bits: float | None = None,
    arch: str | None = None,
    author: str | None = None,
    base: str | None = None,
    label: str | None = None,
    loadable: bool = False,
    cpu_moe: bool = False,
    n_cpu_moe: int = 0,
    ram: float | None = None,
    tier: str = "gpu",
    vision: bool = False,
    flash_attn: str = "on",
    parallel: int = 1,
    ubatch: int = 512,
    n_gpu_layers: str | None = None,
    tensor_split: str | None = None,
    sort: str = "quality",
    limit: int = 20,
) -> SearchRequest:
    """The request for ``quants search``'s options, by their names (the CLI, saved searches
    and ``quants serve``'s ``/api/search`` build it here).

    Without ``cache_type_k/v`` every quant gets the least lossy cache that reaches the context
    (``auto_cache`` is an accepted alias of that default); ``mtp`` None runs the MTP head where it
    is usable and fits, True keeps only quants that run with it, False never drafts
    (crawler.fit.choose). ``n_gpu_layers`` is ``-ngl``: a number pins the layers on the
    GPU, ``auto`` allows partial offload (``tier="partial"``), ``all`` is the default. Several
    GPUs: ``gpu`` as a list or ``2x NAME``, or ``vram`` per device with ``tensor_split``.
    """
    gpus = (gpu,) if isinstance(gpu, str) else tuple(gpu or ())
    pinned = cache_type_k is not None or cache_type_v is not None
    if pinned and auto_cache:
        raise UsageError("--auto-cache picks the cache types; leave out --cache-type-k/-v")
    ngl = parse_ngl(n_gpu_layers) if n_gpu_layers is not None else "all"
    if ngl == "auto":
        tier = "partial"
    if isinstance(ngl, int) and tier != "gpu":
        raise UsageError("-ngl N pins the layers on the GPU; leave out --tier")
    spec = RunSpec(
        ctx=ctx,
        type_k=cache_type_k or "f16",
        type_v=cache_type_v or "f16",
        auto_cache=not pinned,
        mtp=mtp is True,
        mtp_auto=mtp is None,
        tier=tier,
        vision=vision,
        # None: chosen per result by predicted tok/s; memory is first estimated at llama.cpp's
        # default of 3 and again at the chosen length (crawler.ranking.evaluate.finish)
        spec_draft_n_max=3 if spec_draft_n_max is None else spec_draft_n_max,
        spec_draft_auto=spec_draft_n_max is None,
        mtp_acceptance=mtp_acceptance,
        cpu_moe=cpu_moe,
        flash_attn=flash_attn,
        parallel=None if parallel == -1 else parallel,
        ubatch=ubatch,
        n_cpu_moe=n_cpu_moe,
        n_gpu_layers=ngl if isinstance(ngl, int) else None,
    )
    filters = Filters(
        query=query,
        mtp=mtp is True,
        min_attn_bits=min_attn_bits,
        arch=arch,
        author=author,
        base=base,
        label=label,
        loadable=loadable,
        vision=vision,
    )
    return SearchRequest(
        spec=spec,
        filters=filters,
        vram_gib=vram,
        gpu=gpus[0] if gpus else None,
        headroom_gib=DEFAULT_HEADROOM_GIB if headroom is None else headroom,
        ram_gib=ram,
        sort=sort,
        limit=limit,
        more_gpus=gpus[1:],
        tensor_split=parse_tensor_split(tensor_split) if tensor_split else (),
    )


#: The bounds the command line's parser enforces, for callers that skip it: option name ->
#: (flag, least, most).
_BOUNDS: dict[str, tuple[str, float, float]] = {
    "vram": ("--vram", 0.1, math.inf), "ctx": ("--ctx", 1, math.inf),
    "headroom": ("--headroom", 0, math.inf),
    "spec_draft_n_max": ("--spec-draft-n-max", 0, math.inf),
    "n_cpu_moe": ("--n-cpu-moe", 0, math.inf), "parallel": ("--parallel", -1, math.inf),
    "ubatch": ("--ubatch-size", 1, math.inf), "ram": ("--ram", 0.1, math.inf),
    "limit": ("--limit", 1, math.inf), "mtp_acceptance": ("--mtp-acceptance", 0, 1),
}  # fmt: skip


def checked_request(options: Mapping[str, Any], *, headroom_gib: float) -> SearchRequest:
    """The request for ``quants search``'s options by name (build_request's parameters), checked
    as the command line checks them: an unknown name, a value of the wrong type or out of its
    bounds is a UsageError, then validate_request. ``api.search`` and a saved watch (a JSON
    object of these options) both come here; without ``headroom``, ``headroom_gib``."""
    hints = typing.get_type_hints(build_request)
    known = inspect.signature(build_request).parameters
    values = dict(options)
    if values.get("headroom") is None:
        values["headroom"] = headroom_gib
    for name, value in values.items():
        if name not in known:
            raise UsageError(f"unknown search option {name!r}; known: {', '.join(known)}")
        if not _has_type(value, hints[name]):
            raise UsageError(f"search option {name}: {value!r} is not {hints[name]}")
        flag, least, most = _BOUNDS.get(name, ("", -math.inf, math.inf))
        if isinstance(value, float) and not math.isfinite(value):
            raise UsageError(f"{flag or name} must be a finite number, not {value}")
        if isinstance(value, int | float) and not least <= value <= most:
            bound = f">= {least:g}" if most == math.inf else f"between {least:g} and {most:g}"
            raise UsageError(f"{flag} must be {bound}, not {value}")
    req = build_request(**values)
    validate_request(req)
    return req


def _has_type(value: Any, hint: Any) -> bool:
    """``value`` is one of the types ``hint`` names (a JSON number is a float; a bool is no
    number)."""
    for kind in typing.get_args(hint) or (hint,):
        origin = typing.get_origin(kind) or kind
        if value is None and kind is type(None):
            return True
        if origin is bool and isinstance(value, bool):
            return True
        if isinstance(value, bool):
            continue
        if origin is int and isinstance(value, int):
            return True
        if origin is float and isinstance(value, int | float):
            return True
        if origin is str and isinstance(value, str):
            return True
        if origin is Sequence and isinstance(value, list | tuple):
            return all(isinstance(item, str) for item in value)
    return False


def resolve_budget(req: SearchRequest) -> tuple[Budget, GPUMatch | None]:
    """Budget from ``--vram`` or the ``--gpu`` row (``--vram`` wins; the GPU still gives speed)."""
    sp = req.spec
    host_side = sp.cpu_moe or sp.n_cpu_moe or sp.tier != "gpu" or sp.n_gpu_layers is not None
    if req.ram_gib is not None and not host_side:
        raise UsageError(
            "--ram only applies when something runs in host memory"
            " (--cpu-moe, --n-cpu-moe, -ngl, --tier experts_cpu|partial)"
        )
    names = [g for g in (req.gpu, *req.more_gpus) if g]
    if len(names) > 1 or req.tensor_split or (names and _COUNT.match(names[0])):
        return _several_gpus(req, names)
    match = resolve_gpu(req.gpu) if req.gpu else None
    if req.vram_gib is None and match is None:
        raise UsageError("give --vram GIB or --gpu NAME")
    if req.vram_gib is not None:
        vram_gib = req.vram_gib
    else:
        assert match is not None
        vram_gib = match.gpu.budget_bytes / GIB
    return (
        Budget.from_gib(
            vram_gib,
            headroom_gib=req.headroom_gib,
            ram_gib=req.ram_gib,
            bandwidth_gb_s=match.gpu.bandwidth_gb_s if match else None,
            gpu_name=match.gpu.name if match else None,
            fp32_tflops=match.gpu.fp32_tflops if match else None,
        ),
        match,
    )


#: ``2x 3090``: a count of devices before a GPU name (crawler.fit.gpus.resolve_gpus).
_COUNT = re.compile(r"\s*\d+\s*x\s", re.IGNORECASE)


def _several_gpus(req: SearchRequest, names: list[str]) -> tuple[Budget, GPUMatch | None]:
    """The budget of llama.cpp's layer split over several GPUs (crawler.fit.devices): per
    device its memory (the headroom taken from the first), split by ``-ts`` or, as llama.cpp
    does without it, by each device's memory."""
    sp = req.spec
    if sp.tier != "gpu" or sp.n_gpu_layers is not None or sp.vision:
        raise UsageError(
            "several GPUs: every layer on the GPUs only (--tier partial, -ngl and --vision are"
            " modelled for one GPU)"
        )
    ds = device_set(names, req.vram_gib, req.tensor_split)
    budgets = ds.budgets
    headroom = int(req.headroom_gib * GIB)
    usable_bytes(budgets[0], headroom)  # the headroom comes off the first GPU
    budget = Budget(
        vram_bytes=sum(budgets),
        headroom_bytes=headroom,
        ram_bytes=None if req.ram_gib is None else int(req.ram_gib * GIB),
        bandwidth_gb_s=ds.bandwidth_gb_s,
        gpu_name=" + ".join(ds.names),
        devices=(budgets[0] - headroom, *budgets[1:]),
        split=ds.split,
    )
    return budget, ds.matches[0] if ds.matches else None


def validate_request(req: SearchRequest) -> tuple[Budget, GPUMatch | None, RunSpec]:
    """Every check a search makes that needs no catalog and no network: the GPU names, the
    budget and headroom, the run's flags. The CLI calls it before looking anything up on the
    Hub, so a typo is reported as itself, also when the Hub is unreachable."""
    from crawler.ranking.model import SORT_KEYS

    if req.sort not in SORT_KEYS:
        raise UsageError(f"--sort {req.sort!r}: use one of {', '.join(SORT_KEYS)}")
    budget, match = resolve_budget(req)
    spec = req.spec.validated()
    if req.sort == "speed" and budget.bandwidth_gb_s is None:
        raise UsageError("--sort speed needs --gpu NAME (the speed estimate uses its bandwidth)")
    if req.spec.auto_cache and (req.spec.type_k != "f16" or req.spec.type_v != "f16"):
        raise UsageError("--auto-cache picks the cache types; leave out --cache-type-k/-v")
    return budget, match, spec
