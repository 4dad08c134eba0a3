"""The stable Python API: search, estimate, inspect, compare and check_log as functions whose
answers' to_json() is the command's ``--json`` byte for byte (the CLI calls these same functions).
Options, errors and the Hub look-up of search/compare: docs/api.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawler.base.config import Settings
from crawler.ranking.speed import DEFAULT_ACCEPTANCE
from crawler.schemas import SCHEMA_VERSION, versioned

if TYPE_CHECKING:
    from crawler.catalog.comparison import Comparison
    from crawler.crawl.ondemand import OnDemand
    from crawler.crawl.progress import Progress
    from crawler.gguf.parse import GGUFHeader
    from crawler.library.checklog import CheckReport
    from crawler.library.estimating import EstimateReport
    from crawler.library.search import SearchResult
    from crawler.library.targets import HeaderRead
    from crawler.profile.precision import PrecisionProfile
    from crawler.ranking.launchers import Emitted
    from crawler.ranking.model import Ranked

__all__ = [
    "SCHEMA_VERSION",
    "CheckLogAnswer",
    "CompareAnswer",
    "EstimateAnswer",
    "InspectAnswer",
    "SearchAnswer",
    "check_log",
    "compare",
    "estimate",
    "inspect",
    "search",
]

#: Called with what the on-demand Hub lookup did, before the answer is computed.
LookupHook = Callable[["OnDemand"], None]


def dump_json(document: Any) -> str:
    """The text every ``--json`` prints: two-space indent, non-ASCII escaped (so control
    characters from the Hub never reach a terminal raw), one trailing newline."""
    return json.dumps(document, indent=2, ensure_ascii=True, default=str) + "\n"


class _Answer:
    """What every answer shares: its document with the schema version, and that as text."""

    __slots__ = ()

    def payload(self) -> dict[str, Any]:
        """The command's document without the version field."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document as Python values, ``schema_version`` first."""
        return versioned(self.payload())

    def to_json(self) -> str:
        """The command's ``--json`` output, byte for byte."""
        return dump_json(self.to_dict())


# --- search ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SearchAnswer(_Answer):
    """``quants search``: the ranked quants, the budget used and what was left out."""

    result: SearchResult
    lookup: OnDemand | None = None  # the on-demand Hub lookup (None: offline or no query)

    @property
    def results(self) -> tuple[Ranked, ...]:
        """The ranked quants, best first (each with its estimate and llama-server command)."""
        return tuple(self.result.outcome.results)

    def payload(self) -> dict[str, Any]:
        from crawler.library.search_json import search_json

        return search_json(self.result)

    def launchers(self, fmt: str) -> list[Emitted]:
        """Each result as a launcher config: fmt is llama-swap, ollama or lmstudio
        (crawler.ranking.launchers; each says what its format cannot express)."""
        from crawler.ranking.launchers import emit

        return emit(fmt, self.results)


