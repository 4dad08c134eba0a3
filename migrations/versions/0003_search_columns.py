"""search columns: quants.live, quants.quality_score, memory_models scalar coefficients; indexes

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02

``quants search`` orders by quality and filters by memory without reading the coefficient JSON:
``quants.quality_score`` (crawler.quality's score, stored at crawl time), ``quants.live`` (neither
the quant nor its repo vanished), ``quants.fit_*`` (copies of memory_models' prefilter columns),
``quants.search_text`` (the lowercased names the query words are matched in), one index over
them all (the quality order, covering the memory bound and name test), and in memory_models
copies of the scalar coefficients the search reads before the exact estimate.
Existing rows are filled here; the quality score goes through the same function the crawl uses
(``crawler.catalog.store.quality_score_of``), so a catalog migrated here matches a new crawl.
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


def _backfill() -> None:
    from crawler.catalog.store import live_sql, search_text_sql
    from crawler.ranking.columns import quality_score_of, search_scalars

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
        sa.column("quality_score", sa.Float()),
        *(sa.column(c) for c in _FIT_COLUMNS),
    )
    memory = sa.table(
        "memory_models",
        sa.column("quant_id"),
        sa.column("coefficients", sa.JSON()),
        *(sa.column(c) for c in ("n_expert", "n_expert_used", "n_embd", "n_vocab")),
        sa.column("mtp_available", sa.Boolean()),
    )
    groups = sa.table(
        "tensor_groups",
        sa.column("quant_id"),
        sa.column("group_name"),
        sa.column("n_params"),
        sa.column("n_bytes"),
        sa.column("bpw"),
    )
    bind.execute(
        sa.update(quants).values(
            live=live_sql(quants.c, repos.c), search_text=search_text_sql(quants.c, repos.c)
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
        by_quant: dict[int, list[tuple[str, int, int, float | None]]] = {}
        for qid, name, n_params, n_bytes, bpw in bind.execute(
            sa.select(
                groups.c.quant_id,
                groups.c.group_name,
                groups.c.n_params,
                groups.c.n_bytes,
                groups.c.bpw,
            )
            .where(groups.c.quant_id.in_(chunk))
            .order_by(groups.c.quant_id, groups.c.group_name)
        ):
            by_quant.setdefault(qid, []).append((name, n_params, n_bytes, bpw))
        scalars = [{"b_id": qid, **search_scalars(coefficients.get(qid))} for qid in chunk]
        bind.execute(
            sa.update(memory)
            .where(memory.c.quant_id == sa.bindparam("b_id"))
            .values({k: sa.bindparam(k) for k in scalars[0] if k != "b_id"}),
            scalars,
        )
        scores = [
            {"b_id": qid, "score": quality_score_of(by_quant.get(qid, []), coefficients.get(qid))}
            for qid in chunk
        ]
        bind.execute(
            sa.update(quants)
            .where(quants.c.id == sa.bindparam("b_id"))
            .values(quality_score=sa.bindparam("score")),
            scores,
        )


def downgrade() -> None:
    # Plain ALTER TABLE ... DROP COLUMN (SQLite >= 3.35, PostgreSQL): batch mode would recreate
    # the tables, which SQLite refuses while the 0002 views refer to them.
    op.drop_index("ix_quants_search_quality", table_name="quants")
    for name in ("live", "quality_score", *_FIT_COLUMNS, "search_text"):
        op.execute(f"ALTER TABLE quants DROP COLUMN {name}")
    for name in ("n_expert", "n_expert_used", "n_embd", "n_vocab", "mtp_available"):
        op.execute(f"ALTER TABLE memory_models DROP COLUMN {name}")
