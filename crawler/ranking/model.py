"""The ranking's model (pure: no I/O): what a search asks for and what it is given and answers.

Frozen dataclasses, so ranking is tested without a database.
Details: docs/internals/ranking.md#model
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from crawler.base.budget import DEFAULT_HEADROOM_GIB, usable_bytes
from crawler.base.errors import UsageError
from crawler.base.units import GIB
from crawler.fit import CACHE_TYPES, FitEstimate, MemoryCoefficients, RunConfig, check_v_cache
from crawler.fit.devices import DeviceShare
from crawler.fit.tiers import TIERS
from crawler.profile.groups import GroupStats
from crawler.profile.measured import MeasuredValue
from crawler.ranking.quality import QualityEstimate
from crawler.ranking.query import QueryMatcher
from crawler.ranking.speed import DEFAULT_ACCEPTANCE, SpeedEstimate

__all__ = [
    "BOUNDED_SORTS",
    "DEFAULT_HEADROOM_GIB",
    "EARLY_STOP_SORTS",
    "GIB",
    "MIN_CTX",
    "SORT_KEYS",
    "TIE_BREAKS",
    "Budget",
    "Candidate",
    "Filters",
    "Ranked",
    "RunSpec",
    "SearchOutcome",
]

#: Without ``--ctx``, a quant "fits" when at least this context fits: llama.cpp's own ``--fit-ctx``
#: default minimum (common/common.h, llama.cpp 0c1e57098).
MIN_CTX = 4096
SORT_KEYS = ("quality", "speed", "size", "margin", "ctx", "downloads", "updated")
#: Sort keys whose value is known before the memory estimate (quality comes from the profile).
#: With these, candidates are estimated best-first and ranking stops once ``limit`` results fit
#: and no candidate left can rank higher: most of a large catalog is never estimated.
EARLY_STOP_SORTS = ("quality", "size", "downloads", "updated")
#: Sort keys known only after the estimate, for which the catalog streams candidates by an upper
#: bound of the value (``Candidate.bound_hint``), then tie-breaks (pre_key): ranking
#: stops once ``limit`` results fit and the next candidate's (bound, tie-breaks) rank below the
#: last result's (value, tie-breaks), since nothing after it can do better.
BOUNDED_SORTS = ("speed", "margin", "ctx")
#: After the primary key, ties are broken by these, in order (then repo_id, path ascending).
TIE_BREAKS = ("quality", "size", "downloads", "speed")
#: Mask bytes per context token of the FA-on compute buffer at ubatch 512 (llamacpp-cuda-oracle.md
#: section 3.1: ``n_ctx * ubatch * 2``): part of the SQL prefilter's lower bound.


@dataclass(frozen=True, slots=True)
class Budget:
    """Device memory for one search: ``vram_bytes - headroom_bytes`` is what may be used."""

    vram_bytes: int
    headroom_bytes: int = int(DEFAULT_HEADROOM_GIB * GIB)
    ram_bytes: int | None = None  # host memory for --cpu-moe
    bandwidth_gb_s: float | None = None  # for the speed estimate (from --gpu)
    gpu_name: str | None = None
    fp32_tflops: float | None = None  # the GPU's compute, for attention at depth (from --gpu)
    #: Several GPUs (llama.cpp's layer split): each device's usable bytes (the headroom taken
    #: from the first) and the ``-ts`` proportions; empty for one GPU.
    devices: tuple[int, ...] = ()
    split: tuple[float, ...] = ()

    @property
    def device_bytes(self) -> int:
        """The bytes a quant's estimate may total."""
        return self.vram_bytes - self.headroom_bytes

    @classmethod
    def from_gib(
        cls,
        vram_gib: float,
        *,
        headroom_gib: float = DEFAULT_HEADROOM_GIB,
        ram_gib: float | None = None,
        bandwidth_gb_s: float | None = None,
        gpu_name: str | None = None,
        fp32_tflops: float | None = None,
    ) -> Budget:
        """Build from GiB figures (the one place GiB become bytes)."""
        if vram_gib <= 0:
            raise UsageError("--vram must be positive")
        usable_bytes(int(vram_gib * GIB), int(headroom_gib * GIB))
        return cls(
            vram_bytes=int(vram_gib * GIB),
            headroom_bytes=int(headroom_gib * GIB),
            ram_bytes=None if ram_gib is None else int(ram_gib * GIB),
            bandwidth_gb_s=bandwidth_gb_s,
            gpu_name=gpu_name,
            fp32_tflops=fp32_tflops,
        )


