"""The search index's copies in quants: kept in step with the rows they copy.

live and search_text in the same transaction; the search columns refilled after a migration.
Details: docs/internals/catalog.md#search_index
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import and_, case, func, select, update

from crawler.catalog.tables import SEARCH_TEXT_MAX, MemoryModel, Quant, Repo, TensorGroup

__all__ = [
    "SHAPE_COLUMNS",
    "ColumnsFn",
    "live_sql",
    "refresh_live_rows",
    "refresh_search_columns",
    "search_shape_sql",
    "search_text_sql",
]

_BATCH = 5000

#: One stored quant's search columns from its tensor_groups rows (name, n_params, n_bytes, bpw;
#: in name order), its memory model's status and coefficient JSON, and its quant label. The
#: catalog computes none: the caller passes the function the crawl uses
#: (crawler.ranking.columns.stored_columns).
ColumnsFn = Callable[
    [Sequence[tuple[str, int, int, float | None]], str, Mapping[str, Any] | None, str | None],
    Mapping[str, Any],
]


def search_text_sql(quants: Any, repos: Any) -> Any:
    """SQL for ``quants.search_text`` of a ``quants`` row (correlated with its repo).

    ``quants``/``repos`` are table-like objects with columns (the ORM classes, or the
    migration's ``sa.table`` stand-ins), so the crawl and migration 0003 store the same text.
    """
    from sqlalchemy import String, cast, literal

    def low(col: Any) -> Any:
        return func.lower(func.coalesce(col, ""))

    text = (
        low(repos.repo_id)
        + literal(" ")
        + low(func.coalesce(quants.base_model, repos.base_model))
        + literal(" ")
        + low(quants.path)
        + literal(" ")
        + low(quants.quant_label)
        + literal(" ")
        + low(quants.architecture)
    )
    kept = case((func.length(text) <= SEARCH_TEXT_MAX, text), else_=None)
    return (
        select(cast(kept, String(SEARCH_TEXT_MAX)))
        .where(repos.id == quants.repo_pk)
        .scalar_subquery()
    )


#: The columns a quant's search shape is made of: the stored quality score and every column a
#: memory or sort bound reads (crawler.ranking.bounds: the ``fit_*`` copies, and the MTP verdicts
#: the speed bound tests). Quants with equal values get one shape (migrations 0010, 0013, 0014
#: and 0016 keep their own copies of this list).
SHAPE_COLUMNS = (
    "quality_score",
    "fit_weights_bytes",
    "fit_expert_bytes",
    "fit_mtp_bytes",
    "fit_kv_per_token",
    "fit_fixed_bytes",
    "fit_ubatch_bytes",
    "fit_mtp_kv_per_token",
    "fit_read_bytes",
    "fit_moe_layers",
    "fit_draft_bytes",
    "fit_verify_experts",
    "fit_type_eff",
    "fit_trunk_layers",
    "fit_slot_bytes",
    "fit_slot_kv_per_token",
    "fit_resident_bytes",
    "fit_ctx_train",
    "mtp_present",
    "mtp_preserved",
    "fit_swa_kv_per_cell",
    "fit_swa_cells",
)


def search_shape_sql(quants: Any) -> Any:
    """SQL for ``quants.search_shape``: SHAPE_COLUMNS as text, ``|``-separated (NULL as empty).

    The database writes the numbers (SQLite with 15 significant digits), so two quants whose
    floats differ only past that share a text; the search reads every shape's values from its
    own rows and orders within a shape by them (crawler.catalog.ordered)."""
    from sqlalchemy import String, cast, literal

    parts = [func.coalesce(cast(getattr(quants, name), String), "") for name in SHAPE_COLUMNS]
    text: Any = parts[0]
    for part in parts[1:]:
        text = text + literal("|") + part
    return text


def live_sql(quants: Any, repos: Any) -> Any:
    """SQL for ``quants.live``: the quant and its repo have not vanished."""
    repo_live = select(repos.id).where(repos.id == quants.repo_pk, repos.vanished_at.is_(None))
    return case((and_(quants.vanished_at.is_(None), repo_live.exists()), True), else_=False)


def refresh_live_rows(s: Any, repo_pks: Sequence[int]) -> None:
    """Recompute ``quants.live``, ``search_text`` and ``search_shape`` for the quants of these
    repos.

    Called in the transaction that changes any ``vanished_at``, base model or profile of those
    repos or their quants, so the search index never disagrees with the rows it copies.
    """
    if not repo_pks:
        return
    s.flush()
    for chunk in range(0, len(repo_pks), 5000):
        s.execute(
            update(Quant)
            .where(Quant.repo_pk.in_(list(repo_pks[chunk : chunk + 5000])))
            .values(
                live=live_sql(Quant, Repo),
                search_text=search_text_sql(Quant, Repo),
                search_shape=search_shape_sql(Quant),
            )
            .execution_options(synchronize_session=False)
        )


def refresh_search_columns(conn: sa.Connection, columns: ColumnsFn) -> int:
    """Recompute ``quants.quality_score`` and the ``fit_*`` extras of every quant that has a
    memory model, on ``conn`` (in its transaction); return how many quants were written.

    The same values a crawl stores (crawler.ranking.columns.search_columns): the score
    from the tensor groups in name order and the coefficients whatever their status, the extras
    only where the memory rules are modelled.
    """
    q, m, g = (typing.cast(sa.Table, t.__table__) for t in (Quant, MemoryModel, TensorGroup))
    ids = [row[0] for row in conn.execute(select(m.c.quant_id).order_by(m.c.quant_id))]
    for i in range(0, len(ids), _BATCH):
        chunk = ids[i : i + _BATCH]
        memory = {
            qid: (status, co, label)
            for qid, status, co, label in conn.execute(
                select(m.c.quant_id, m.c.status, m.c.coefficients, q.c.quant_label)
                .join(q, q.c.id == m.c.quant_id)
                .where(m.c.quant_id.in_(chunk))
            )
        }
        groups: dict[int, list[tuple[str, int, int, float | None]]] = {}
        for qid, name, n_params, n_bytes, bpw in conn.execute(
            select(g.c.quant_id, g.c.group_name, g.c.n_params, g.c.n_bytes, g.c.bpw)
            .where(g.c.quant_id.in_(chunk))
            .order_by(g.c.quant_id, g.c.group_name)
        ):
            groups.setdefault(qid, []).append((name, n_params, n_bytes, bpw))
        rows = [{"b_id": qid, **columns(groups.get(qid, []), *memory[qid])} for qid in chunk]
        if rows:
            names = [k for k in rows[0] if k != "b_id"]
            conn.execute(
                update(q)
                .where(q.c.id == sa.bindparam("b_id"))
                .values({name: sa.bindparam(name) for name in names}),
                rows,
            )
    # The shapes are made of these columns (crawler.catalog.search_index.SHAPE_COLUMNS).
    conn.execute(update(q).values(search_shape=search_shape_sql(q.c)))
    # The new shapes' name pieces came with the rows (migration 0015's triggers); those of shapes
    # no quant has any more go (crawler.catalog.name_shapes).
    conn.execute(
        sa.text(
            "DELETE FROM search_shape_grams WHERE search_shape NOT IN"
            " (SELECT search_shape FROM quants WHERE search_shape IS NOT NULL)"
        )
    )
    return len(ids)
