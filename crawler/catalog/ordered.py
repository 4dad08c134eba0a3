"""Streamed, ordered candidates for every --sort (the search's read path).

Read in chunks by a value or an upper bound of it, so ranking stops once nothing can rank higher.
Details: docs/internals/catalog.md#ordered
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

from crawler.catalog.candidates import CANDIDATE_COLUMNS, JOINED, Where, bounded, candidate_from_row
from crawler.catalog.reader import Reader, placeholders
from crawler.fit import MemoryCoefficients
from crawler.ranking.bounds import ctx_bound_sql, margin_bound_sql, speed_bound_sql
from crawler.ranking.model import (
    BOUNDED_SORTS,
    EARLY_STOP_SORTS,
    Budget,
    Candidate,
    Filters,
    RunSpec,
)

__all__ = ["stream_candidates"]

#: Rows read from the database at a time when streaming.
_STREAM_CHUNK = 256
#: Rows of the first page of a computed order (margin, ctx); later pages grow eightfold. Each
#: page costs a scan of the index, so the first is large (its top-N sort costs little more).
_FIRST_PAGE = 2048

_ORDER = {
    "quality": "q.quality_score DESC NULLS LAST",
    "size": "q.size_bytes DESC",
    "downloads": "r.downloads DESC NULLS LAST",
    "updated": "r.last_modified DESC NULLS LAST",
}
#: The stored sort values that may be missing (they sort last).
_NULLABLE = {"quality": "q.quality_score", "downloads": "r.downloads", "updated": "r.last_modified"}
_PARTIAL_COLUMNS = (
    f"SELECT {CANDIDATE_COLUMNS}, m.n_expert, m.n_expert_used, m.n_embd, m.n_vocab,"
    " m.mtp_available, q.quality_score"
)
_PARTIAL = f"{_PARTIAL_COLUMNS} FROM {JOINED}"
# Repo-level orders walk the repos' index and each repo's quants: SQLite keeps the left table of
# a CROSS JOIN outermost (without it, it sorts every candidate: ~0.8 s at 200k quants); for
# PostgreSQL it is an inner join like any other.
_BY_REPO = (
    f"{_PARTIAL_COLUMNS} FROM repos r CROSS JOIN quants q JOIN memory_models m ON m.quant_id = q.id"
)


def stream_candidates(
    reader: Reader, spec: RunSpec, budget: Budget, filters: Filters, sort: str
) -> Generator[Candidate, None, None]:
    """Partial candidates in crawler.ranking.order.pre_key order, read lazily.

    Complete them with crawler.catalog.candidates.materializer; close the iterator when
    done. ``--sort speed`` needs ``budget.bandwidth_gb_s``.
    """
    if sort not in EARLY_STOP_SORTS + BOUNDED_SORTS:
        raise ValueError(f"unknown sort {sort!r}")
    # The bound is not true where fit_* are NULL (memory rules not modelled).
    w = bounded(filters, spec, budget)
    matcher = filters.matcher()
    reader.without_jit()
    if sort in BOUNDED_SORTS:
        rows: Iterator[tuple[tuple[Any, ...], float | None]] = _computed_order(
            reader, w, spec, budget, sort
        )
    else:
        rows = ((row, None) for row in _walk(reader, w, sort))
    for row, hint in rows:
        if matcher is not None and not matcher.matches_names(
            row[1], row[6], row[2], row[4], row[5]
        ):
            continue
        yield _partial(row, hint)


def _walk(reader: Reader, w: Where, sort: str) -> Iterator[tuple[Any, ...]]:
    """Rows in the order of a stored column (an index walk; the database does not sort)."""
    tie_breaks = ("quality", "size", "downloads")
    order = [_ORDER[k] for k in (sort, *(t for t in tie_breaks if t != sort))]
    column = _NULLABLE.get(sort)
    if column is not None:
        # Two reads, so each is one index-ordered walk: the values (plain DESC: on PostgreSQL
        # that is NULLS FIRST, the order a backward scan of an index gives, and there are no
        # NULLs in this part), then the quants without one. One read ordered NULLS LAST makes
        # PostgreSQL sort every candidate (~0.5 s at 200k quants).
        parts = [
            (f"{column} IS NOT NULL", [f"{column} DESC", *order[1:]]),
            (f"{column} IS NULL", order[1:]),
        ]
    else:
        parts = [("TRUE", order)]
    by_repo = sort in ("downloads", "updated")
    for part, part_order in parts:
        sql = (
            f"{_BY_REPO} WHERE q.repo_pk = r.id AND" if by_repo else f"{_PARTIAL} WHERE"
        ) + f" {w.sql} AND {part} ORDER BY {', '.join(part_order)}, r.repo_id, q.path"
        yield from reader.stream(sql, w.params, chunk=_STREAM_CHUNK)


def _computed_order(
    reader: Reader, w: Where, spec: RunSpec, budget: Budget, sort: str
) -> Iterator[tuple[tuple[Any, ...], float | None]]:
    """(row, bound) by a bound the database computes per request: pages of quant ids in
    (bound, quality) order, then the rows of each page."""
    bounds = {"margin": margin_bound_sql, "ctx": ctx_bound_sql, "speed": speed_bound_sql}
    key, params = bounds[sort](spec, budget)
    repo_join = " JOIN repos r ON r.id = q.repo_pk" if w.repo else ""
    head = (
        f"SELECT q.id, {key} AS bound_key FROM quants q{repo_join} WHERE {w.sql}"
        f" ORDER BY bound_key DESC, q.quality_score DESC NULLS LAST, q.id"
        " LIMIT :page_limit OFFSET :page_offset"
    )
    offset, size = 0, _FIRST_PAGE
    sent: set[int] = set()  # pages are read apart: never send a quant twice
    while True:
        page = reader.rows(head, {**w.params, **params, "page_limit": size, "page_offset": offset})
        if not page:
            return
        for i in range(0, len(page), _STREAM_CHUNK):  # rows as ranking asks for them
            part = page[i : i + _STREAM_CHUNK]
            marks, ids = placeholders("id", [qid for qid, _ in part])
            sql = f"{_PARTIAL} WHERE q.id IN ({marks})"
            found = {row[0]: row for row in reader.rows(sql, ids)}
            for qid, value in part:
                if qid in found and qid not in sent:
                    sent.add(qid)
                    yield found[qid], float(value)
        if len(page) < size:
            return
        offset, size = offset + size, size * 8


def _partial(row: tuple[Any, ...], bound_hint: float | None) -> Candidate:
    n_expert, n_used, n_embd, n_vocab, mtp = row[20:25]
    coefficients = MemoryCoefficients(
        status="ok",
        n_expert=int(n_expert or 0),
        n_expert_used=int(n_used or 0),
        n_embd=int(n_embd or 0),
        n_vocab=int(n_vocab or 0),
        mtp_available=bool(mtp),
    )
    hint = None if row[25] is None else float(row[25])
    return candidate_from_row(
        row, coefficients=coefficients, quality_hint=hint, bound_hint=bound_hint
    )
