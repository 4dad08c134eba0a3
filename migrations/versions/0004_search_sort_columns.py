"""search sort columns: MTP draft KV, bytes read per token, trained context; sort indexes

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02

``quants.fit_mtp_kv_per_token`` lets the SQL memory bound count the MTP draft's KV cache under
``--mtp``; ``quants.fit_read_bytes`` (the fewest bytes a decoded token reads) orders
``--sort speed`` fastest first and ``quants.fit_ctx_train`` bounds ``--sort ctx``. All three come
from the coefficient JSON through ``crawler.catalog.store.fit_extras``, the function the crawl
uses, so a catalog migrated here matches a new crawl. Two covering indexes serve ``--sort size``
and ``--sort speed`` as ``ix_quants_search_quality`` serves the quality order, and
``ix_repos_downloads`` the downloads order.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_BATCH = 5000
_NEW = ("fit_mtp_kv_per_token", "fit_read_bytes", "fit_ctx_train")
_BOUND = (
    "fit_weights_bytes",
    "fit_expert_bytes",
    "fit_mtp_bytes",
    "fit_kv_per_token",
    "fit_fixed_bytes",
    "search_text",
)


def upgrade() -> None:
    with op.batch_alter_table("quants", schema=None) as batch_op:
        for name in _NEW:
            batch_op.add_column(sa.Column(name, sa.BigInteger(), nullable=True))
        batch_op.create_index("ix_quants_search_size", ["live", "size_bytes", *_BOUND])
        batch_op.create_index("ix_quants_search_speed", ["live", "fit_read_bytes", *_BOUND])
    op.create_index("ix_repos_downloads", "repos", ["downloads"])
    _backfill()


def _backfill() -> None:
    from crawler.catalog.store import fit_extras

    bind = op.get_bind()
    quants = sa.table("quants", sa.column("id"), *(sa.column(c) for c in _NEW))
    memory = sa.table(
        "memory_models",
        sa.column("quant_id"),
        sa.column("status"),
        sa.column("coefficients", sa.JSON()),
    )
    ids = [
        row[0]
        for row in bind.execute(
            sa.select(memory.c.quant_id).where(memory.c.status == "ok").order_by("quant_id")
        )
    ]
    for i in range(0, len(ids), _BATCH):
        chunk = ids[i : i + _BATCH]
        rows: list[dict[str, Any]] = [
            {"b_id": qid, **fit_extras(co)}
            for qid, co in bind.execute(
                sa.select(memory.c.quant_id, memory.c.coefficients).where(
                    memory.c.quant_id.in_(chunk)
                )
            )
        ]
        if rows:
            bind.execute(
                sa.update(quants)
                .where(quants.c.id == sa.bindparam("b_id"))
                .values({name: sa.bindparam(name) for name in _NEW}),
                rows,
            )


def downgrade() -> None:
    # Plain ALTER TABLE ... DROP COLUMN, as 0003 (batch mode would recreate the tables, which
    # SQLite refuses while the 0002 views refer to them).
    op.drop_index("ix_repos_downloads", table_name="repos")
    op.drop_index("ix_quants_search_speed", table_name="quants")
    op.drop_index("ix_quants_search_size", table_name="quants")
    for name in _NEW:
        op.execute(f"ALTER TABLE quants DROP COLUMN {name}")