def search(
    query: str | None = None,
    *,
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
    n_gpu_layers: str | None = None,
    flash_attn: str = "on",
    parallel: int = 1,
    ubatch: int = 512,
    tensor_split: str | None = None,
    vision: bool = False,
    tier: str = "gpu",
    ram: float | None = None,
    sort: str = "quality",
    limit: int = 20,
    db: str | None = None,
    offline: bool = False,
    progress: Progress | None = None,
    on_lookup: LookupHook | None = None,
    watches: bool = False,
    announce: Callable[[str], None] | None = None,
) -> SearchAnswer:
    """The quants that fit ``vram`` GiB (or ``gpu``) less ``headroom`` (default: the setting)
    at ``ctx`` tokens, best first.

    The options are ``quants search``'s (docs/search.md); ``db`` is the catalog URL (default:
    QUANTS_DB or the data directory's SQLite file). Every option is checked before the Hub is
    asked anything. Raises NothingFits when nothing fits. ``watches``: evaluate the saved
    watches after an on-demand look-up that crawled, as after any crawl (the CLI does).
    """
    from crawler.crawl.catalogs import reading
    from crawler.crawl.ondemand import look_up
    from crawler.library.search import search as run_search
    from crawler.library.search_request import checked_request

    settings = Settings.from_env().replace(db_url=db)
    options = dict(  # noqa: C408 (keywords read as the call's own)
        query=query, vram=vram, ctx=ctx, gpu=gpu, headroom=headroom, cache_type_k=cache_type_k,
        cache_type_v=cache_type_v, auto_cache=auto_cache, mtp=mtp,
        spec_draft_n_max=spec_draft_n_max, mtp_acceptance=mtp_acceptance,
        min_attn_bits=min_attn_bits, arch=arch, author=author,
        base=base, label=label, loadable=loadable, cpu_moe=cpu_moe, n_cpu_moe=n_cpu_moe, ram=ram,
        tier=tier, vision=vision, flash_attn=flash_attn, parallel=parallel, ubatch=ubatch,
        n_gpu_layers=n_gpu_layers, tensor_split=tensor_split, sort=sort, limit=limit,
    )  # fmt: skip
    req = checked_request(options, headroom_gib=settings.headroom_gib)
    done = look_up(settings, query, offline, progress, on_lookup, watches, announce)
    with reading(settings.resolved_db_url) as reader:
        result = run_search(reader, req)
    return SearchAnswer(result, done)


# --- estimate --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EstimateAnswer(_Answer):
    """``quants estimate``: the memory of one GGUF under one configuration, and the verdict."""

    report: EstimateReport
    warnings: tuple[str, ...] = ()  # what to know before trusting the numbers (CLI: stderr)

    @property
    def fits(self) -> bool | None:
        """Whether it fits the budget (None: no budget given)."""
        return self.report.fits

    def payload(self) -> dict[str, Any]:
        return self.report.to_json()


def estimate(
    target: str,
    *,
    ctx: int,
    cache_type_k: str = "f16",
    cache_type_v: str = "f16",
    flash_attn: str = "auto",
    parallel: int = 1,
    ubatch: int = 512,
    mtp: bool = False,
    spec_draft_n_max: int = 3,
    cache_type_k_draft: str = "f16",
    cache_type_v_draft: str = "f16",
    cpu_moe: bool = False,
    n_cpu_moe: int = 0,
    n_gpu_layers: str = "all",
    mmproj: str | None = None,
    no_mmproj: bool = False,
    gpu: str | Sequence[str] | None = None,
    tensor_split: str | None = None,
    vram: float | None = None,
    headroom: float | None = None,
    announce: Callable[[str], None] | None = None,
) -> EstimateAnswer:
    """The device memory llama-server needs for ``target`` (a local .gguf, a URL,
    owner/repo/path.gguf or owner/repo:QUANT) at ``ctx`` tokens; with ``vram`` (GiB) or
    ``gpu``, whether it fits within the budget less ``headroom`` (GiB; default: the setting).
    ``parallel`` -1 is llama-server's default (4 unified slots). Every option is checked before
    the first network request; ``announce`` hears a line before any network step starts."""
    from crawler.base.errors import UsageError
    from crawler.fit import RunConfig
    from crawler.fit.notes import estimate_warnings
    from crawler.library.estimating import check_options, estimate_report
    from crawler.library.targets import parse_target, read_target

    settings = Settings.from_env()
    if headroom is None:
        headroom = settings.headroom_gib
    if mmproj is not None and no_mmproj:
        raise UsageError("--mmproj and --no-mmproj exclude each other")
    _check_min("--ctx", ctx, 1)
    _check_min("--parallel", parallel, -1)
    _check_min("--ubatch-size", ubatch, 1)
    _check_min("--spec-draft-n-max", spec_draft_n_max, 0)
    _check_min("--n-cpu-moe", n_cpu_moe, 0)
    cfg = RunConfig(
        ctx=ctx,
        type_k=cache_type_k.lower(),
        type_v=cache_type_v.lower(),
        flash_attn=flash_attn.lower(),
        parallel=None if parallel == -1 else parallel,
        ubatch=ubatch,
        mtp=mtp,
        spec_draft_n_max=spec_draft_n_max,
        type_k_draft=cache_type_k_draft.lower(),
        type_v_draft=cache_type_v_draft.lower(),
        cpu_moe=cpu_moe,
        n_cpu_moe=n_cpu_moe,
    )
    gpus = (gpu,) if isinstance(gpu, str) else tuple(gpu or ())
    check_options(
        cfg, n_gpu_layers=n_gpu_layers, mmproj=mmproj, vram_gib=vram, gpus=gpus,
        tensor_split=tensor_split, headroom_gib=headroom,
    )  # fmt: skip
    parse_target(target, endpoint=settings.hf_endpoint)
    read = read_target(target, settings, announce=announce)
    cfg = cfg.replace(model_path=read.source)
    report = estimate_report(
        read, cfg, n_gpu_layers=n_gpu_layers, mmproj=mmproj, vram_gib=vram, gpus=gpus,
        tensor_split=tensor_split, headroom_gib=headroom,
    )  # fmt: skip
    warnings = tuple(estimate_warnings(read.header, report.coefficients, cfg))
    return EstimateAnswer(report, warnings)


