"""Streamed, ordered candidates for the sorts known before the estimate (read path).

``quality``, ``size``, ``downloads`` and ``updated`` can be ordered in SQL: the query sorts the
candidates by narrow, indexed columns (``quants.quality_score`` stored at crawl time by
:func:`crawler.catalog.store.quality_score_of`, ``quants.live``, the ``fit_*`` copies of the
coefficients) and is read in chunks, so ranking stops reading once nothing left can rank higher
(:func:`crawler.rank.rank_candidates` with ``presorted=True``). For ``quality`` the database walks
``ix_quants_search_quality`` and never sorts; the coefficient JSON and tensor groups are loaded
(by :func:`crawler.catalog.candidates.materializer`) only for the candidates ranking estimates.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from crawler.catalog.candidates import CANDIDATE_COLUMNS, JOINED, bounded, candidate_from_row
from crawler.catalog.reader import Reader
from crawler.fit import MemoryCoefficients
from crawler.rank import Budget, Candidate, Filters, RunSpec

__all__ = ["stream_candidates"]

#: Rows read from the database at a time when streaming.
_STREAM_CHUNK = 256

_ORDER = {
    "quality": "q.quality_score DESC NULLS LAST",
    "size": "q.size_bytes DESC",
    "downloads": "r.downloads DESC NULLS LAST",
    "updated": "r.last_modified DESC NULLS LAST",
}


def stream_candidates(
    reader: Reader, spec: RunSpec, budget: Budget, filters: Filters, sort: str
) -> Generator[Candidate, None, None]:
    """Partial candidates in :func:`crawler.rank.pre_key` order, read from the database lazily.

    For ``quality``/``size``/``downloads``/``updated``: ordered by the sort key and the
    tie-breaks known before estimating (the stored ``quality_score``), read in chunks, so
    ranking stops reading once nothing left can rank higher. Complete the candidates with
    :func:`crawler.catalog.candidates.materializer`; close the iterator when done.
    """
    from crawler.rank import EARLY_STOP_SORTS

    if sort not in EARLY_STOP_SORTS:
        raise ValueError(f"sort {sort!r} needs the estimate; use load_candidates")
    # The bound is not true where fit_* are NULL (memory rules not modelled).
    w = bounded(filters, spec, budget)
    order = [_ORDER[k] for k in (sort, *(t for t in ("quality", "size", "downloads") if t != sort))]
    if sort == "quality":
        # Two reads, so each is one index-ordered scan of ix_quants_search_quality: scores
        # (plain DESC: on PostgreSQL that is NULLS FIRST, the order a backward scan of the
        # index gives, and there are no NULLs in this part), then the quants without a score.
        parts = [
            ("q.quality_score IS NOT NULL", ["q.quality_score DESC", *order[1:]]),
            ("q.quality_score IS NULL", order[1:]),
        ]
    else:
        parts = [("TRUE", order)]
    matcher = filters.matcher()
    reader.without_jit()
    for part, part_order in parts:
        sql = (
            f"SELECT {CANDIDATE_COLUMNS}, m.n_expert, m.n_expert_used, m.n_embd, m.n_vocab,"
            f" m.mtp_available, q.quality_score FROM {JOINED} WHERE {w.sql} AND {part}"
            f" ORDER BY {', '.join(part_order)}, r.repo_id, q.path"
        )
        for row in reader.stream(sql, w.params, chunk=_STREAM_CHUNK):
            if matcher is not None and not matcher.matches_names(
                row[1], row[6], row[2], row[4], row[5]
            ):
                continue
            yield _partial(row)


def _partial(row: Any) -> Candidate:
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
    return candidate_from_row(row, coefficients=coefficients, quality_hint=hint)
