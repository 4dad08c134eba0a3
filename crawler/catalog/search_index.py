"""The search index's copies in quants: kept in step with the rows they copy.

live and search_text in the same transaction; the search columns refilled after a migration.
Details: docs/internals/catalog.md#search_index
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa
from sqlalchemy import and_, case, func, select, update

from crawler.catalog.candidates import SHAPE_COLUMNS
from crawler.catalog.tables import SEARCH_TEXT_MAX, MemoryModel, Quant, Repo, TensorGroup

__all__ = [
    "ColumnsFn",
    "live_sql",
    "live_values",
    "refresh_live_rows",
    "refresh_repo_downloads",
    "refresh_search_columns",
    "repo_downloads_sql",
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


def repo_downloads_sql(quants: Any, repos: Any) -> Any:
    """SQL for ``quants.repo_downloads``: the repo's downloads, -1 for none (the search orders
    downloads descending with none last; every count is >= 0)."""
    return (
        select(func.coalesce(repos.downloads, -1)).where(repos.id == quants.repo_pk)
    ).scalar_subquery()


def live_values(quants: Any, repos: Any) -> dict[str, Any]:
    """The SQL of the columns kept with ``live``, for an UPDATE of ``quants`` rows."""
    return {
        "live": live_sql(quants, repos),
        "search_text": search_text_sql(quants, repos),
        "search_shape": search_shape_sql(quants),
        "repo_downloads": repo_downloads_sql(quants, repos),
    }


def refresh_repo_downloads(s: Any, repo_pks: Sequence[int]) -> None:
    """Copy these repos' downloads into their quants (only the rows whose copy differs), in
    the transaction that changes them."""
    s.flush()
    new = repo_downloads_sql(Quant, Repo)
    for chunk in range(0, len(repo_pks), 5000):
        s.execute(
            update(Quant)
            .where(
                Quant.repo_pk.in_(list(repo_pks[chunk : chunk + 5000])),
                Quant.repo_downloads.is_distinct_from(new),
            )
            .values(repo_downloads=new)
            .execution_options(synchronize_session=False)
        )


def refresh_live_rows(s: Any, repo_pks: Sequence[int]) -> None:
    """Recompute ``quants.live``, ``search_text``, ``search_shape`` and ``repo_downloads`` for
    the quants of these repos.

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
            .values(live_values(Quant, Repo))
            .execution_options(synchronize_session=False)
        )


def refresh_search_columns(conn: sa.Connection, columns: ColumnsFn) -> int:
    """Recompute ``quants.quality_score`` and the ``fit_*`` extras of every quant that has a
    memory model, on ``conn`` (in its transaction); return how many quants were written.

    The same values a crawl stores (crawler.ranking.columns.search_columns): the score
    from the tensor groups in name order and the coefficients whatever their status, the extras
    only where the memory rules are modelled. Then ``search_shape`` from them, and the name
    pieces of the shapes (migration 0015) as its triggers keep them.
    """
    q, m, g = (typing.cast(sa.Table, t.__table__) for t in (Quant, MemoryModel, TensorGroup))
    pg = conn.dialect.name == "postgresql"
    if pg:
        # One statement a batch writes the rows and their pieces (_write_pg): the trigger's
        # row-by-row work (~60 pieces a quant) would run twice a quant, in the refill and in the
        # shapes' rewrite. Transactional: a failed upgrade leaves the trigger as it was.
        conn.exec_driver_sql(f"ALTER TABLE quants DISABLE TRIGGER {_GRAMS_TRIGGER}")
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
        if not rows:
            continue
        names = [k for k in rows[0] if k != "b_id"]
        if pg:
            _write_pg(conn, q, names, rows)
        else:
            conn.execute(
                update(q)
                .where(q.c.id == sa.bindparam("b_id"))
                .values({name: sa.bindparam(name) for name in names}),
                rows,
            )
    # The shapes are made of these columns (crawler.catalog.candidates.SHAPE_COLUMNS); only
    # the rows whose shape changes are written (the triggers add pieces for no other).
    shape = search_shape_sql(q.c)
    if pg:
        _shapes_pg(conn)
        conn.exec_driver_sql(f"ALTER TABLE quants ENABLE TRIGGER {_GRAMS_TRIGGER}")
    else:
        conn.execute(
            update(q).where(q.c.search_shape.is_distinct_from(shape)).values(search_shape=shape)
        )
    # The new shapes' name pieces came with the rows; those of shapes no quant has any more go
    # (crawler.catalog.name_shapes). PostgreSQL: NOT EXISTS, an anti-join. NOT IN is hashed
    # only when the subquery's rows (one a quant) fit work_mem, 4 MB by default
    # (https://www.postgresql.org/docs/current/runtime-config-resource.html#GUC-WORK-MEM);
    # else every piece re-reads them: ~70 ms a piece at 200k quants, hours at 1M.
    conn.execute(
        sa.text(
            "DELETE FROM search_shape_grams g WHERE NOT EXISTS"
            " (SELECT 1 FROM quants q WHERE q.search_shape = g.search_shape)"
            if pg
            else "DELETE FROM search_shape_grams WHERE search_shape NOT IN"
            " (SELECT search_shape FROM quants WHERE search_shape IS NOT NULL)"
        )
    )
    return len(ids)