def _check_min(option: str, value: float, least: float) -> None:
    """The bound the CLI's option parser enforces, for callers that skip the parser."""
    from crawler.base.errors import UsageError

    if value < least:
        raise UsageError(f"{option} must be >= {least}, not {value}")


# --- inspect ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InspectAnswer(_Answer):
    """``quants inspect``: which tensors are at which precision, and the verdicts."""

    read: HeaderRead
    profile: PrecisionProfile
    tensors: bool = False  # the document lists every tensor

    def payload(self) -> dict[str, Any]:
        from crawler.profile.mtp_grade import mtp_grade

        r = self.read
        doc = self.profile.to_json(
            source=r.source,
            revision=r.revision,
            size_bytes=r.size_bytes,
            header_bytes=r.header_bytes,
            bytes_fetched=r.bytes_fetched,
            requests=r.requests,
            include_tensors=self.tensors,
        )
        doc["mtp"].update(mtp_grade(self.profile.mtp.state, self.profile.mtp.min_bits).to_json())
        return doc


def inspect(
    target: str, *, tensors: bool = False, announce: Callable[[str], None] | None = None
) -> InspectAnswer:
    """Read the header of ``target`` (as for estimate) and profile its precision; ``announce``
    hears a line before any network step starts."""
    from crawler.library.targets import read_target
    from crawler.profile.build import build_profile

    read = read_target(target, Settings.from_env(), announce=announce)
    profile = build_profile(
        read.header, file_name=read.file_name, repo_id=read.repo_id, repo_files=read.repo_files
    )
    return InspectAnswer(read, profile, tensors)


# --- compare ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CompareAnswer(_Answer):
    """``quants compare``: every quant of one base model, smallest first."""

    comparison: Comparison
    lookup: OnDemand | None = None

    def payload(self) -> dict[str, Any]:
        from crawler.catalog.comparison import comparison_json

        return comparison_json(self.comparison)


def compare(
    query: str,
    *,
    db: str | None = None,
    offline: bool = False,
    progress: Progress | None = None,
    on_lookup: LookupHook | None = None,
    watches: bool = False,
    announce: Callable[[str], None] | None = None,
) -> CompareAnswer:
    """The quants of the base model ``query`` names (fuzzy; several matches: a UsageError);
    ``watches`` as in search."""
    from crawler.catalog.comparison import load_comparison
    from crawler.crawl.catalogs import reading
    from crawler.crawl.ondemand import look_up

    settings = Settings.from_env().replace(db_url=db)
    done = look_up(settings, query, offline, progress, on_lookup, watches, announce)
    with reading(settings.resolved_db_url) as reader:
        comparison = load_comparison(reader, query)
    return CompareAnswer(comparison, done)


