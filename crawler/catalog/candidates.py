"""The search read path: catalog rows -> :class:`crawler.rank.Candidate` (frozen dataclasses).

One SQL query applies the cheap, exact-safe part of the search in the database:

* the memory prefilter: :func:`crawler.rank.lower_bound_bytes` written in SQL over the
  ``memory_models`` scalar columns (weights + experts + KV per token x ctx + fixed + CUDA
  constants <= budget). It is a lower bound of the exact estimate, so it never drops a quant that
  fits; the exact estimate in :func:`crawler.rank.rank_candidates` decides the rest;
* the column filters (architecture, author, base model, label, loadable, MTP, attention bits);
* for query tokens that contain a digit (which :class:`~crawler.rank.QueryMatcher` matches only
  exactly), a substring test, so "qwen3.6 27b" narrows the scan in SQL.

Coefficient JSON is read as text and parsed only for rows that survive the fuzzy query match.
ORM rows never leave this module.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Text, and_, case, cast, func, or_, select, true
from sqlalchemy.sql.elements import ColumnElement

from crawler.catalog import Catalog
from crawler.catalog.tables import File, MemoryModel, Quant, Repo, TensorGroup
from crawler.fit import MemoryCoefficients
from crawler.rank import Budget, Candidate, Filters, GroupStats, RunSpec, prefilter_terms

__all__ = [
    "CandidateSet",
    "load_candidates",
    "materializer",
    "sibling_lookup",
]

# Bind-parameter budget per IN (...) list; SQLite allows 32766 variables, PostgreSQL 65535.
_IN_CHUNK = 5000


@dataclass(frozen=True, slots=True)
class CandidateSet:
    """Candidates for one search plus what the database left out."""

    candidates: tuple[Candidate, ...]
    prefiltered_out: int  # rows the SQL lower bound excluded (cannot fit; fuzzy query not applied)
    unknown_memory: int  # rows whose memory rules are not modelled (status "unknown")


def _lower(col: Any) -> ColumnElement[Any]:
    return func.lower(func.coalesce(col, ""))


def _filter_clauses(filters: Filters) -> list[ColumnElement[bool]]:
    """SQL for :meth:`Filters.accepts` minus the fuzzy part (same semantics, case-insensitive)."""
    base_model = func.coalesce(Quant.base_model, Repo.base_model)
    # ``live`` (kept by crawler.catalog.store) = neither the quant nor its repo vanished; an
    # equality, so ``ix_quants_search_quality`` can serve it (``IS true`` is not indexable).
    out: list[ColumnElement[bool]] = [Quant.live == true()]
    if filters.mtp:
        out += [Quant.mtp_present.is_(True), Quant.mtp_preserved.is_(True)]
    if filters.min_attn_bits is not None:
        out.append(Quant.attn_min_bits >= filters.min_attn_bits)
    if filters.arch:
        out.append(_lower(Quant.architecture) == filters.arch.lower())
    if filters.author:
        out.append(_lower(Repo.author) == filters.author.lower())
    if filters.base:
        b = filters.base.lower()
        out.append(or_(_lower(base_model) == b, _lower(base_model).like(f"%/{_escape(b)}", "\\")))
    if filters.label:
        out.append(_lower(Quant.quant_label) == filters.label.lower())
    if filters.loadable:
        out.append(Quant.loadable_by_mainline.is_(True))
    matcher = filters.matcher()
    if matcher is not None:
        # quants.search_text (crawler.catalog.store.search_text_sql) is NULL only when too long
        # to index: those rows pass here and the Python matcher decides, as it does for all.
        text = Quant.search_text
        out += [
            or_(text.like(f"%{_escape(tok)}%", "\\"), text.is_(None))
            for tok in matcher.required_substrings
        ]
    return out


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _bound_clause(spec: RunSpec, budget: Budget) -> ColumnElement[bool]:
    """:func:`crawler.rank.lower_bound_bytes` <= budget, over the quants' ``fit_*`` columns.

    Those are copies of ``memory_models``' scalar columns, NULL unless its status is "ok", so the
    clause is false for unmodelled quants and ``ix_quants_search_quality`` covers it.
    """
    ctx, ratio, fixed_ratio, constant = prefilter_terms(spec)
    q = Quant
    total: ColumnElement[Any] = q.fit_weights_bytes.expression
    if not spec.cpu_moe:
        total = total + func.coalesce(q.fit_expert_bytes, 0)
    if spec.mtp:
        total = total + func.coalesce(q.fit_mtp_bytes, 0)
    # Floats on purpose: 262144 x 16 KiB/token overflows nothing, but keeps SQLite and
    # PostgreSQL integer rules out of the comparison. Rounded down: still a lower bound.
    total = total + func.coalesce(q.fit_kv_per_token, 0) * (ctx * ratio)
    total = total + func.coalesce(q.fit_fixed_bytes, 0) * fixed_ratio
    return total <= float(budget.device_bytes - constant)


def _aware(value: datetime | None) -> datetime | None:
    # SQLite returns naive datetimes for timezone-aware columns; they were written in UTC.
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def candidate_columns() -> tuple[Any, ...]:
    """The 20 leading columns every candidate query selects (see :func:`candidate_from_row`)."""
    q, r = Quant, Repo
    return (
        q.id,
        r.repo_id,
        q.path,
        q.size_bytes,
        q.quant_label,
        q.architecture,
        func.coalesce(q.base_model, r.base_model),
        r.author,
        q.n_params,
        q.mtp_present,
        q.mtp_state,
        q.mtp_preserved,
        q.mtp_min_bits,
        q.attn_min_bits,
        q.attn_preserved,
        q.loadable_by_mainline,
        q.dynamic,
        r.downloads,
        r.likes,
        r.last_modified,
    )


def candidate_from_row(
    row: Any,
    *,
    coefficients: MemoryCoefficients,
    groups: tuple[Any, ...] = (),
    quality_hint: float | None = None,
) -> Candidate:
    """A Candidate from a row that starts with :func:`candidate_columns`."""
    return Candidate(
        quant_id=row[0],
        repo_id=row[1],
        path=row[2],
        size_bytes=row[3],
        quant_label=row[4],
        architecture=row[5],
        base_model=row[6],
        author=row[7],
        n_params=row[8],
        mtp_present=row[9],
        mtp_state=row[10],
        mtp_preserved=row[11],
        mtp_min_bits=row[12],
        attn_min_bits=row[13],
        attn_preserved=row[14],
        loadable_by_mainline=row[15],
        dynamic=row[16],
        downloads=row[17],
        likes=row[18],
        last_modified=_aware(row[19]),
        coefficients=coefficients,
        groups=groups,
        quality_hint=quality_hint,
    )


def load_candidates(
    catalog: Catalog,
    spec: RunSpec,
    budget: Budget,
    filters: Filters,
) -> CandidateSet:
    """Candidates that pass the filters and may fit (exact fit is decided by ranking).

    Everything loaded: coefficients and tensor groups. For sorts known before the estimate,
    :func:`crawler.catalog.ordered.stream_candidates` reads far less.
    """
    q, r, m = Quant, Repo, MemoryModel
    where = _filter_clauses(filters)
    columns = (*candidate_columns(), cast(m.coefficients, Text))
    bound = _bound_clause(spec, budget)
    joined = select(*columns).join(r, r.id == q.repo_pk).join(m, m.quant_id == q.id)
    # One scan counts what the database leaves out: unknown memory rules, and above the bound.
    kind = case((m.status != "ok", "unknown"), (bound, "candidate"), else_="too_big")
    counted = (
        select(kind, func.count())
        .select_from(q)
        .join(r, r.id == q.repo_pk)
        .join(m, m.quant_id == q.id)
        .where(and_(*where))
        .group_by(kind)
    )
    with catalog.session() as s:
        rows = s.execute(joined.where(and_(*where, m.status == "ok", bound))).all()
        counts: dict[str, int] = {str(k): int(n) for k, n in s.execute(counted).all()}
        matcher = filters.matcher()
        if matcher is not None:
            rows = [
                row for row in rows if matcher.matches_names(row[1], row[6], row[2], row[4], row[5])
            ]
        found_groups = _load_groups(s, [row[0] for row in rows])
    out = [
        candidate_from_row(
            row,
            coefficients=MemoryCoefficients.from_json(json.loads(row[20] or "{}")),
            groups=found_groups.get(row[0], ()),
        )
        for row in rows
    ]
    return CandidateSet(
        candidates=tuple(out),
        prefiltered_out=counts.get("too_big", 0),
        unknown_memory=counts.get("unknown", 0),
    )


def materializer(catalog: Catalog) -> Callable[[Sequence[Candidate]], list[Candidate]]:
    """Complete partial candidates (full coefficients, tensor groups) with two queries a batch."""

    def complete(batch: Sequence[Candidate]) -> list[Candidate]:
        ids = [c.quant_id for c in batch]
        with catalog.session() as s:
            text = dict(
                s.execute(
                    select(MemoryModel.quant_id, cast(MemoryModel.coefficients, Text)).where(
                        MemoryModel.quant_id.in_(ids)
                    )
                ).all()
            )
            missing = [c.quant_id for c in batch if not c.groups]
            found = _load_groups(s, missing) if missing else {}
        return [
            dataclasses.replace(
                c,
                coefficients=MemoryCoefficients.from_json(json.loads(text.get(c.quant_id) or "{}")),
                groups=c.groups or found.get(c.quant_id, ()),
            )
            for c in batch
        ]

    return complete


def _chunks(ids: Sequence[int]) -> Iterator[Sequence[int]]:
    for i in range(0, len(ids), _IN_CHUNK):
        yield ids[i : i + _IN_CHUNK]


def _load_groups(s: Any, ids: Sequence[int]) -> dict[int, tuple[GroupStats, ...]]:
    t = TensorGroup
    found: dict[int, list[GroupStats]] = {}
    for chunk in _chunks(ids):
        rows = s.execute(
            select(t.quant_id, t.group_name, t.n_params, t.n_bytes, t.bpw, t.min_bits, t.max_bits)
            .where(t.quant_id.in_(chunk))
            .order_by(t.quant_id, t.group_name)
        ).all()
        for qid, name, n_params, n_bytes, bpw, lo, hi in rows:
            found.setdefault(qid, []).append(GroupStats(name, n_params, n_bytes, bpw, lo, hi))
    return {k: tuple(v) for k, v in found.items()}


def sibling_lookup(catalog: Catalog) -> Callable[[Sequence[str]], dict[str, tuple[str, ...]]]:
    """``repo_ids -> {repo_id: paths of the repo's present files}``, one query per call.

    Ranking calls it once with the repos of the rows it returns, for the ``-hf`` choice.
    """

    def lookup(repo_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        found: dict[str, set[str]] = {r: set() for r in repo_ids}
        with catalog.session() as s:
            # Repo keys first: a join lets the planner scan the quants' vanished_at index.
            pks = dict(
                s.execute(select(Repo.id, Repo.repo_id).where(Repo.repo_id.in_(list(found)))).all()
            )
            for model in (File, Quant):
                # vanished_at tested here, not in SQL: with it in the WHERE clause SQLite walks
                # ix_quants_live (every live quant) instead of the few rows of these repos.
                rows = s.execute(
                    select(model.repo_pk, model.path, model.vanished_at).where(
                        model.repo_pk.in_(list(pks))
                    )
                ).all()
                for repo_pk, path, vanished_at in rows:
                    if vanished_at is None:
                        found[pks[repo_pk]].add(path)
        return {r: tuple(sorted(paths)) for r, paths in found.items()}

    return lookup
