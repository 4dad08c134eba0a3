"""quants search as a library call: a checked request's candidates from the catalog, ranked.

Orchestration only; raises NothingFits (exit 3) with counts that say why.
Details: docs/internals/base.md#search
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from crawler.base.budget import budget_text
from crawler.base.errors import NothingFits
from crawler.base.units import GIB
from crawler.fit.gpus import GPUMatch
from crawler.library.search_request import SearchRequest, validate_request
from crawler.profile.measured import order_by_measured
from crawler.ranking.model import (
    EARLY_STOP_SORTS,
    Budget,
    Candidate,
    SearchOutcome,
)
from crawler.ranking.rank import rank_candidates

if TYPE_CHECKING:
    from crawler.catalog.reader import Reader

__all__ = ["SearchResult", "backend_note", "search"]


@dataclass(frozen=True, slots=True)
class SearchResult:
    """Ranked results plus the resolved budget and what was left out."""

    request: SearchRequest
    budget: Budget
    gpu: GPUMatch | None
    outcome: SearchOutcome
    prefiltered_out: int  # excluded by the SQL lower bound (cannot fit)
    unknown_memory: int  # memory rules not modelled (left out by the catalog query)
    seconds: float
    #: ``repo/path`` of stored rows that could not be read (skipped, not fatal).
    unreadable: tuple[str, ...] = ()
    #: How many candidates fit in all (not only the shown rows), and whether that is exact
    #: (False: a lower bound, counting stopped at SearchRequest.count_cap candidates).
    fit_count: int = 0
    fit_count_exact: bool = True


def search(reader: Reader, req: SearchRequest) -> SearchResult:
    """Run one search on the catalog ``reader`` reads (crawler.catalog.reader.Reader.open
    or Catalog.reader()); NothingFits when no
    candidate fits (the message says why)."""
    from crawler.catalog.candidates import count_left_out, materializer, sibling_lookup
    from crawler.catalog.ordered import stream_candidates

    started = time.perf_counter()
    budget, match, spec = validate_request(req)
    # The catalog streams candidates in the sort's order (for speed, margin and ctx: in the
    # order of an upper bound) and ranking stops reading once nothing left can rank higher.
    # Each run of copies is read only as far as a copy can enter the first ``limit`` rows (the
    # fit count's own read below reads them all).
    shared: dict[Any, Any] = {}  # what the ranking's stream read, for the fit count's
    stream = stream_candidates(
        reader, spec, budget, req.filters, req.sort, copies=req.limit, memo=shared
    )
    # The sorts that leave out no copy stream the fit count's candidates in the same order:
    # the count goes on from where ranking stopped (after what it read), instead of reading
    # the stream again from its start (a broad name query's reads test names row by row).
    same = req.sort in EARLY_STOP_SORTS
    read: list[Candidate] = []
    unreadable: list[str] = []
    try:
        outcome = rank_candidates(
            _recorded(stream, read) if same else stream,
            budget,
            spec,
            req.filters,
            sort=req.sort,
            limit=req.limit,
            siblings=sibling_lookup(reader),
            materialize=materializer(reader, vision=spec.vision, unreadable=unreadable),
            presorted=True,
        )
        if not same:
            stream.close()
        fit_count, exact = outcome.fitting, not outcome.unevaluated
        if req.count_cap and (outcome.unevaluated or outcome.considered >= req.limit):
            # Ranking stopped once nothing could rank higher: count what fits apart, bounded.
            from crawler.ranking.rank import count_fitting

            counted = (
                _replayed(read, stream)
                if same
                else stream_candidates(reader, spec, budget, req.filters, req.sort, memo=shared)
            )
            try:
                fits, _, exact = count_fitting(
                    counted, budget, spec, req.filters,
                    materialize=materializer(reader, vision=spec.vision), cap=req.count_cap,
                )  # fmt: skip
            finally:
                counted.close()
            fit_count = max(fits, outcome.fitting)
    finally:
        stream.close()
    prefiltered_out = unknown = 0
    if outcome.results:
        outcome = _with_measured(reader, outcome, req.sort)
    if not outcome.results:
        prefiltered_out, unknown = count_left_out(reader, spec, budget, req.filters)
    result = SearchResult(
        request=req,
        budget=budget,
        gpu=match,
        outcome=outcome,
        prefiltered_out=prefiltered_out,
        unknown_memory=unknown + outcome.unknown_memory,
        seconds=time.perf_counter() - started,
        unreadable=tuple(unreadable),
        fit_count=fit_count,
        fit_count_exact=exact,
    )
    if not outcome.results:
        from crawler.catalog.empty import EMPTY_CATALOG, FILL_CATALOG, catalog_is_empty

        if outcome.considered == 0 and catalog_is_empty(reader):
            raise NothingFits(EMPTY_CATALOG, hint=FILL_CATALOG)
        raise NothingFits(_nothing_fits_message(result), hint=_nothing_fits_hint(result))
    return result


def _recorded(stream: Iterator[Candidate], read: list[Candidate]) -> Iterator[Candidate]:
    """``stream``, each candidate also appended to ``read`` as it passes."""
    for c in stream:
        read.append(c)
        yield c


def _replayed(
    read: list[Candidate], stream: Iterator[Candidate]
) -> Generator[Candidate, None, None]:
    """The candidates ``read`` from ``stream`` so far, then the rest of it."""
    yield from read
    yield from stream


def _with_measured(reader: Reader, outcome: SearchOutcome, sort: str) -> SearchOutcome:
    """Attach each result's published measurements; under ``--sort quality`` let measured KLD
    order results among peers of one base model, metric and corpus (crawler.profile.measured)."""
    from dataclasses import replace

    from crawler.catalog.measured_rows import measured_values

    found = measured_values(
        reader, [(r.candidate.repo_id, r.candidate.path) for r in outcome.results]
    )
    if not found:
        return outcome
    results = [
        replace(r, measured=found.get((r.candidate.repo_id, r.candidate.path), ()))
        for r in outcome.results
    ]
    if sort == "quality":
        results = order_by_measured(results, lambda r: r.measured, lambda r: r.candidate.base_model)
    return replace(
        outcome, results=tuple(replace(r, rank=i) for i, r in enumerate(results, start=1))
    )


def backend_note(kind: str) -> str:
    """The "not measured on this backend" note for a unified-memory GPU."""
    from crawler.fit.apple import NOTE

    if kind == "apple":
        return NOTE
    return "not measured on this backend (Vulkan/ROCm, unified memory): CUDA figures"


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def _nothing_fits_message(res: SearchResult) -> str:
    o, spec = res.outcome, res.request.spec
    ctx = f"ctx {spec.ctx}" if spec.ctx else "the minimum context 4096"
    b = res.budget
    where = f"{budget_text(b.vram_bytes, b.headroom_bytes)} ({b.gpu_name or '--vram'})"
    too_big = o.too_big + res.prefiltered_out
    unknown = res.unknown_memory
    if o.considered == 0 and too_big == 0 and unknown == 0:
        if res.request.filters.query:
            return f"no quant in the catalog matches {res.request.filters.query!r} and the filters"
        return "no quant in the catalog matches the filters (is the catalog empty?)"
    parts = [f"no quant fits {where} at {ctx}"]
    if too_big:
        smallest = (
            f"; the smallest estimate is {_gib(o.smallest_total)}" if o.smallest_total else ""
        )
        parts.append(f"{too_big} too big{smallest}")
    if unknown:
        parts.append(f"{unknown} with memory rules not modelled")
    if o.invalid_config:
        parts.append(f"{o.invalid_config} refused by llama.cpp's rules for this configuration")
    text = ", ".join(parts)
    if too_big and spec.tier == "gpu" and spec.n_gpu_layers is None:
        text += (
            "; --tier experts_cpu or --tier partial also lists runs with experts or layers in RAM"
        )
    return text


def _nothing_fits_hint(res: SearchResult) -> str | None:
    """What could change the answer, from what this search left open (every lever named is one
    it has not used: no "quantize the cache" when it already tried q4_0)."""
    o, req = res.outcome, res.request
    spec = req.spec
    if o.considered == 0 and o.too_big + res.prefiltered_out == 0 and res.unknown_memory == 0:
        if req.filters.query:
            return (
                "check the query's spelling and the filters (`quants search` looks a model the"
                " catalog lacks up on the Hub, unless --offline)"
            )
        return "`quants crawl` (or `quants pull DATASET`) fills the catalog"
    if o.too_big + res.prefiltered_out == 0:
        if res.unknown_memory and not o.invalid_config:
            return None  # the message says it: those architectures' memory is not modelled
        return "change the flags llama.cpp refuses (a quantized V cache needs -fa on)"
    levers = []
    if spec.ctx:
        levers.append("a smaller -c/--ctx")
    if not spec.auto_cache and (spec.type_k, spec.type_v) != ("q4_0", "q4_0"):
        levers.append("a quantized cache (-ctk q4_0 -ctv q4_0, or no -ctk/-ctv: search then picks)")
    if spec.mtp:
        levers.append("no --mtp")
    if spec.vision:
        levers.append("no --vision")
    if req.headroom_gib > 0:
        levers.append("a smaller --headroom")
    if not levers:
        return None
    return "try " + ", ".join(levers[:-1]) + (" or " if len(levers) > 1 else "") + levers[-1]