@dataclass(frozen=True, slots=True)
class Candidate:
    """A quant as ranking sees it: catalog columns, tensor groups and memory coefficients."""

    quant_id: int
    repo_id: str
    path: str
    size_bytes: int
    coefficients: MemoryCoefficients
    quant_label: str | None = None
    architecture: str | None = None
    base_model: str | None = None
    author: str | None = None
    n_params: int | None = None
    mtp_present: bool | None = None
    mtp_state: str | None = None
    mtp_preserved: bool | None = None
    mtp_min_bits: float | None = None
    attn_min_bits: float | None = None
    attn_preserved: bool | None = None
    loadable_by_mainline: bool | None = None
    dynamic: bool | None = None
    downloads: int | None = None
    likes: int | None = None
    last_modified: datetime | None = None
    groups: tuple[GroupStats, ...] = ()
    #: Other model paths of the same repo, to tell whether ``-hf repo:LABEL`` picks this file.
    sibling_paths: tuple[str, ...] = ()
    #: The quality score computed by the catalog (``quality.score_from_sums`` over SQL sums)
    #: when ``groups`` were not loaded; ranking orders by it before estimating.
    quality_hint: float | None = None
    #: For BOUNDED_SORTS: an upper bound of this candidate's sort value (tok/s, margin,
    #: max ctx) from the catalog, which streams candidates in that bound's order.
    bound_hint: float | None = None
    #: With ``--vision``: bytes of the repo's smallest projector file (None: it has none).
    projector_bytes: int | None = None
    #: Where the analysis came from (``quants.source``): None = this catalog's own crawl.
    source: str | None = None
    source_revision: str | None = None

    def group(self, name: str) -> GroupStats | None:
        """The named group, if the profile has it."""
        for g in self.groups:
            if g.name == name:
                return g
        return None


@dataclass(frozen=True, slots=True)
class RunSpec:
    """The llama-server configuration asked for (one per search, resolved per candidate)."""

    ctx: int | None = None  # None: show each candidate's largest context
    type_k: str = "f16"
    type_v: str = "f16"
    auto_cache: bool = False  # per candidate, the least lossy cache that reaches ctx
    mtp: bool = False  # --mtp: only quants that run with their MTP head, and run it
    mtp_auto: bool = False  # MTP on where the quant has a usable head and it fits (fit/choose.py)
    tier: str = "gpu"  # highest tier allowed: gpu | experts_cpu | partial (crawler/fit/tiers.py)
    vision: bool = False  # with the repo's vision projector (crawler/fit/vision.py)
    spec_draft_n_max: int = 3
    #: Choose --spec-draft-n-max per result by predicted tok/s
    #: (crawler.ranking.speed.DRAFT_N_CHOICES).
    spec_draft_auto: bool = False
    #: Per-token MTP acceptance the speed estimate assumes
    #: (crawler.ranking.speed.DEFAULT_ACCEPTANCE).
    mtp_acceptance: float = DEFAULT_ACCEPTANCE
    cpu_moe: bool = False
    #: llama.cpp's own options, as ``-fa``, ``-np``, ``-ub``, ``--n-cpu-moe`` and ``-ngl N``
    #: (None: every layer on the GPU, or the tier's choice) mean them.
    flash_attn: str = "on"
    parallel: int | None = 1  # None: llama-server's default (-np -1: 4 slots, unified cache)
    ubatch: int = 512
    n_cpu_moe: int = 0
    n_gpu_layers: int | None = None

    def validated(self) -> RunSpec:
        """Raise UsageError for values llama.cpp's argument parser would refuse."""
        if self.ctx is not None and self.ctx < 1:
            raise UsageError("--ctx must be at least 1")
        for name in (self.type_k, self.type_v):
            if name.lower() not in CACHE_TYPES:
                raise UsageError(f"unknown cache type {name!r}; one of {', '.join(CACHE_TYPES)}")
        if self.spec_draft_n_max < 0:
            raise UsageError("--spec-draft-n-max must be >= 0")
        if not 0.0 <= self.mtp_acceptance <= 1.0:
            raise UsageError("--mtp-acceptance must be between 0 and 1")
        if self.tier not in TIERS:
            raise UsageError(f"--tier must be one of {', '.join(TIERS)}, not {self.tier!r}")
        if self.flash_attn not in ("on", "off", "auto"):
            raise UsageError(f"-fa must be on, off or auto, not {self.flash_attn!r}")
        check_v_cache(self.flash_attn, self.type_v.lower())  # as estimate checks it
        if (self.parallel is not None and self.parallel < 1) or self.ubatch < 1:
            raise UsageError("-np must be -1 or at least 1, -ub at least 1")
        if self.n_cpu_moe < 0:
            raise UsageError("--n-cpu-moe must be at least 0")
        if self.n_gpu_layers is not None and self.n_gpu_layers < 0:
            raise UsageError("-ngl takes a number >= 0, 'all' or 'auto'")
        return self

    def base_config(self) -> RunConfig:
        """The RunConfig before per-candidate choices (cache ladder, context)."""
        return RunConfig(
            ctx=self.ctx or MIN_CTX,
            type_k=self.type_k.lower(),
            type_v=self.type_v.lower(),
            flash_attn=self.flash_attn,
            parallel=self.parallel,
            ubatch=self.ubatch,
            mtp=self.mtp,
            spec_draft_n_max=self.spec_draft_n_max,
            cpu_moe=self.cpu_moe,
            n_cpu_moe=self.n_cpu_moe,
        )