#: Migration 0015's PostgreSQL trigger on quants that adds a new text's or shape's pieces.
_GRAMS_TRIGGER = "search_shape_grams_add"


#: Add the pieces migration 0015's trigger adds (each 3-character piece with a digit of the
#: text) for the rows of ``changed`` (search_text, search_shape, old_shape) whose shape changed.
_ADD_PIECES = (
    " INSERT INTO search_shape_grams (gram, search_shape)"
    " SELECT DISTINCT substr(c.search_text, p, 3), c.search_shape"
    " FROM changed c, generate_series(1, length(c.search_text) - 2) AS p"
    " WHERE c.search_text IS NOT NULL AND c.search_shape IS NOT NULL"
    " AND c.old_shape IS DISTINCT FROM c.search_shape AND substr(c.search_text, p, 3) ~ '[0-9]'"
    " ON CONFLICT DO NOTHING"
)


def _shape_of(conn: sa.Connection, column: Callable[[str], str]) -> str:
    """search_shape_sql as PostgreSQL text, each column read from the SQL ``column(name)``."""
    cols = SimpleNamespace(**{n: sa.literal_column(column(n)) for n in SHAPE_COLUMNS})
    compiled = search_shape_sql(cols).compile(
        dialect=conn.dialect, compile_kwargs={"literal_binds": True}
    )
    return str(compiled)


def _write_pg(
    conn: sa.Connection, q: sa.Table, names: list[str], rows: list[dict[str, Any]]
) -> None:
    """One batch of the refill on PostgreSQL, in one statement: the columns from arrays
    (unnest), each row's shape from its new values, and the pieces of the shapes that changed.
    An UPDATE a row (executemany) kept every row's trigger and round trip. Rows whose values
    and shape are already those are not written (after 0016 most quants have no SWA layer:
    ~0.2 ms a row written, with the quants' 13 indexes)."""
    cols = ["b_id", *names]
    types = {"b_id": q.c.id.type, **{n: q.c[n].type for n in names}}
    arrays = ", ".join(f"CAST(:{c} AS {types[c].compile(dialect=conn.dialect)}[])" for c in cols)
    written = set(names)
    shape = _shape_of(conn, lambda n: f"v.{n}" if n in written else f"q.{n}")
    sets = ", ".join(f"{n} = v.{n}" for n in names)
    old = ", ".join(f"q.{n}" for n in names)
    new = ", ".join(f"v.{n}" for n in names)
    conn.execute(
        sa.text(
            f"WITH changed AS (UPDATE quants AS q SET {sets}, search_shape = {shape}"
            f" FROM unnest({arrays}) AS v({', '.join(cols)}), quants AS o"
            " WHERE q.id = v.b_id AND o.id = v.b_id"
            f" AND ({old}, q.search_shape) IS DISTINCT FROM ({new}, {shape})"
            " RETURNING q.search_text, q.search_shape, o.search_shape AS old_shape)" + _ADD_PIECES
        ),
        {c: [row[c] for row in rows] for c in cols},
    )


def _shapes_pg(conn: sa.Connection) -> None:
    """Every quant's ``search_shape`` on PostgreSQL, and the pieces of the shapes that changed,
    in one statement (only the rows whose shape differs are written)."""
    shape = _shape_of(conn, lambda n: f"q.{n}")
    conn.exec_driver_sql(
        f"WITH changed AS (UPDATE quants AS q SET search_shape = {shape}"
        " FROM quants AS o WHERE o.id = q.id"
        f" AND q.search_shape IS DISTINCT FROM {shape}"
        " RETURNING q.search_text, q.search_shape, o.search_shape AS old_shape)" + _ADD_PIECES
    )
