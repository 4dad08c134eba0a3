"""Streamed, ordered candidates for the sorts known before the estimate (read path).

``quality``, ``size``, ``downloads`` and ``updated`` can be ordered in SQL: the query sorts the
candidates by narrow, indexed columns (``quants.quality_score`` stored at crawl time by
:func:`crawler.catalog.store.quality_score_of`, ``quants.live``, the scalar copies of the
coefficients in ``memory_models``) and is read in chunks, so ranking stops reading once nothing
left can rank higher (:func:`crawler.rank.rank_candidates` with ``presorted=True``). For
``quality`` the database walks ``ix_quants_search_quality`` and never sorts; the coefficient JSON
and tensor groups are loaded (by :func:`crawler.catalog.candidates.materializer`) only for the
candidates ranking estimates.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from sqlalchemy import and_, case, func, select, text

from crawler.catalog import Catalog
from crawler.catalog.candidates import (
    _bound_clause,
    _filter_clauses,
    candidate_columns,
    candidate_from_row,
)
from crawler.catalog.tables import MemoryModel, Quant, Repo
from crawler.fit import MemoryCoefficients
from crawler.rank import Budget, Candidate, Filters, RunSpec

__all__ = ["count_left_out", "stream_candidates"]


def count_left_out(
    catalog: Catalog, spec: RunSpec, budget: Budget, filters: Filters
) -> tuple[int, int]:
    """(too big by the SQL bound, memory rules not modelled) among the filtered quants."""
    q, r, m = Quant, Repo, MemoryModel
    bound = _bound_clause(spec, budget)
    kind = case((m.status != "ok", "unknown"), (bound, "candidate"), else_="too_big")
    stmt = (
        select(kind, func.count())
        .select_from(q)
        .join(r, r.id == q.repo_pk)
        .join(m, m.quant_id == q.id)
        .where(and_(*_filter_clauses(filters)))
        .group_by(kind)
    )
    with catalog.session() as s:
        counts = {str(k): int(n) for k, n in s.execute(stmt).all()}
    return counts.get("too_big", 0), counts.get("unknown", 0)


def stream_candidates(
    catalog: Catalog, spec: RunSpec, budget: Budget, filters: Filters, sort: str
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
    q, r = Quant, Repo
    # The bound is false where fit_* are NULL (memory rules not modelled): no memory_models test.
    where = and_(*_filter_clauses(filters), _bound_clause(spec, budget))
    score = q.quality_score
    keys: dict[str, Any] = {
        "quality": score.desc().nulls_last(),
        "size": q.size_bytes.desc(),
        "downloads": r.downloads.desc().nulls_last(),
        "updated": r.last_modified.desc().nulls_last(),
    }
    order = [keys[k] for k in (sort, *(t for t in ("quality", "size", "downloads") if t != sort))]
    if sort == "quality":
        # Two reads, so each is one index-ordered scan of ix_quants_search_quality: scores
        # (plain DESC: on PostgreSQL that is NULLS FIRST, the order a backward scan of the
        # index gives, and there are no NULLs in this part), then the quants without a score.
        known = [score.desc(), *order[1:]]
        parts = [
            (and_(where, score.is_not(None)), known),
            (and_(where, score.is_(None)), order[1:]),
        ]
    else:
        parts = [(where, order)]
    matcher = filters.matcher()
    for part_where, part_order in parts:
        stmt = _select_partial().where(part_where).order_by(*part_order, r.repo_id, q.path)
        with catalog.session() as s:
            if catalog.dialect == "postgresql":
                # The planner prices the whole result (~10^5 rows) and JIT-compiles the bound
                # (~0.1-0.3 s); streaming reads a page or two, through the index (a cursor).
                s.execute(text("SET LOCAL jit = off"))
            result = s.execute(stmt.execution_options(yield_per=_STREAM_CHUNK))
            for chunk in result.partitions():
                for row in chunk:
                    if matcher is not None and not matcher.matches_names(
                        row[1], row[6], row[2], row[4], row[5]
                    ):
                        continue
                    yield _partial(row)


def _select_partial() -> Any:
    """The narrow columns of a partial candidate (no coefficient JSON, no tensor groups)."""
    q, r, m = Quant, Repo, MemoryModel
    return (
        select(
            *candidate_columns(),
            m.n_expert,
            m.n_expert_used,
            m.n_embd,
            m.n_vocab,
            m.mtp_available,
            q.quality_score,
        )
        .select_from(q)
        .join(r, r.id == q.repo_pk)
        .join(m, m.quant_id == q.id)
    )


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


#: Rows read from the database at a time when streaming.
_STREAM_CHUNK = 256
