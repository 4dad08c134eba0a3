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

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from crawler.errors import EstimateError, UsageError
from crawler.fit import (
    FitEstimate,
    MemoryCoefficients,
    RunConfig,
    estimate,
    max_ctx,
)
from crawler.fit.choose import MtpMode
from crawler.fit.devices import (
    DeviceShare,
    choose_split,
    combined_estimate,
    estimate_devices,
    max_ctx_split,
)
from crawler.fit.offload import estimate_offload
from crawler.fit.tiers import choose_pinned_layers, choose_tier
from crawler.fit.vision import projector_bytes
from crawler.quality import QualityEstimate, QualityInputs, estimate_quality
from crawler.ranking.commands import llama_server_command, lmstudio_command, ollama_command
from crawler.ranking.model import (
    BOUNDED_SORTS,
    EARLY_STOP_SORTS,
    SORT_KEYS,
    TIE_BREAKS,
    Budget,
    Candidate,
    Filters,
    Ranked,
    RunSpec,
    SearchOutcome,
)
from crawler.speed import (
    DEFAULT_HOST_BANDWIDTH_GB_S,
    SpeedEstimate,
    SpeedInputs,
    estimate_speed,
)

__all__ = [
    "mtp_usable",
    "pre_key",
    "rank_candidates",
    "sort_key",
]


# --- per-candidate evaluation ---------------------------------------------------------------


