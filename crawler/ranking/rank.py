"""Ranking (pure: no I/O): which quants fit a memory budget at a context, and in which order.

The exact memory estimate decides whether a candidate fits; order.py orders the ones that do.
Details: docs/internals/ranking.md#rank
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from crawler.base.errors import EstimateError, UsageError
from crawler.fit import FitEstimate, MemoryCoefficients, RunConfig
from crawler.ranking.evaluate import (
    Outcome,
    evaluate,
    finish,
    head_declined,
    margin_of,
    mtp_usable,
    quality_of,
    replace_ranked,
    speed_file_inputs,
    speed_of,
    with_max_ctx,
    without_head,
)
from crawler.ranking.model import (
    BOUNDED_SORTS,
    EARLY_STOP_SORTS,
    SORT_KEYS,
    Budget,
    Candidate,
    Filters,
    Ranked,
    RunSpec,
    SearchOutcome,
)
from crawler.ranking.order import beaten, optimistic_key, pre_key, sort_key
from crawler.ranking.quality import QualityEstimate
from crawler.ranking.speed import SpeedEstimate

__all__ = ["Materialize", "count_fitting", "pre_key", "rank_candidates", "sort_key"]


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
    ``candidates`` already come in pre_key order (the catalog's ORDER BY), so they are
    consumed lazily and the rest of the stream is never read once ranking can stop.
    """
    if sort not in SORT_KEYS:
        raise UsageError(f"--sort must be one of {', '.join(SORT_KEYS)}, not {sort!r}")
    spec = spec.validated()
    filters = filters or Filters()
    ranking = _Ranking(sort, limit, presorted, spec, budget)
    stream = (c for c in candidates if filters.accepts(c))
    ranking.run(ranking.batches(stream), materialize)
    return ranking.outcome(siblings)


class _Ranking:
    """One rank_candidates call: the candidates read in batches, estimated until nothing left
    can enter the top ``limit``, then the answer.

    ``early`` (a sort whose pre_key orders exactly): stop at the first batch whose pre_key ranks
    below the current top ``limit``. ``bounded`` (a presorted stream ordered by an upper bound):
    stop likewise against the results' actual keys, and skip candidates whose best case cannot
    enter. ``lazy``: the stream is presorted and consumed only as far as ranking reads it.
    """

    def __init__(
        self, sort: str, limit: int | None, presorted: bool, spec: RunSpec, budget: Budget
    ) -> None:
        self.sort, self.limit = sort, limit
        self.early = limit is not None and sort in EARLY_STOP_SORTS
        self.bounded = limit is not None and presorted and sort in BOUNDED_SORTS
        self.lazy = presorted and (self.early or self.bounded)
        # One dict, shared with the tally: pre_key and the tally fill and read the same one.
        self.qualities: dict[int, QualityEstimate | None] = {}
        self.pre: dict[int, tuple[Any, ...]] = {}
        self.accepted: list[Candidate] = []
        self.fitting: list[Ranked] = []
        self.tally = _Tally(spec, budget, self.qualities, with_ctx=sort == "ctx")
        self.seen = 0
        self.key_of = sort_key(sort)

    def batches(self, stream: Iterator[Candidate]) -> Iterator[list[Candidate]]:
        """The candidates in batches: as they come when lazy, else all read (and, for an early
        stop, put in pre_key order) first."""
        if self.lazy:
            return _batches(stream, self.limit, self._ends_at)
        self.accepted = list(stream)
        if self.early or self.sort == "quality":
            self.qualities.update((c.quant_id, quality_of(c)) for c in self.accepted)
        if self.early:
            pre = self.pre
            pre.update((c.quant_id, pre_key(self.sort, c, self.qualities)) for c in self.accepted)
            self.accepted.sort(key=lambda c: (pre[c.quant_id], c.repo_id, c.path))
        return _batches(iter(self.accepted), self.limit)

    def run(self, batches: Iterator[list[Candidate]], materialize: Materialize | None) -> None:
        """Estimate batch after batch until the stream ends or nothing left can rank higher."""
        limit = self.limit
        for batch in batches:
            self.seen += len(batch)
            if self.lazy:
                self.pre.update((c.quant_id, pre_key(self.sort, c, self.qualities)) for c in batch)
            kept = self._still_open(batch)
            if kept is None:
                self.seen -= len(batch)
                break  # sorted: nothing left can rank above the current top `limit`
            for c in materialize(kept) if materialize is not None else kept:
                ranked = self.tally.consider(c)
                if ranked is not None:
                    self.fitting.append(ranked)
            if self.bounded and limit is not None and len(self.fitting) >= limit:
                # Only the best `limit` can be answered: keeping just those keeps each batch's
                # comparison with the next bound O(limit), not O(everything that fitted so far).
                self.fitting.sort(key=self.key_of)
                del self.fitting[limit:]

    def _ends_at(self, head: Candidate) -> bool:
        """Whether nothing from ``head`` on can enter the top ``limit`` (_still_open's stop, tested
        before the rest of a batch is read: a stream of copies read shape by shape would read
        the next shapes' rows for nothing)."""
        if not (self.early or self.bounded) or self.limit is None:
            return False
        if len(self.fitting) < self.limit:
            return False
        self.pre[head.quant_id] = pre_key(self.sort, head, self.qualities)
        return self._still_open([head]) is None

    def _still_open(self, batch: list[Candidate]) -> list[Candidate] | None:
        """The batch's candidates that may still enter the top ``limit``; None: none can, nor
        any after them."""
        limit = self.limit
        if not (self.early or self.bounded) or limit is None or len(self.fitting) < limit:
            return batch
        if self.bounded:  # the results' actual (value, tie-breaks) against the next's bound
            last = self.key_of(self.fitting[limit - 1])  # kept sorted and cut to `limit` in run
            worst = last[: len(self.pre[batch[0].quant_id])]
        else:
            worst = sorted(self.pre[r.candidate.quant_id] for r in self.fitting)[limit - 1]
        if self.pre[batch[0].quant_id] > worst:
            return None
        if not self.bounded:
            return batch
        # Ties on (bound, quality) cannot end the stream, but a candidate whose best case (its
        # bound, then the tie-breaks known before estimating) ranks below the last result cannot
        # enter the results: it is not completed or estimated.
        return [c for c in batch if not beaten(optimistic_key(self.sort, c), last)]

    def outcome(
        self, siblings: Callable[[Sequence[str]], Mapping[str, Sequence[str]]] | None
    ) -> SearchOutcome:
        """The top ``limit`` finished (command, max_ctx, speed), and the counts."""
        tally = self.tally
        self.fitting.sort(key=self.key_of)
        top = self.fitting if self.limit is None else self.fitting[: self.limit]
        files = siblings(sorted({r.candidate.repo_id for r in top})) if siblings else {}
        results = [
            tally.finished(r, i, files.get(r.candidate.repo_id, r.candidate.sibling_paths))
            for i, r in enumerate(top, 1)
        ]
        # A presorted stream is read only up to the stop: what was not read is not counted.
        total = self.seen if self.lazy else len(self.accepted)
        return SearchOutcome(
            results=tuple(results),
            considered=total,
            fitting=tally.fitting,
            unknown_memory=tally.unknown,
            invalid_config=tally.invalid,
            too_big=tally.too_big,
            smallest_total=tally.smallest,
            unevaluated=total - tally.estimated,
        )


