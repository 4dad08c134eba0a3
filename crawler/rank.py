"""Ranking (pure: no I/O): which quants fit a memory budget at a context, and in which order.

Inputs are frozen dataclasses (:class:`Candidate`, :class:`Budget`, :class:`RunSpec`,
:class:`Filters`); the catalog's read path (``crawler.catalog.candidates``) builds them. For each
candidate the exact memory estimate of :mod:`crawler.fit` decides whether it fits; quality and
speed come from :mod:`crawler.quality` and :mod:`crawler.speed`.

Sort keys (``SORT_KEYS``), best first; ties broken by the next entries of :data:`TIE_BREAKS`, and
finally by ``repo_id`` then ``path`` (ascending), so the order is total and stable:

* ``quality``: quality score, high first · ``speed``: estimated tok/s, high first
* ``size``: file size, large first (the biggest quant that fits) · ``margin``: free memory, high
  first · ``ctx``: largest context that fits, high first · ``downloads``: repo downloads, high
  first · ``updated``: repo last modified, recent first. Unknown values sort last.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from crawler.errors import EstimateError, UsageError
from crawler.fit import (
    CACHE_TYPES,
    FitEstimate,
    MemoryCoefficients,
    RunConfig,
    cache_type,
    estimate,
    max_ctx,
)
from crawler.fit.cuda import (
    CUDA_CONTEXT_BYTES,
    LAZY_KERNELS_BYTES,
    PAGE_ROUNDING_BYTES,
    RUNTIME_FLOOR_BYTES,
    context_floor_per_ubatch,
)
from crawler.launch import llama_server_command, lmstudio_command, ollama_command
from crawler.quality import GroupPrecision, QualityEstimate, QualityInputs, estimate_quality
from crawler.query import QueryMatcher
from crawler.speed import SpeedEstimate, SpeedInputs, estimate_speed

__all__ = [
    "DEFAULT_HEADROOM_GIB",
    "MIN_CTX",
    "SORT_KEYS",
    "TIE_BREAKS",
    "Budget",
    "Candidate",
    "Filters",
    "GroupStats",
    "Ranked",
    "RunSpec",
    "SearchOutcome",
    "lower_bound_bytes",
    "rank_candidates",
]

GIB = 1024**3
#: Memory left free for everything that is not llama.cpp: the desktop/compositor on the same GPU,
#: a browser. The estimate already includes the CUDA context and llama.cpp's runtime buffers.
DEFAULT_HEADROOM_GIB = 0.5
#: Without ``--ctx``, a quant "fits" when at least this context fits: llama.cpp's own ``--fit-ctx``
#: default minimum (common/common.h, llama.cpp 0c1e57098).
MIN_CTX = 4096
SORT_KEYS = ("quality", "speed", "size", "margin", "ctx", "downloads", "updated")
#: After the primary key, ties are broken by these, in order (then repo_id, path ascending).
TIE_BREAKS = ("quality", "size", "downloads", "speed")
#: Mask bytes per context token of the FA-on compute buffer at ubatch 512 (llamacpp-cuda-oracle.md
#: section 3.1: ``n_ctx * ubatch * 2``): part of the SQL prefilter's lower bound.
_MASK_BYTES_PER_TOKEN = 512 * 2


@dataclass(frozen=True, slots=True)
class Budget:
    """Device memory for one search: ``vram_bytes - headroom_bytes`` is what may be used."""

    vram_bytes: int
    headroom_bytes: int = int(DEFAULT_HEADROOM_GIB * GIB)
    ram_bytes: int | None = None  # host memory for --cpu-moe
    bandwidth_gb_s: float | None = None  # for the speed estimate (from --gpu)
    gpu_name: str | None = None

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
    ) -> Budget:
        """Build from GiB figures (the one place GiB become bytes)."""
        if vram_gib <= 0:
            raise UsageError("--vram must be positive")
        if headroom_gib < 0 or headroom_gib >= vram_gib:
            raise UsageError("--headroom must be >= 0 and smaller than the VRAM")
        return cls(
            vram_bytes=int(vram_gib * GIB),
            headroom_bytes=int(headroom_gib * GIB),
            ram_bytes=None if ram_gib is None else int(ram_gib * GIB),
            bandwidth_gb_s=bandwidth_gb_s,
            gpu_name=gpu_name,
        )


@dataclass(frozen=True, slots=True)
class GroupStats:
    """One coarse tensor group of a quant (``v_tensor_groups``)."""

    name: str
    n_params: int
    n_bytes: int
    bpw: float | None = None
    min_bits: float | None = None
    max_bits: float | None = None


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
    #: For :data:`BOUNDED_SORTS`: an upper bound of this candidate's sort value (tok/s, margin,
    #: max ctx) from the catalog, which streams candidates in that bound's order.
    bound_hint: float | None = None
    #: With ``--vision``: bytes of the repo's smallest projector file (None: it has none).
    projector_bytes: int | None = None

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
    cpu_moe: bool = False

    def validated(self) -> RunSpec:
        """Raise UsageError for values llama.cpp's argument parser would refuse."""
        if self.ctx is not None and self.ctx < 1:
            raise UsageError("--ctx must be at least 1")
        for name in (self.type_k, self.type_v):
            if name.lower() not in CACHE_TYPES:
                raise UsageError(f"unknown cache type {name!r}; one of {', '.join(CACHE_TYPES)}")
        if self.spec_draft_n_max < 0:
            raise UsageError("--spec-draft-n-max must be >= 0")
        from crawler.fit.tiers import TIERS

        if self.tier not in TIERS:
            raise UsageError(f"--tier must be one of {', '.join(TIERS)}, not {self.tier!r}")
        return self

    def base_config(self) -> RunConfig:
        """The RunConfig before per-candidate choices (cache ladder, context)."""
        return RunConfig(
            ctx=self.ctx or MIN_CTX,
            type_k=self.type_k.lower(),
            type_v=self.type_v.lower(),
            flash_attn="on",
            parallel=1,
            mtp=self.mtp,
            spec_draft_n_max=self.spec_draft_n_max,
            cpu_moe=self.cpu_moe,
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


@dataclass(frozen=True, slots=True)
class Ranked:
    """One result: the candidate, the configuration that fits, and the evidence."""

    rank: int
    candidate: Candidate
    config: RunConfig
    estimate: FitEstimate
    margin_bytes: int
    max_ctx: int | None
    quality: QualityEstimate | None
    speed: SpeedEstimate | None
    command: str  # llama-server
    ollama: str | None = None  # equivalent, where Ollama can express the configuration
    lm_studio: str | None = None


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
    #: (:data:`EARLY_STOP_SORTS`); ``fitting`` and ``too_big`` then count the estimated ones.
    unevaluated: int = 0


def lower_bound_bytes(c: MemoryCoefficients, spec: RunSpec) -> int:
    """A lower bound of ``estimate(c, cfg).total`` for any config ``spec`` can resolve to.

    Built only from the catalog's scalar columns, so SQL can apply the same bound; a quant above it
    cannot fit, one below it gets the exact estimate. Terms: weights (experts unless --cpu-moe,
    the MTP block and its draft KV cache with --mtp), KV per token at the cheapest cache type
    allowed, the fixed cache bytes, the compute and runtime floor per ubatch token
    (:func:`crawler.fit.cuda.context_floor_per_ubatch`), and the constants: CUDA context, lazily
    loaded kernels, page rounding, the runtime's smallest pool and the FA mask.
    """
    t = prefilter_terms(spec)
    if spec.tier == "partial":
        # -ngl 0 keeps no weights or caches on the GPU: only the compute floor and constants.
        return context_floor_per_ubatch(c) * t.ubatch + t.constant
    experts_on_gpu = not spec.cpu_moe and spec.tier == "gpu"
    total = c.weights_bytes + (c.expert_bytes if experts_on_gpu else 0)
    if spec.mtp:
        total += c.mtp_weights_bytes + int(c.mtp_kv_bytes_per_token_f16 * t.ctx * t.mtp_kv_ratio)
    total += int(c.kv_bytes_per_token_f16 * t.ctx * t.kv_ratio)
    total += int(c.fixed_bytes_f16 * t.fixed_ratio)
    total += context_floor_per_ubatch(c) * t.ubatch
    return total + t.constant


@dataclass(frozen=True, slots=True)
class BoundTerms:
    """The per-search factors of :func:`lower_bound_bytes` (the catalog's SQL applies them)."""

    ctx: int
    kv_ratio: float  # bytes per element of the cheapest allowed cache type / f16's 2
    fixed_ratio: float  # the same for the context-independent cache bytes, at most 1
    mtp_kv_ratio: float  # the cheapest allowed MTP draft cache type / f16 (0 without --mtp)
    ubatch: int  # llama.cpp's ubatch at this context: min(n_ubatch 512, n_batch, n_ctx)
    constant: int  # the constants below plus the FA mask at ctx

    #: The constant without the mask: CUDA context, lazily loaded kernels, page rounding, and
    #: the runtime's smallest pool.
    base_constant: ClassVar[int] = (
        CUDA_CONTEXT_BYTES + LAZY_KERNELS_BYTES + PAGE_ROUNDING_BYTES + RUNTIME_FLOOR_BYTES
    )
    #: The FA mask's bytes per context token, counted from ctx 512 on.
    mask_per_token: ClassVar[int] = _MASK_BYTES_PER_TOKEN


def prefilter_terms(spec: RunSpec) -> BoundTerms:
    """The factors of :func:`lower_bound_bytes` for ``spec``."""
    ctx = spec.ctx or MIN_CTX
    if spec.auto_cache:
        names = [n for pair in _auto_ladder() for n in pair]
    else:
        names = [spec.type_k, spec.type_v]
    ratio = _cheapest_ratio(names)
    # Draft cache: llama-server's default f16 (-ctkd/-ctvd), or what --auto-cache may pick
    # (crawler.fit.cheapest_cache_for tries q8_0 and q4_0 drafts).
    base = spec.base_config()
    drafts = [base.type_k_draft, base.type_v_draft] + (["q8_0", "q4_0"] if spec.auto_cache else [])
    mask = ctx * _MASK_BYTES_PER_TOKEN if ctx >= 512 else 0
    return BoundTerms(
        ctx=ctx,
        kv_ratio=ratio,
        fixed_ratio=min(1.0, ratio),
        mtp_kv_ratio=_cheapest_ratio(drafts) if spec.mtp else 0.0,
        # n_ctx >= ctx (llama.cpp pads it up), so this is at most the estimate's ubatch.
        ubatch=min(base.ubatch, base.batch, ctx),
        constant=BoundTerms.base_constant + mask,
    )


def _cheapest_ratio(names: Sequence[str]) -> float:
    # kv_bytes_per_token_f16 counts 2 bytes per element
    return min(cache_type(n).type_size / cache_type(n).blck for n in names) / 2.0


def _auto_ladder() -> tuple[tuple[str, str], ...]:
    from crawler.fit import CACHE_LADDER

    return CACHE_LADDER


# --- per-candidate evaluation ---------------------------------------------------------------


def _quality(c: Candidate) -> QualityEstimate | None:
    co = c.coefficients
    groups = tuple(GroupPrecision(g.name, g.n_params, g.n_bytes, g.bpw) for g in c.groups)
    if not groups:
        return None
    return estimate_quality(
        QualityInputs(
            groups=groups,
            n_expert=co.n_expert,
            n_expert_used=co.n_expert_used,
            n_embd=co.n_embd,
            n_vocab=co.n_vocab,
        )
    )


def _speed(c: Candidate, est: FitEstimate, budget: Budget) -> SpeedEstimate | None:
    if budget.bandwidth_gb_s is None:
        return None
    co = c.coefficients
    out = c.group("output") or c.group("token_embd")
    speed = estimate_speed(
        SpeedInputs(
            dense_bytes=co.weights_bytes,
            expert_bytes=co.expert_bytes,
            n_expert=co.n_expert,
            n_expert_used=co.n_expert_used,
            n_moe_layers=sum(1 for il, _d, _h in co.expert_layers if il < co.n_layer),
            experts_on_host=est.config.cpu_moe,
            kv_bytes_full=est.kv + est.mtp_kv,
            recurrent_bytes=co.recurrent_bytes_per_seq,
            mtp=est.config.mtp,
            mtp_bytes=co.mtp_weights_bytes,
            output_bytes=out.n_bytes if out else 0,
            draft_n_max=est.config.spec_draft_n_max,
        ),
        budget.bandwidth_gb_s,
    )
    return speed if est.config.n_gpu_layers is None else _partial_speed(c, est, speed)


def _partial_speed(c: Candidate, est: FitEstimate, speed: SpeedEstimate) -> SpeedEstimate:
    """tok/s of a partial offload: the host-resident weights are read at host bandwidth."""
    import dataclasses

    from crawler.fit.offload import estimate_offload
    from crawler.speed import DEFAULT_HOST_BANDWIDTH_GB_S

    cfg = est.config
    assert cfg.n_gpu_layers is not None
    host = estimate_offload(c.coefficients, cfg.replace(n_gpu_layers=None), cfg.n_gpu_layers)
    per_token = max(1, speed.bytes_per_token)
    gpu_s = per_token / (speed.bandwidth_gb_s * 1e9)
    host_share = min(host.host_weights, per_token)
    slow_s = (per_token - host_share) / (speed.bandwidth_gb_s * 1e9) + host_share / (
        DEFAULT_HOST_BANDWIDTH_GB_S * 1e9
    )
    factor = gpu_s / slow_s
    return dataclasses.replace(
        speed, tok_s=speed.tok_s * factor, tok_s_at_ctx=speed.tok_s_at_ctx * factor
    )


def _evaluate(
    c: Candidate, spec: RunSpec, budget: Budget
) -> tuple[RunConfig, FitEstimate] | tuple[None, FitEstimate | None]:
    """(config, estimate) when ``c`` fits; (None, smallest estimate or None) when it does not."""
    from crawler.fit.tiers import choose_tier

    projector = 0
    if spec.vision:
        from crawler.fit.vision import projector_bytes

        if c.projector_bytes is None:
            return None, None
        projector = projector_bytes(c.projector_bytes)
    cfg, est = choose_tier(
        c.coefficients,
        spec.base_config(),
        budget.device_bytes - projector,
        tier=spec.tier,
        auto_cache=spec.auto_cache,
        mtp="on" if spec.mtp else "auto" if spec.mtp_auto else "off",
        mtp_usable=mtp_usable(c),
        ram_bytes=budget.ram_bytes,
    )
    if cfg is None or est is None:
        return None, est
    if projector:
        import dataclasses

        est = dataclasses.replace(est, weights=est.weights + projector)  # its device bytes
    if spec.cpu_moe and budget.ram_bytes is not None and est.host_bytes > budget.ram_bytes:
        return None, est
    return cfg, est


def mtp_usable(c: Candidate) -> bool:
    """The quant carries an MTP head search may run: present, preserved (>= 6 bits), complete."""
    return bool(c.mtp_present and c.mtp_preserved and c.coefficients.mtp_available)


def _sort_value(key: str, r: Ranked) -> tuple[int, float]:
    """(missing flag, value) so that missing values sort last and larger is better."""
    c = r.candidate
    value: float | None
    if key == "quality":
        value = r.quality.score if r.quality else r.candidate.quality_hint
    elif key == "speed":
        value = r.speed.tok_s if r.speed else None
    elif key == "size":
        value = float(c.size_bytes)
    elif key == "margin":
        value = float(r.margin_bytes)
    elif key == "ctx":
        value = float(r.max_ctx) if r.max_ctx is not None else None
    elif key == "downloads":
        value = float(c.downloads) if c.downloads is not None else None
    elif key == "updated":
        value = c.last_modified.timestamp() if c.last_modified else None
    else:  # pragma: no cover - guarded by rank_candidates
        raise UsageError(f"unknown sort key {key!r}")
    if value is None or math.isnan(value):
        return (1, 0.0)
    return (0, -value)


def sort_key(key: str) -> Callable[[Ranked], tuple[Any, ...]]:
    """The full sort key for ``--sort key``: primary, TIE_BREAKS, then repo_id and path."""
    order = [key, *[k for k in TIE_BREAKS if k != key]]

    def k(r: Ranked) -> tuple[Any, ...]:
        return (*[_sort_value(name, r) for name in order], r.candidate.repo_id, r.candidate.path)

    return k


#: Sort keys whose value is known before the memory estimate (quality comes from the profile).
#: With these, candidates are estimated best-first and ranking stops once ``limit`` results fit
#: and no candidate left can rank higher: most of a large catalog is never estimated.
EARLY_STOP_SORTS = ("quality", "size", "downloads", "updated")
#: Sort keys known only after the estimate, for which the catalog streams candidates by an upper
#: bound of the value (``Candidate.bound_hint``), then tie-breaks (:func:`pre_key`): ranking
#: stops once ``limit`` results fit and the next candidate's (bound, tie-breaks) rank below the
#: last result's (value, tie-breaks), since nothing after it can do better.
BOUNDED_SORTS = ("speed", "margin", "ctx")
#: Largest step of candidates materialized and estimated at once; the first step is ``limit``
#: (likely the whole answer), then steps double.
_MAX_BATCH = 256

Materialize = Callable[[Sequence[Candidate]], Sequence[Candidate]]


def rank_candidates(
    candidates: Iterable[Candidate],
    budget: Budget,
    spec: RunSpec,
    filters: Filters | None = None,
    *,
    sort: str = "quality",
    limit: int | None = 20,
    siblings: Callable[[Sequence[str]], Mapping[str, Sequence[str]]] | None = None,
    materialize: Materialize | None = None,
    presorted: bool = False,
) -> SearchOutcome:
    """Filter, estimate, sort. A result's ``estimate.total`` never exceeds ``budget.device_bytes``.

    ``max_ctx`` is computed for the returned rows (for every fitting row with ``sort="ctx"``),
    since it costs ~20 estimates per quant. ``siblings(repo_ids)`` maps the returned rows' repos
    to their files, for the ``-hf`` choice (default: each candidate's ``sibling_paths``).
    ``materialize(batch)`` completes candidates whose coefficients were loaded partially (only
    ``status``, ``n_expert``, ``n_expert_used``, ``n_embd``, ``n_vocab``, ``mtp_available``), so
    the catalog parses coefficients only for the candidates actually estimated. ``presorted``:
    ``candidates`` already come in :func:`pre_key` order (the catalog's ORDER BY), so they are
    consumed lazily and the rest of the stream is never read once ranking can stop.
    """
    if sort not in SORT_KEYS:
        raise UsageError(f"--sort must be one of {', '.join(SORT_KEYS)}, not {sort!r}")
    spec = spec.validated()
    filters = filters or Filters()
    early = limit is not None and sort in EARLY_STOP_SORTS
    bounded = limit is not None and presorted and sort in BOUNDED_SORTS
    lazy = presorted and (early or bounded)
    stream = (c for c in candidates if filters.accepts(c))
    qualities: dict[int, QualityEstimate | None] = {}
    pre: dict[int, tuple[Any, ...]] = {}
    accepted: list[Candidate] = []
    if lazy:
        batches = _batches(stream, limit)
    else:
        accepted = list(stream)
        if early or sort == "quality":
            qualities = {c.quant_id: _quality(c) for c in accepted}
        if early:
            pre = {c.quant_id: pre_key(sort, c, qualities) for c in accepted}
            accepted.sort(key=lambda c: (pre[c.quant_id], c.repo_id, c.path))
        batches = _batches(iter(accepted), limit)
    fitting: list[Ranked] = []
    # Per coefficient object (keyed by id, holding the object): estimate, and max ctx per config.
    Outcome = tuple[RunConfig | None, FitEstimate | None] | EstimateError
    evaluations: dict[tuple[int, bool, int | None], tuple[MemoryCoefficients, Outcome]] = {}
    max_ctxs: dict[tuple[int, RunConfig], tuple[MemoryCoefficients, int]] = {}
    unknown = invalid = too_big = estimated = seen = 0
    smallest: int | None = None
    for batch in batches:
        seen += len(batch)
        if lazy:
            pre.update((c.quant_id, pre_key(sort, c, qualities)) for c in batch)
        if (early or bounded) and limit is not None and len(fitting) >= limit:
            if bounded:  # the results' actual (value, quality) against the next's bound
                last = sorted(sort_key(sort)(r) for r in fitting)[limit - 1]
                worst = last[:2]
            else:
                worst = sorted(pre[r.candidate.quant_id] for r in fitting)[limit - 1]
            if pre[batch[0].quant_id] > worst:
                seen -= len(batch)
                break  # sorted: nothing left can rank above the current top `limit`
            if bounded:
                # Ties on (bound, quality) cannot end the stream, but a candidate whose best case
                # (its bound, then the tie-breaks known before estimating) ranks below the last
                # result cannot enter the results: it is not completed or estimated.
                batch = [c for c in batch if not _beaten(_optimistic_key(sort, c), last)]
        for c in materialize(batch) if materialize is not None else batch:
            estimated += 1
            if c.coefficients.status != "ok":
                unknown += 1
                continue
            # Quants with one coefficient object (the catalog shares it between identical
            # memory models: re-uploads, mirrors) are estimated once. The memo keeps the object,
            # so its id cannot be reused by another while the memo lives.
            memo_key = (id(c.coefficients), mtp_usable(c), c.projector_bytes)
            memo = evaluations.get(memo_key)
            if memo is not None and memo[0] is c.coefficients:
                outcome = memo[1]
            else:
                try:
                    outcome = _evaluate(c, spec, budget)
                except EstimateError as exc:
                    outcome = exc
                evaluations[memo_key] = (c.coefficients, outcome)
            if isinstance(outcome, EstimateError):
                invalid += 1
                continue
            cfg, est = outcome
            if cfg is None:
                too_big += 1
                if est is not None and (smallest is None or est.total < smallest):
                    smallest = est.total
                continue
            assert est is not None
            ranked = Ranked(
                rank=0,
                candidate=c,
                config=cfg,
                estimate=est,
                margin_bytes=budget.device_bytes - est.total,
                max_ctx=None,
                # The catalog's stored score ranks; the full estimate is made for the results.
                quality=qualities.get(c.quant_id)
                or (None if c.quality_hint is not None else _quality(c)),
                speed=_speed(c, est, budget),
                command="",
            )
            # --sort ctx needs every fitting row's largest context (~20 estimates each).
            fitting.append(_with_max_ctx(ranked, budget, max_ctxs) if sort == "ctx" else ranked)
    fitting.sort(key=sort_key(sort))
    top = fitting if limit is None else fitting[:limit]
    files = siblings(sorted({r.candidate.repo_id for r in top})) if siblings else {}
    results = []
    for i, r in enumerate(top, 1):
        if r.max_ctx is None:
            r = _with_max_ctx(r, budget, max_ctxs)
        paths = files.get(r.candidate.repo_id, r.candidate.sibling_paths)
        if r.quality is None:
            r = _replace(r, quality=_quality(r.candidate))
        results.append(_finish(r, i, spec, budget, paths))
    # A presorted stream is read only up to the stop: what was not read is not counted.
    total = seen if lazy else len(accepted)
    return SearchOutcome(
        results=tuple(results),
        considered=total,
        fitting=len(fitting),
        unknown_memory=unknown,
        invalid_config=invalid,
        too_big=too_big,
        smallest_total=smallest,
        unevaluated=total - estimated,
    )


def _batches(items: Iterator[Candidate], limit: int | None) -> Iterator[list[Candidate]]:
    """Lists of candidates: the first ``limit`` (likely the answer), then doubling steps."""
    step = max(limit or 0, 1)
    while True:
        batch = list(itertools.islice(items, step))
        if not batch:
            return
        yield batch
        step = min(step * 2, _MAX_BATCH)


#: The parts of the sort order that are known before estimating, after the primary key.
_PRE_TIE_BREAKS = ("quality", "size", "downloads")


def pre_key(
    sort: str, c: Candidate, qualities: Mapping[int, QualityEstimate | None] | None = None
) -> tuple[tuple[int, float], ...]:
    """The sort order known before estimating: the primary key, then the tie-breaks up to the
    first one that needs the estimate (speed); for :data:`BOUNDED_SORTS`, the bound of the
    primary key and quality. Same encoding as :func:`sort_key`: ascending is best first, missing
    values last. The catalog's ORDER BY for streamed search follows it.
    """
    return tuple(_pre_value(k, c, qualities or {}) for k in _pre_keys(sort))


def _pre_keys(sort: str) -> tuple[str, ...]:
    if sort in BOUNDED_SORTS:
        # The database computes and sorts the bound per request, cheapest with one tie-break.
        return (sort, "quality")
    return (sort, *(t for t in _PRE_TIE_BREAKS if t != sort))


def _optimistic_key(sort: str, c: Candidate) -> tuple[Any, ...]:
    """For :data:`BOUNDED_SORTS`: the best :func:`sort_key` ``c`` can have, from its bound and the
    tie-breaks known before estimating (for speed that is all of them: repo and path follow)."""
    known = tuple(_pre_value(k, c, {}) for k in (sort, *_PRE_TIE_BREAKS))
    return (*known, c.repo_id, c.path) if sort == "speed" else known


def _beaten(best: tuple[Any, ...], last: tuple[Any, ...]) -> bool:
    """Whether a key whose best case is ``best`` ranks below ``last`` whatever else it has."""
    return best > last[: len(best)]


def _pre_value(
    key: str, c: Candidate, qualities: Mapping[int, QualityEstimate | None]
) -> tuple[int, float]:
    value: float | None
    if key in BOUNDED_SORTS:
        # An upper bound; none given: it could be anything, so it must be read first.
        value = math.inf if c.bound_hint is None else c.bound_hint
    elif key == "quality":
        q = qualities.get(c.quant_id)
        value = q.score if q else c.quality_hint
    elif key == "size":
        value = float(c.size_bytes)
    elif key == "downloads":
        value = float(c.downloads) if c.downloads is not None else None
    else:  # updated
        value = c.last_modified.timestamp() if c.last_modified else None
    if value is None or math.isnan(value):
        return (1, 0.0)
    return (0, -value)


def _with_max_ctx(
    r: Ranked,
    budget: Budget,
    memo: dict[tuple[int, RunConfig], tuple[MemoryCoefficients, int]] | None = None,
) -> Ranked:
    """``r`` with its largest context; ``memo`` keeps the answers per coefficient object."""
    co = r.candidate.coefficients
    if r.config.n_gpu_layers is not None:
        return _replace(r, max_ctx=r.config.ctx)  # partial offload: the context asked for
    key = (id(co), r.config)
    hit = memo.get(key) if memo is not None else None
    if hit is not None and hit[0] is co:
        return _replace(r, max_ctx=hit[1])
    cap = co.n_ctx_train or (1 << 20)
    m = max_ctx(co, r.config, budget.device_bytes, limit=max(cap, r.config.ctx))
    if memo is not None:
        memo[key] = (co, m)
    return _replace(r, max_ctx=m)


def _finish(
    r: Ranked,
    rank: int,
    spec: RunSpec,
    budget: Budget,
    paths: Sequence[str],
) -> Ranked:
    cfg = r.config
    if spec.ctx is None and r.max_ctx:
        # Without --ctx the row shows the largest context: estimate and command use it.
        cfg = cfg.replace(ctx=r.max_ctx)
        est = estimate(r.candidate.coefficients, cfg)
        r = _replace(
            r,
            config=cfg,
            estimate=est,
            margin_bytes=budget.device_bytes - est.total,
            speed=_speed(r.candidate, est, budget),
        )
    c = r.candidate
    command = llama_server_command(c.repo_id, c.path, c.quant_label, cfg, paths)
    if spec.vision:  # -hf downloads the repo's projector unless told not to (launch.py)
        command = command.replace(" --no-mmproj", "")
    return _replace(
        r,
        rank=rank,
        command=command,
        ollama=ollama_command(c.repo_id, c.quant_label, cfg),
        lm_studio=lmstudio_command(c.repo_id, cfg),
    )


def _replace(r: Ranked, **changes: Any) -> Ranked:
    import dataclasses

    return dataclasses.replace(r, **changes)