# --- check-log -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckLogAnswer(_Answer):
    """``quants check-log``: llama.cpp's logged buffers next to the estimate of the same run."""

    report: CheckReport
    #: The log's measured draft acceptance beside the file's graded MTP reading (None: the log
    #: has no draft lines).
    draft: Mapping[str, Any] | None = None
    draft_line: str | None = None
    #: Measured decode speed of the log's last request, with the estimate on the given GPU.
    speed: Mapping[str, Any] | None = None

    @property
    def within_tolerance(self) -> bool | None:
        """Whether the estimate agrees with the log within the tolerance (None: nothing to
        compare)."""
        return self.report.within_tolerance

    def payload(self) -> dict[str, Any]:
        doc = self.report.to_json()
        if self.draft is not None:
            doc["mtp_draft"] = dict(self.draft)
        doc["speed"] = dict(self.speed) if self.speed is not None else None
        return doc


def check_log(
    log: str | PathLike[str] | None = None,
    *,
    text: str | None = None,
    model: str | None = None,
    cpu_moe: bool = False,
    n_cpu_moe: int | None = None,
    gpu: str | None = None,
    db: str | None = None,
) -> CheckLogAnswer:
    """Compare a llama-server / llama-cli log (a file ``log``, or its ``text``) with the
    estimate of the run it records; ``model`` is the GGUF it ran (default: the path the log
    names, else the catalog's quant of that file name)."""
    from crawler.base.errors import UsageError
    from crawler.fit import coefficients
    from crawler.fit.llamalog import LogError, parse_log
    from crawler.fit.speedlog import timing_lines
    from crawler.library import checklog
    from crawler.library.checklog import compare as compare_log
    from crawler.library.checklog import estimate_run, run_config
    from crawler.library.targets import read_target

    if (log is None) == (text is None):
        raise UsageError("give the log as a file or as text, one of them")
    if n_cpu_moe is not None:
        _check_min("--n-cpu-moe", n_cpu_moe, 0)
    if log is not None:
        parsed = checklog.parse_log_file(Path(log))
    else:
        assert text is not None
        if not text.strip():
            raise LogError("the log text is empty")
        parsed = parse_log(text)
    settings = Settings.from_env().replace(db_url=db)
    target = model or parsed.config.model_path
    if target is None:
        raise UsageError("the log does not name its model; pass --model PATH")
    if model is None and not Path(target).exists():
        stored = _from_catalog(settings.resolved_db_url, target)
        if stored is None:
            raise UsageError(
                f"the model named in the log ({target}) is not on this machine nor (by its file"
                " name) in the catalog; pass --model with its path, URL or owner/repo/file.gguf"
            )
        source, header = stored
    else:
        read = read_target(target, settings)
        source, header = read.source, read.header
    coeffs = coefficients(header)
    moe = (1 << 30) if cpu_moe else n_cpu_moe
    logged = parsed.buffers or parsed.breakdown
    cpu_only = bool(logged) and all(b.on_host for b in logged)
    run, notes = run_config(parsed.config, coeffs, source, n_cpu_moe=moe, cpu_only=cpu_only)
    report = compare_log(parsed, coeffs, estimate_run(coeffs, run), notes, estimated_from=source)
    lines = text if log is None else checklog.log_lines(Path(log))
    draft = checklog.draft_check(lines, header, source)
    timing = text or "" if log is None else timing_lines(checklog.log_lines(Path(log)))
    speed = checklog.speed_check(timing, coeffs, run, gpu, source)
    return CheckLogAnswer(
        report,
        draft=draft[0] if draft else None,
        draft_line=draft[1] if draft else None,
        speed=speed,
    )


def _from_catalog(db_url: str, path: str) -> tuple[str, GGUFHeader] | None:
    """The stored header of the quant whose file name is ``path``'s, if the catalog has one."""
    from crawler.base.errors import CatalogError
    from crawler.catalog.stored_headers import header_by_file_name
    from crawler.crawl.catalogs import reading
    from crawler.profile.build import merge_headers

    try:
        with reading(db_url) as reader:
            found = header_by_file_name(reader, path)
    except CatalogError:
        return None
    if found is None:
        return None
    repo_id, file_path, shards = found
    return f"{repo_id}/{file_path}", merge_headers(shards, source=file_path)