def _ci_equal(a: str | None, b: str) -> bool:
    return a is not None and a.lower() == b.lower()


@dataclass(frozen=True, slots=True)
class Filters:
    """Search filters. ``accepts`` is the reference; the catalog pushes the same tests into SQL."""

    query: str | None = None
    mtp: bool = False  # MTP head present (in the file) and preserved (>= 6 bits)
    min_attn_bits: float | None = None
    arch: str | None = None
    author: str | None = None
    base: str | None = None
    label: str | None = None
    loadable: bool = False
    vision: bool = False  # the repo has a vision projector (checked in SQL and at evaluation)
    _matcher: QueryMatcher | None = field(default=None, compare=False, repr=False)

    def matcher(self) -> QueryMatcher | None:
        """The (cached) query matcher, or None without a query."""
        if not self.query:
            return None
        if self._matcher is None or self._matcher.query != self.query:  # built once per Filters
            object.__setattr__(self, "_matcher", QueryMatcher(self.query))
        return self._matcher

    def accepts(self, c: Candidate) -> bool:
        """True when ``c`` passes every filter (query included)."""
        if self.mtp and not (c.mtp_present and c.mtp_preserved and c.coefficients.mtp_available):
            return False
        if self.min_attn_bits is not None and (
            c.attn_min_bits is None or c.attn_min_bits < self.min_attn_bits
        ):
            return False
        if self.arch and not _ci_equal(c.architecture, self.arch):
            return False
        if self.author and not _ci_equal(c.author, self.author):
            return False
        if self.base and not _base_matches(c.base_model, self.base):
            return False
        if self.label and not _ci_equal(c.quant_label, self.label):
            return False
        if self.loadable and c.loadable_by_mainline is not True:
            return False
        m = self.matcher()
        return m is None or m.matches_names(
            c.repo_id, c.base_model, c.path, c.quant_label, c.architecture
        )


def _base_matches(base_model: str | None, wanted: str) -> bool:
    """``--base`` matches the id exactly or its name after the owner (case-insensitive)."""
    if base_model is None:
        return False
    b, w = base_model.lower(), wanted.lower()
    return b == w or b.endswith("/" + w)


#: The quant's two MTP verdicts that crawler.ranking.evaluate.mtp_usable reads, as SQL over the
#: quants ``q``: a head --mtp or MTP auto may run (the third condition, mtp_available, is the
#: memory model's).
HEAD_MAY_DRAFT_SQL = "q.mtp_present = TRUE AND q.mtp_preserved = TRUE"


def mtp_by_speed(spec: RunSpec, budget: Budget) -> bool:
    """Whether MTP auto weighs each quant's head by its speed estimate
    (crawler.ranking.evaluate.head_declined): MTP auto with the GPU's bandwidth. The head's
    choice then reads the speed inputs, so the copy classes hold them."""
    return spec.mtp_auto and budget.bandwidth_gb_s is not None


@dataclass(frozen=True, slots=True)
class Ranked:
    """One result: the candidate, the configuration that fits, and the evidence."""

    rank: int
    candidate: Candidate
    config: RunConfig
    estimate: FitEstimate
    margin_bytes: int  # several GPUs: the tightest device's
    max_ctx: int | None
    quality: QualityEstimate | None
    speed: SpeedEstimate | None
    command: str | None  # llama-server (None: no safe command: crawler.ranking.shell)
    ollama: str | None = None  # equivalent, where Ollama can express the configuration
    lm_studio: str | None = None
    devices: tuple[DeviceShare, ...] = ()  # several GPUs: each device's share
    #: Quality the repo publishes for this file (crawler/profile/measured.py), shown beside the
    #: estimate.
    measured: tuple[MeasuredValue, ...] = ()
    #: MTP auto left the head off although it fits: its predicted speed-up (below 1) at the
    #: search's acceptance (crawler.ranking.evaluate.head_declined). None: not declined.
    mtp_declined: float | None = None


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    """Results plus what was left out and why (for the 'nothing fits' hint)."""

    results: tuple[Ranked, ...]
    considered: int  # candidates that passed the filters
    fitting: int  # of those, how many fit
    unknown_memory: int  # memory rules not modelled (status "unknown")
    invalid_config: int  # llama.cpp would refuse the configuration for this file
    too_big: int  # estimated total above the budget
    smallest_total: int | None  # the smallest estimate among the too-big ones
    #: Candidates never estimated because none of them could rank above the results
    #: (EARLY_STOP_SORTS); ``fitting`` and ``too_big`` then count the estimated ones.
    unevaluated: int = 0
