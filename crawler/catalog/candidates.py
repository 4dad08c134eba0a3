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
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Float, Text, and_, case, cast, func, literal, or_, select
from sqlalchemy.sql.elements import ColumnElement

from crawler.catalog import Catalog
from crawler.catalog.tables import File, MemoryModel, Quant, Repo, TensorGroup
from crawler.fit import MemoryCoefficients
from crawler.rank import Budget, Candidate, Filters, GroupStats, RunSpec, prefilter_terms

__all__ = [
    "CandidateSet",
    "ComparedQuant",
    "Comparison",
    "count_left_out",
    "has_math",
    "load_candidates",
    "load_comparison",
    "materializer",
    "sibling_lookup",
    "stream_candidates",
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
    out: list[ColumnElement[bool]] = [Quant.vanished_at.is_(None), Repo.vanished_at.is_(None)]
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
        names = (
            _lower(Repo.repo_id)
            + literal(" ")
            + _lower(base_model)
            + literal(" ")
            + _lower(Quant.path)
            + literal(" ")
            + _lower(Quant.quant_label)
            + literal(" ")
            + _lower(Quant.architecture)
        )
        out += [names.like(f"%{_escape(tok)}%", "\\") for tok in matcher.required_substrings]
    return out


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _bound_clause(spec: RunSpec, budget: Budget) -> ColumnElement[bool]:
    """:func:`crawler.rank.lower_bound_bytes` <= budget, over the scalar columns."""
    ctx, ratio, fixed_ratio, constant = prefilter_terms(spec)
    m = MemoryModel
    total: ColumnElement[Any] = func.coalesce(m.weights_bytes, 0)
    if not spec.cpu_moe:
        total = total + func.coalesce(m.expert_bytes, 0)
    if spec.mtp:
        total = total + func.coalesce(m.mtp_weights_bytes, 0)
    # Floats on purpose: 262144 x 16 KiB/token overflows nothing, but keeps SQLite and
    # PostgreSQL integer rules out of the comparison. Rounded down: still a lower bound.
    total = total + func.coalesce(m.kv_bytes_per_token_f16, 0) * (ctx * ratio)
    total = total + func.coalesce(m.fixed_bytes_f16, 0) * fixed_ratio
    return total <= float(budget.device_bytes - constant)


def _aware(value: datetime | None) -> datetime | None:
    # SQLite returns naive datetimes for timezone-aware columns; they were written in UTC.
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def load_candidates(
    catalog: Catalog,
    spec: RunSpec,
    budget: Budget,
    filters: Filters,
    *,
    partial: bool = False,
    groups: bool = True,
    quality_sums: bool = False,
) -> CandidateSet:
    """Candidates that pass the filters and may fit (exact fit is decided by ranking).

    ``partial``: coefficients hold only what ranking needs before estimating (status, expert
    counts, n_embd, n_vocab, mtp_available; read with SQL JSON functions); :func:`materializer`
    completes them. ``groups=False`` leaves tensor groups to :func:`materializer` as well;
    ``quality_sums`` then computes each candidate's quality score in SQL
    (:func:`crawler.quality.score_from_sums`) so ranking can order by it. Falls back to loading
    the groups when the database has no ``power()`` (SQLite built without math functions).
    """
    if quality_sums and not groups and not has_math(catalog):
        groups = True
    q, r, m = Quant, Repo, MemoryModel
    base_model = func.coalesce(q.base_model, r.base_model)
    where = _filter_clauses(filters)
    columns = (
        q.id,
        r.repo_id,
        q.path,
        q.size_bytes,
        q.quant_label,
        q.architecture,
        base_model,
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
        *(_partial_columns() if partial else (cast(m.coefficients, Text),)),
    )
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
        found_groups = _load_groups(s, [row[0] for row in rows]) if groups else {}
        hints: dict[int, float | None] = {}
        if quality_sums and not groups:
            ids = select(q.id).join(r, r.id == q.repo_pk).join(m, m.quant_id == q.id)
            hints = _quality_hints(s, ids.where(and_(*where, m.status == "ok", bound)))
    out = []
    for row in rows:
        if partial:
            n_expert, n_used, n_embd, n_vocab, mtp = row[20:25]
            coefficients = MemoryCoefficients(
                status="ok",
                n_expert=int(n_expert or 0),
                n_expert_used=int(n_used or 0),
                n_embd=int(n_embd or 0),
                n_vocab=int(n_vocab or 0),
                mtp_available=bool(mtp),
            )
        else:
            coefficients = MemoryCoefficients.from_json(json.loads(row[20] or "{}"))
        out.append(
            Candidate(
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
                groups=found_groups.get(row[0], ()),
                quality_hint=hints.get(row[0]),
            )
        )
    return CandidateSet(
        candidates=tuple(out),
        prefiltered_out=counts.get("too_big", 0),
        unknown_memory=counts.get("unknown", 0),
    )


def has_math(catalog: Catalog) -> bool:
    """True when SQL ``power()`` exists (PostgreSQL; SQLite >= 3.35 built with math functions)."""
    try:
        with catalog.engine.connect() as conn:
            conn.exec_driver_sql("SELECT power(2.0, 1.0)")
        return True
    except Exception:
        return False


def _sums_select(ids: Any) -> Any:
    """Per quant, the four sums :func:`crawler.quality.score_from_sums` takes, over its groups.

    Mirrors ``quality.estimate_quality``: sensitivity x active parameters as weights (routed
    experts count n_used / n_expert, the input embedding one n_embd x n_embd matrix), the MTP
    block left out, bits = bpw (else bytes over parameters).
    """
    from crawler.quality import SENSITIVITY

    tg, c = TensorGroup, MemoryModel.coefficients
    # The four JSON fields once per quant (json_extract parses the whole document each call).
    dims = (
        select(
            MemoryModel.quant_id.label("quant_id"),
            c["n_expert"].as_float().label("n_exp"),
            c["n_expert_used"].as_float().label("used"),
            c["n_embd"].as_float().label("embd"),
            c["n_vocab"].as_float().label("vocab"),
        )
        .where(MemoryModel.quant_id.in_(ids.scalar_subquery()))
        # GROUP BY keeps SQLite from flattening this into the join (one parse per group row)
        .group_by(MemoryModel.quant_id)
        .subquery("dims")
    )
    n_exp, used, embd, vocab = dims.c.n_exp, dims.c.used, dims.c.embd, dims.c.vocab
    n_params = cast(tg.n_params, Float)
    active = case(
        (
            and_(tg.group_name == "ffn_exps", n_exp > 0),
            n_params * case((used >= 1, used), else_=1.0) / n_exp,
        ),
        (
            and_(tg.group_name == "token_embd", embd > 0, vocab > 0),
            case((n_params < embd * embd, n_params), else_=embd * embd),
        ),
        else_=n_params,
    )
    sens = case(*((tg.group_name == g, v) for g, v in SENSITIVITY.items()), else_=1.0)
    bits = case(
        (tg.bpw.is_not(None), cast(tg.bpw, Float)),
        (and_(tg.n_params > 0, tg.n_bytes > 0), cast(tg.n_bytes, Float) * 8.0 / n_params),
    )
    valid = and_(tg.group_name != "mtp", tg.n_params > 0)
    noisy = and_(valid, bits.is_not(None), sens > 0)
    return (
        select(
            tg.quant_id.label("quant_id"),
            func.sum(case((noisy, sens * active * func.power(2.0, -2.0 * bits)), else_=0.0)).label(
                "num"
            ),
            func.sum(case((noisy, sens * active), else_=0.0)).label("den"),
            func.sum(case((valid, n_params), else_=0.0)).label("params"),
            func.sum(case((valid, active), else_=0.0)).label("act"),
            func.max(n_exp).label("moe"),
            func.max(used).label("used"),
            func.max(embd).label("embd"),
            func.max(vocab).label("vocab"),
        )
        .join(dims, dims.c.quant_id == tg.quant_id)
        .group_by(tg.quant_id)
    )


def _quality_hints(s: Any, ids: Any) -> dict[int, float | None]:
    """Quality score per quant from the four SQL sums (crawler.quality.score_from_sums)."""
    from crawler.quality import score_from_sums

    return {
        qid: score_from_sums(
            float(num or 0), float(den or 0), float(p or 0), float(a or 0), (ne or 0) > 0
        )
        for qid, num, den, p, a, ne, *_dims in s.execute(_sums_select(ids)).all()
    }


def _partial_columns() -> tuple[ColumnElement[Any], ...]:
    c = MemoryModel.coefficients
    return (
        c["n_expert"].as_integer(),
        c["n_expert_used"].as_integer(),
        c["n_embd"].as_integer(),
        c["n_vocab"].as_integer(),
        c["mtp_available"].as_boolean(),
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
            for model in (File, Quant):
                rows = s.execute(
                    select(Repo.repo_id, model.path)
                    .join(Repo, Repo.id == model.repo_pk)
                    .where(Repo.repo_id.in_(list(found)), model.vanished_at.is_(None))
                ).all()
                for repo_id, path in rows:
                    found[repo_id].add(path)
        return {r: tuple(sorted(paths)) for r, paths in found.items()}

    return lookup


# --- compare -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ComparedQuant:
    """One quant of a base model, for ``quants compare``."""

    repo_id: str
    author: str | None
    path: str
    quant_label: str | None
    size_bytes: int
    groups: tuple[GroupStats, ...]
    mtp_present: bool | None
    mtp_state: str | None
    mtp_preserved: bool | None
    mtp_min_bits: float | None
    attn_min_bits: float | None
    attn_preserved: bool | None
    loadable_by_mainline: bool | None


@dataclass(frozen=True, slots=True)
class Comparison:
    """Every quant of one base model in the catalog, smallest first."""

    base_model: str
    quants: tuple[ComparedQuant, ...]


def load_comparison(catalog: Catalog, query: str) -> Comparison:
    """The quants of the one base model ``query`` names (fuzzy, as ``search``).

    Quants without a recorded base model are grouped by repo. UsageError when nothing matches,
    or when several base models do and none is named exactly (the message lists them).
    """
    from crawler.errors import UsageError
    from crawler.query import QueryMatcher

    matcher = QueryMatcher(query)
    q, r = Quant, Repo
    base_model = func.coalesce(q.base_model, r.base_model)
    stmt = (
        select(
            q.id,
            r.repo_id,
            r.author,
            q.path,
            q.quant_label,
            q.architecture,
            base_model,
            q.size_bytes,
            q.mtp_present,
            q.mtp_state,
            q.mtp_preserved,
            q.mtp_min_bits,
            q.attn_min_bits,
            q.attn_preserved,
            q.loadable_by_mainline,
        )
        .join(r, r.id == q.repo_pk)
        .where(q.vanished_at.is_(None), r.vanished_at.is_(None), q.analysed_at.is_not(None))
    )
    like = [
        (
            _lower(r.repo_id) + literal(" ") + _lower(base_model) + literal(" ") + _lower(q.path)
        ).like(f"%{_escape(tok)}%", "\\")
        for tok in matcher.required_substrings
    ]
    with catalog.session() as s:
        rows = [
            row
            for row in s.execute(stmt.where(*like)).all()
            if matcher.matches_names(row[1], row[6], row[3], row[4], row[5])
        ]
        by_base: dict[str, list[Any]] = {}
        for row in rows:
            by_base.setdefault(row[6] or f"{row[1]} (no base model recorded)", []).append(row)
        if not by_base:
            raise UsageError(f"no quant in the catalog matches {query!r}")
        key = _pick_base(query, sorted(by_base))
        chosen = by_base[key]
        groups = _load_groups(s, [row[0] for row in chosen])
    quants = [
        ComparedQuant(
            repo_id=row[1],
            author=row[2],
            path=row[3],
            quant_label=row[4],
            size_bytes=row[7],
            groups=groups.get(row[0], ()),
            mtp_present=row[8],
            mtp_state=row[9],
            mtp_preserved=row[10],
            mtp_min_bits=row[11],
            attn_min_bits=row[12],
            attn_preserved=row[13],
            loadable_by_mainline=row[14],
        )
        for row in chosen
    ]
    quants.sort(key=lambda c: (c.size_bytes, c.repo_id, c.path))
    return Comparison(base_model=key, quants=tuple(quants))


def _pick_base(query: str, bases: Sequence[str]) -> str:
    from crawler.errors import UsageError

    if len(bases) == 1:
        return bases[0]
    wanted = query.strip().lower()
    exact = [b for b in bases if b.lower() == wanted or b.lower().endswith("/" + wanted)]
    if len(exact) == 1:
        return exact[0]
    listed = "; ".join(bases[:10]) + (f" (+{len(bases) - 10} more)" if len(bases) > 10 else "")
    raise UsageError(f"{query!r} matches several base models: {listed}; name one of them")


# --- streamed, ordered search (sorts known before the estimate) -------------------------------


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


def _score_sql(sums: Any) -> ColumnElement[Any]:
    """crawler.quality's score from the four sums, in SQL (ln/exp/sqrt: SQLite math, PostgreSQL)."""
    import math

    from crawler.quality import score_constants

    k = score_constants()
    num, den = cast(sums.c.num, Float), cast(sums.c.den, Float)
    b_eff = -0.5 * func.ln(num / den) / math.log(2.0)
    ln_kld = k["kld_a"] + k["kld_c"] * b_eff
    kept = 1.0 - k["loss_m"] * func.exp(k["loss_p"] * ln_kld) / k["mmlu_span"]
    retention = case((kept < 0.0, 0.0), (kept > 1.0, 1.0), else_=kept)
    p_eff = case(
        (sums.c.moe > 0, func.sqrt(cast(sums.c.params, Float) * cast(sums.c.act, Float))),
        else_=cast(sums.c.params, Float),
    )
    cap = k["cap_max"] / (1.0 + func.exp(k["cap_k"] * (math.log(k["cap_p0"]) - func.ln(p_eff))))
    ok = and_(sums.c.den > 0, sums.c.num > 0, sums.c.params > 0, sums.c.act > 0)
    return case((ok, 100.0 * cap * retention), else_=None)


def stream_candidates(
    catalog: Catalog, spec: RunSpec, budget: Budget, filters: Filters, sort: str
) -> Generator[Candidate, None, None]:
    """Partial candidates in :func:`crawler.rank.pre_key` order, read from the database lazily.

    For ``quality``/``size``/``downloads``/``updated``: one query, ordered by the sort key and
    the tie-breaks known before estimating (quality computed in SQL from the group sums), read in
    chunks, so ranking stops reading once nothing left can rank higher. Complete the candidates
    with :func:`materializer`; close the iterator when done.
    """
    from crawler.rank import EARLY_STOP_SORTS

    if sort not in EARLY_STOP_SORTS:
        raise ValueError(f"sort {sort!r} needs the estimate; use load_candidates")
    q, r, m = Quant, Repo, MemoryModel
    base_model = func.coalesce(q.base_model, r.base_model)
    where = and_(*_filter_clauses(filters), m.status == "ok", _bound_clause(spec, budget))
    ids = select(q.id).join(r, r.id == q.repo_pk).join(m, m.quant_id == q.id).where(where)
    sums = _sums_select(ids).subquery("sums")
    score = _score_sql(sums).label("score")
    keys = {
        "quality": score.desc().nulls_last(),
        "size": q.size_bytes.desc(),
        "downloads": r.downloads.desc().nulls_last(),
        "updated": r.last_modified.desc().nulls_last(),
    }
    order = [keys[k] for k in (sort, *(t for t in ("quality", "size", "downloads") if t != sort))]
    stmt = (
        select(
            q.id,
            r.repo_id,
            q.path,
            q.size_bytes,
            q.quant_label,
            q.architecture,
            base_model,
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
            sums.c.moe,
            sums.c.used,
            sums.c.embd,
            sums.c.vocab,
            m.coefficients["mtp_available"].as_boolean(),
            score,
        )
        .join(r, r.id == q.repo_pk)
        .join(m, m.quant_id == q.id)
        .outerjoin(sums, sums.c.quant_id == q.id)
        .where(where)
        .order_by(*order, r.repo_id, q.path)
    )
    matcher = filters.matcher()
    with catalog.session() as s:
        result = s.execute(stmt.execution_options(yield_per=_STREAM_CHUNK))
        for chunk in result.partitions():
            for row in chunk:
                if matcher is not None and not matcher.matches_names(
                    row[1], row[6], row[2], row[4], row[5]
                ):
                    continue
                n_expert, n_used, n_embd, n_vocab, mtp = row[20:25]
                yield Candidate(
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
                    coefficients=MemoryCoefficients(
                        status="ok",
                        n_expert=int(n_expert or 0),
                        n_expert_used=int(n_used or 0),
                        n_embd=int(n_embd or 0),
                        n_vocab=int(n_vocab or 0),
                        mtp_available=bool(mtp),
                    ),
                    quality_hint=None if row[25] is None else float(row[25]),
                )


#: Rows read from the database at a time when streaming.
_STREAM_CHUNK = 256
