"""search columns: quants.live, quants.quality_score, memory_models scalar coefficients; indexes

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02

``quants search`` orders by quality and filters by memory without reading the coefficient JSON:
``quants.quality_score`` (the quality model's score, stored at crawl time), ``quants.live`` (neither
the quant nor its repo vanished), ``quants.fit_*`` (copies of memory_models' prefilter columns),
``quants.search_text`` (the lowercased names the query words are matched in), one index over
them all (the quality order, covering the memory bound and name test), and in memory_models
copies of the scalar coefficients the search reads before the exact estimate.
Existing rows are filled here with plain SQL and this revision's own copies of what it computes
(``live``, ``search_text``, the ``fit_*`` copies, the scalar coefficients). The quality score is
the quality model's (``crawler.ranking.columns.quality_score_of``), which a migration must not
call (an applied revision does the same thing whatever the model becomes): this revision leaves
it NULL, ``Catalog.upgrade`` fills it after migrating a catalog from below 0004
(``crawler.catalog.search_index.refresh_search_columns``, in the same transaction), and
``quants reprofile`` recomputes it.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_BATCH = 5000

_FIT_COLUMNS = {
    # quants column: memory_models column it copies (NULL unless the status is "ok")
    "fit_weights_bytes": "weights_bytes",
    "fit_expert_bytes": "expert_bytes",
    "fit_mtp_bytes": "mtp_weights_bytes",
    "fit_kv_per_token": "kv_bytes_per_token_f16",
    "fit_fixed_bytes": "fixed_bytes_f16",
}


def upgrade() -> None:
    with op.batch_alter_table("quants", schema=None) as batch_op:
        batch_op.add_column(sa.Column("live", sa.Boolean(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("quality_score", sa.Float(), nullable=True))
        for name in _FIT_COLUMNS:
            batch_op.add_column(sa.Column(name, sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("search_text", sa.String(length=512), nullable=True))
        batch_op.create_index(
            "ix_quants_search_quality",
            ["live", "quality_score", *_FIT_COLUMNS, "search_text"],
            unique=False,
        )
    with op.batch_alter_table("memory_models", schema=None) as batch_op:
        batch_op.add_column(sa.Column("n_expert", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("n_expert_used", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("n_embd", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("n_vocab", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("mtp_available", sa.Boolean(), nullable=True))
    _backfill()


# crawler.catalog.tables.SEARCH_TEXT_MAX at this revision.
_SEARCH_TEXT_MAX = 512
# crawler.ranking.columns.SEARCH_SCALARS at this revision.
_SCALARS = ("n_expert", "n_expert_used", "n_embd", "n_vocab")


def _live_sql(quants: Any, repos: Any) -> Any:
    # crawler.catalog.search_index.live_sql at this revision.
    repo_live = sa.select(repos.id).where(repos.id == quants.repo_pk, repos.vanished_at.is_(None))
    return sa.case((sa.and_(quants.vanished_at.is_(None), repo_live.exists()), True), else_=False)


def _search_text_sql(quants: Any, repos: Any) -> Any:
    # crawler.catalog.search_index.search_text_sql at this revision.
    def low(col: Any) -> Any:
        return sa.func.lower(sa.func.coalesce(col, ""))

    text = (
        low(repos.repo_id)
        + sa.literal(" ")
        + low(sa.func.coalesce(quants.base_model, repos.base_model))
        + sa.literal(" ")
        + low(quants.path)
        + sa.literal(" ")
        + low(quants.quant_label)
        + sa.literal(" ")
        + low(quants.architecture)
    )
    kept = sa.case((sa.func.length(text) <= _SEARCH_TEXT_MAX, text), else_=None)
    return (
        sa.select(sa.cast(kept, sa.String(_SEARCH_TEXT_MAX)))
        .where(repos.id == quants.repo_pk)
        .scalar_subquery()
    )


def _scalars(coefficients: Any) -> dict[str, Any]:
    # crawler.ranking.columns.search_scalars at this revision.
    co = coefficients or {}

    def opt_int(value: Any) -> int | None:
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else None

    out: dict[str, Any] = {k: opt_int(co.get(k)) or 0 for k in _SCALARS}
    out["mtp_available"] = bool(co.get("mtp_available", False))
    return out


def _backfill() -> None:
    bind = op.get_bind()
    repos = sa.table(
        "repos",
        sa.column("id"),
        sa.column("vanished_at"),
        sa.column("repo_id"),
        sa.column("base_model"),
    )
    quants = sa.table(
        "quants",
        sa.column("id"),
        sa.column("repo_pk"),
        sa.column("vanished_at"),
        sa.column("live", sa.Boolean()),
        sa.column("base_model"),
        sa.column("path"),
        sa.column("quant_label"),
        sa.column("architecture"),
        sa.column("search_text"),
        *(sa.column(c) for c in _FIT_COLUMNS),
    )
    memory = sa.table(
        "memory_models",
        sa.column("quant_id"),
        sa.column("coefficients", sa.JSON()),
        *(sa.column(c) for c in ("n_expert", "n_expert_used", "n_embd", "n_vocab")),
        sa.column("mtp_available", sa.Boolean()),
    )
    bind.execute(
        sa.update(quants).values(
            live=_live_sql(quants.c, repos.c), search_text=_search_text_sql(quants.c, repos.c)
        )
    )
    mem = sa.table(
        "memory_models",
        sa.column("quant_id"),
        sa.column("status"),
        *(sa.column(c) for c in _FIT_COLUMNS.values()),
    )
    bind.execute(
        sa.update(quants).values(
            {
                name: sa.select(mem.c[source])
                .where(mem.c.quant_id == quants.c.id, mem.c.status == "ok")
                .scalar_subquery()
                for name, source in _FIT_COLUMNS.items()
            }
        )
    )
    ids = [row[0] for row in bind.execute(sa.select(memory.c.quant_id).order_by("quant_id"))]
    for i in range(0, len(ids), _BATCH):
        chunk = ids[i : i + _BATCH]
        coefficients: dict[int, Any] = dict(
            bind.execute(
                sa.select(memory.c.quant_id, memory.c.coefficients).where(
                    memory.c.quant_id.in_(chunk)
                )
            ).all()
        )
        scalars = [{"b_id": qid, **_scalars(coefficients.get(qid))} for qid in chunk]
        bind.execute(
            sa.update(memory)
            .where(memory.c.quant_id == sa.bindparam("b_id"))
            .values({k: sa.bindparam(k) for k in scalars[0] if k != "b_id"}),
            scalars,
        )


def downgrade() -> None:
    # Plain ALTER TABLE ... DROP COLUMN (SQLite >= 3.35, PostgreSQL): batch mode would recreate
    # the tables, which SQLite refuses while the 0002 views refer to them.
    op.drop_index("ix_quants_search_quality", table_name="quants")
    for name in ("live", "quality_score", *_FIT_COLUMNS, "search_text"):
        op.execute(f"ALTER TABLE quants DROP COLUMN {name}")
    for name in ("n_expert", "n_expert_used", "n_embd", "n_vocab", "mtp_available"):
        op.execute(f"ALTER TABLE memory_models DROP COLUMN {name}")