def count_fitting(
    candidates: Iterable[Candidate],
    budget: Budget,
    spec: RunSpec,
    filters: Filters | None = None,
    *,
    materialize: Materialize | None = None,
    cap: int,
) -> tuple[int, int, bool]:
    """(how many fit, how many were estimated, whether the candidates ran out) over at most
    ``cap`` candidates: the count a search reports besides the rows it shows, which ranking's
    early stop does not give. Identical memory models are estimated once, as in ranking."""
    spec = spec.validated()
    filters = filters or Filters()
    fits = estimated = 0
    memo: dict[tuple[int, bool, int | None], tuple[MemoryCoefficients, bool]] = {}
    stream = (c for c in candidates if filters.accepts(c))
    while batch := list(itertools.islice(stream, min(64, cap - estimated) or 1)):
        if estimated >= cap:
            return fits, estimated, False
        for c in materialize(batch) if materialize is not None else batch:
            estimated += 1
            if c.coefficients.status != "ok":
                continue
            key = (id(c.coefficients), mtp_usable(c), c.projector_bytes)
            known = memo.get(key)
            if known is not None and known[0] is c.coefficients:
                fits += known[1]
                continue
            try:
                fit = evaluate(c, spec, budget)[0] is not None
            except EstimateError:
                fit = False
            memo[key] = (c.coefficients, fit)
            fits += fit
    return fits, estimated, True


def _batches(
    items: Iterator[Candidate], limit: int | None, ends: Callable[[Candidate], bool] | None = None
) -> Iterator[list[Candidate]]:
    """Lists of candidates: the first ``limit`` (likely the answer), then doubling steps; none
    more once ``ends`` says so of a batch's first candidate."""
    step = max(limit or 0, 1)
    for head in items:
        if ends is not None and ends(head):
            return
        batch = [head, *itertools.islice(items, step - 1)]
        yield batch
        step = min(step * 2, _MAX_BATCH)