def _quality(c: Candidate) -> QualityEstimate | None:
    co = c.coefficients
    if not c.groups:
        return None
    return estimate_quality(
        QualityInputs(
            groups=c.groups,
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


def mtp_usable(c: Candidate) -> bool:
    """The quant carries an MTP head search may run: present, preserved (>= 6 bits), complete."""
    return bool(c.mtp_present and c.mtp_preserved and c.coefficients.mtp_available)


_Outcome = tuple[RunConfig | None, FitEstimate | None] | EstimateError


def _evaluate(
    c: Candidate, spec: RunSpec, budget: Budget
) -> tuple[RunConfig, FitEstimate] | tuple[None, FitEstimate | None]:
    """(config, estimate) when ``c`` fits; (None, smallest estimate or None) when it does not."""
    if spec.vision and c.projector_bytes is None:
        return None, None
    projector = _projector(c, spec)
    mode: MtpMode = "on" if spec.mtp else "auto" if spec.mtp_auto else "off"
    room, usable = budget.device_bytes - projector, mtp_usable(c)
    if budget.devices:
        cfg, est = choose_split(
            c.coefficients, spec.base_config(), budget.devices, budget.split,
            auto_cache=spec.auto_cache, mtp=mode, mtp_usable=usable,
        )  # fmt: skip
        ram = budget.ram_bytes
        if cfg is not None and est is not None and ram is not None and est.host_bytes > ram:
            return None, est  # experts in RAM (--cpu-moe / --n-cpu-moe) beyond --ram
    elif spec.n_gpu_layers is not None:
        cfg, est = choose_pinned_layers(
            c.coefficients, spec.base_config(), room, spec.n_gpu_layers,
            auto_cache=spec.auto_cache, mtp=mode, mtp_usable=usable, ram_bytes=budget.ram_bytes,
        )  # fmt: skip
    else:
        cfg, est = choose_tier(
            c.coefficients, spec.base_config(), room, tier=spec.tier,
            auto_cache=spec.auto_cache, mtp=mode, mtp_usable=usable, ram_bytes=budget.ram_bytes,
        )  # fmt: skip
    if cfg is None or est is None:
        return None, est
    if projector:
        est = dataclasses.replace(est, weights=est.weights + projector)  # its device bytes
    return cfg, est


def _margin(
    c: Candidate, cfg: RunConfig, est: FitEstimate, budget: Budget
) -> tuple[int, tuple[DeviceShare, ...]]:
    """(margin, device shares): one GPU's budget less the estimate, or on several GPUs the
    tightest device's margin (each device's share as llama.cpp's layer split places it)."""
    if not budget.devices:
        return budget.device_bytes - est.total, ()
    shares = tuple(estimate_devices(c.coefficients, cfg, budget.split, budget.devices))
    return min(s.margin for s in shares), shares


def _projector(c: Candidate, spec: RunSpec) -> int:
    """Device bytes of the repo's projector when the search asks for vision (else 0)."""
    if not spec.vision or c.projector_bytes is None:
        return 0
    return projector_bytes(c.projector_bytes)


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
    evaluations: dict[tuple[int, bool, int | None], tuple[MemoryCoefficients, _Outcome]] = {}
    max_ctxs: dict[tuple[int, RunConfig, int], tuple[MemoryCoefficients, int]] = {}
    unknown = invalid = too_big = estimated = seen = n_fitting = 0
    smallest: int | None = None
    key_of = sort_key(sort)
    for batch in batches:
        seen += len(batch)
        if lazy:
            pre.update((c.quant_id, pre_key(sort, c, qualities)) for c in batch)
        if (early or bounded) and limit is not None and len(fitting) >= limit:
            if bounded:  # the results' actual (value, quality) against the next's bound
                last = key_of(fitting[limit - 1])  # kept sorted and cut to `limit` below
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
            margin, shares = _margin(c, cfg, est, budget)
            ranked = Ranked(
                rank=0,
                candidate=c,
                config=cfg,
                estimate=est,
                margin_bytes=margin,
                devices=shares,
                max_ctx=None,
                # The catalog's stored score ranks; the full estimate is made for the results.
                quality=qualities.get(c.quant_id)
                or (None if c.quality_hint is not None else _quality(c)),
                speed=_speed(c, est, budget),
                command="",
            )
            # --sort ctx needs every fitting row's largest context (~20 estimates each).
            fitting.append(
                _with_max_ctx(ranked, spec, budget, max_ctxs) if sort == "ctx" else ranked
            )
            n_fitting += 1
        if bounded and limit is not None and len(fitting) >= limit:
            # Only the best `limit` can be answered: keeping just those keeps each batch's
            # comparison with the next bound O(limit), not O(everything that fitted so far).
            fitting.sort(key=key_of)
            del fitting[limit:]
    fitting.sort(key=key_of)
    top = fitting if limit is None else fitting[:limit]
    files = siblings(sorted({r.candidate.repo_id for r in top})) if siblings else {}
    results = []
    for i, r in enumerate(top, 1):
        if r.max_ctx is None:
            r = _with_max_ctx(r, spec, budget, max_ctxs)
        paths = files.get(r.candidate.repo_id, r.candidate.sibling_paths)
        if r.quality is None:
            r = _replace(r, quality=_quality(r.candidate))
        results.append(_finish(r, i, spec, budget, paths))
    # A presorted stream is read only up to the stop: what was not read is not counted.
    total = seen if lazy else len(accepted)
    return SearchOutcome(
        results=tuple(results),
        considered=total,
        fitting=n_fitting,
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
    spec: RunSpec,
    budget: Budget,
    memo: dict[tuple[int, RunConfig, int], tuple[MemoryCoefficients, int]] | None = None,
) -> Ranked:
    """``r`` with its largest context; ``memo`` keeps the answers per coefficient object."""
    co = r.candidate.coefficients
    if r.config.n_gpu_layers is not None:
        return _replace(r, max_ctx=r.config.ctx)  # partial offload: the context asked for
    room = budget.device_bytes - _projector(r.candidate, spec)
    key = (id(co), r.config, room)
    hit = memo.get(key) if memo is not None else None
    if hit is not None and hit[0] is co:
        return _replace(r, max_ctx=hit[1])
    cap = max(co.n_ctx_train or (1 << 20), r.config.ctx)
    if budget.devices:
        m = max_ctx_split(co, r.config, budget.split, budget.devices, limit=cap)
    else:
        m = max_ctx(co, r.config, room, limit=cap)
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
    if spec.ctx is None and r.max_ctx and r.max_ctx != cfg.ctx:
        # Without --ctx the row shows the largest context: estimate and command use it.
        cfg = cfg.replace(ctx=r.max_ctx)
        est = estimate(r.candidate.coefficients, cfg)
        est = dataclasses.replace(est, weights=est.weights + _projector(r.candidate, spec))
        margin, shares = _margin(r.candidate, cfg, est, budget)
        if shares:
            est = combined_estimate(shares, est)
        r = _replace(
            r,
            config=cfg,
            estimate=est,
            margin_bytes=margin,
            devices=shares,
            speed=_speed(r.candidate, est, budget),
        )
    c = r.candidate
    command = llama_server_command(c.repo_id, c.path, c.quant_label, cfg, paths)
    if spec.vision:  # -hf downloads the repo's projector unless told not to (launch.py)
        command = command.replace(" --no-mmproj", "")
    if budget.split:  # the layer split the estimate assumed (llama.cpp -ts, common/arg.cpp)
        command += " -ts " + ",".join(f"{x:g}" for x in budget.split)
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
