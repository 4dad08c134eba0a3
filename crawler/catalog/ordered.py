"""Streamed, ordered candidates for the sorts known before the estimate (read path).

``quality``, ``size``, ``downloads`` and ``updated`` can be ordered in SQL: one query sorts the
candidates (quality computed in SQL from per-quant sums over the tensor groups, the same formula
as :mod:`crawler.quality`) and is read in chunks, so ranking stops reading once nothing left can
rank higher (:func:`crawler.rank.rank_candidates` with ``presorted=True``). Needs SQL ``ln``,
``exp``, ``power``: PostgreSQL, or SQLite built with math functions (:func:`has_math`).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from sqlalchemy import Float, and_, case, cast, func, select
from sqlalchemy.sql.elements import ColumnElement

from crawler.catalog import Catalog
from crawler.catalog.candidates import _aware, _bound_clause, _filter_clauses
from crawler.catalog.tables import MemoryModel, Quant, Repo, TensorGroup
from crawler.fit import MemoryCoefficients
from crawler.rank import Budget, Candidate, Filters, RunSpec

__all__ = ["count_left_out", "has_math", "stream_candidates"]


def has_math(catalog: Catalog) -> bool:
    """True when SQL ``power()`` exists (PostgreSQL; SQLite >= 3.35 built with math functions)."""
    try:
        with catalog.engine.connect() as conn:
            conn.exec_driver_sql("SELECT power(2.0, 1.0)")
        return True
    except Exception:
        return False


def _sums_select(in_ids: Any) -> Any:
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
        .where(in_ids(MemoryModel.quant_id))
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
    with catalog.session() as s:
        id_list = list(s.scalars(ids.limit(_ID_LIST_MAX + 1)).all())
    if len(id_list) <= _ID_LIST_MAX:
        # A selective search: the filters ran once; the sums and the ordered query use the ids.
        def in_ids(col: Any) -> Any:
            return col.in_(id_list)

        where = q.id.in_(id_list)
    else:

        def in_ids(col: Any) -> Any:
            return col.in_(ids.scalar_subquery())

    sums = _sums_select(in_ids).subquery("sums")
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
#: Up to this many candidates, their ids are fetched first and passed as a list (one scan of
#: the filters instead of three); beyond it the filters stay a subquery.
_ID_LIST_MAX = 5000