class _Tally:
    """Estimates candidates one by one and counts what happened to each.

    Quants with one coefficient object (the catalog shares it between identical memory models:
    re-uploads, mirrors) are estimated once; the memo keeps the object, so its id cannot be
    reused by another while the memo lives. Largest contexts are memoised per configuration.
    """

    def __init__(
        self,
        spec: RunSpec,
        budget: Budget,
        qualities: Mapping[int, QualityEstimate | None],
        *,
        with_ctx: bool,
    ) -> None:
        self.spec, self.budget, self.qualities, self.with_ctx = spec, budget, qualities, with_ctx
        self.evaluations: dict[tuple[int, bool, int | None], tuple[MemoryCoefficients, Outcome]]
        self.evaluations = {}
        self.max_ctxs: dict[tuple[int, RunConfig, int], tuple[MemoryCoefficients, int]] = {}
        self.speeds: dict[tuple[Any, ...], tuple[FitEstimate, SpeedEstimate | None]] = {}
        self.unknown = self.invalid = self.too_big = self.estimated = self.fitting = 0
        self.smallest: int | None = None

    def _outcome(self, c: Candidate, *, head: bool = True) -> Outcome:
        """evaluate's answer (``head`` False: with MTP off, the answer of a quant whose head
        cannot draft), once per memory model."""
        memo_key = (id(c.coefficients), head and mtp_usable(c), c.projector_bytes)
        memo = self.evaluations.get(memo_key)
        if memo is not None and memo[0] is c.coefficients:
            return memo[1]
        outcome: Outcome
        try:
            outcome = evaluate(c, self.spec if head else without_head(self.spec), self.budget)
        except EstimateError as exc:
            outcome = exc
        self.evaluations[memo_key] = (c.coefficients, outcome)
        return outcome

    def consider(self, c: Candidate) -> Ranked | None:
        """``c`` ranked when it fits, else None (counted as unknown, invalid or too big)."""
        self.estimated += 1
        if c.coefficients.status != "ok":
            self.unknown += 1
            return None
        outcome = self._outcome(c)
        if isinstance(outcome, EstimateError):
            self.invalid += 1
            return None
        cfg, est = outcome
        if cfg is None:
            self.too_big += 1
            if est is not None and (self.smallest is None or est.total < self.smallest):
                self.smallest = est.total
            return None
        assert est is not None
        speed, declined = self._speed(c, est), None
        if head_declined(self.spec, self.budget, c, cfg, speed):
            plain = self._outcome(c, head=False)
            if not isinstance(plain, EstimateError) and plain[0] is not None:
                assert speed is not None and plain[1] is not None
                cfg, est, declined = plain[0], plain[1], speed.mtp_speedup
                speed = self._speed(c, est)
        margin, shares = margin_of(c, cfg, est, self.budget)
        ranked = Ranked(
            rank=0,
            candidate=c,
            config=cfg,
            estimate=est,
            margin_bytes=margin,
            devices=shares,
            max_ctx=None,
            # The catalog's stored score ranks; the full estimate is made for the results.
            quality=self.qualities.get(c.quant_id)
            or (None if c.quality_hint is not None else quality_of(c)),
            speed=speed,
            command="",
            mtp_declined=declined,
        )
        self.fitting += 1
        # --sort ctx needs every fitting row's largest context (~20 estimates each).
        return self._with_ctx(ranked) if self.with_ctx else ranked

    def _speed(self, c: Candidate, est: FitEstimate) -> SpeedEstimate | None:
        # Copies share their estimate object (the evaluation memo), so a copy's speed is the
        # first one's where the quant's own inputs agree; the memo keeps the estimate alive.
        key = (id(est), *speed_file_inputs(c))
        memo = self.speeds.get(key)
        if memo is not None and memo[0] is est:
            return memo[1]
        speed = speed_of(
            c,
            est,
            self.budget,
            acceptance=self.spec.mtp_acceptance,
            choose_draft=self.spec.spec_draft_auto,
        )
        self.speeds[key] = (est, speed)
        return speed

    def _with_ctx(self, r: Ranked) -> Ranked:
        return with_max_ctx(r, self.spec, self.budget, self.max_ctxs)

    def finished(self, r: Ranked, rank: int, paths: Sequence[str]) -> Ranked:
        """A returned row, complete: its largest context, quality, command."""
        if r.max_ctx is None:
            r = self._with_ctx(r)
        if r.quality is None:
            r = replace_ranked(r, quality=quality_of(r.candidate))
        return finish(r, rank, self.spec, self.budget, paths)
