"""search shape: the quant's search columns as one text, indexed, for per-shape bounds

Revision ID: 0010_search_shape
Revises: 0009_watch_options
Create Date: 2026-12-04

``quants.search_shape`` is the stored quality score and every column a memory or sort bound
reads (the ``fit_*`` copies and the MTP verdicts), written by the database as ``|``-separated
text (NULL as empty). On the Hub most quants share theirs with many others (re-uploads,
mirrors, one recipe of one base model across its fine-tunes), so the search walks
``ix_quants_search_shape`` one seek per distinct shape, computes each bound once per shape, and
reads only the quants of the shapes that can rank (crawler.catalog.ordered). Kept like
``live`` and ``search_text`` (crawler.catalog.search_index.search_shape_sql).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0010_search_shape"
down_revision: str | None = "0009_watch_options"
branch_labels = None
depends_on = None

# SHAPE_COLUMNS (crawler.catalog.candidates) at this revision (a migration keeps its own copy).
_SHAPE = (
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
    "fit_ctx_train",
    "mtp_present",
    "mtp_preserved",
)


def _shape_sql(quants: Any) -> Any:
    # crawler.catalog.search_index.search_shape_sql at this revision.
    parts = [sa.func.coalesce(sa.cast(quants[name], sa.String), "") for name in _SHAPE]
    text = parts[0]
    for part in parts[1:]:
        text = text + sa.literal("|") + part
    return text


def upgrade() -> None:
    # Plain DDL (no batch mode: SQLite refuses to recreate tables the 0002 views refer to).
    op.add_column("quants", sa.Column("search_shape", sa.String(length=512), nullable=True))
    quants = sa.table("quants", *(sa.column(c) for c in (*_SHAPE, "search_shape")))
    op.get_bind().execute(sa.update(quants).values(search_shape=_shape_sql(quants.c)))
    op.create_index("ix_quants_search_shape", "quants", ["live", "search_shape"])


def downgrade() -> None:
    op.drop_index("ix_quants_search_shape", table_name="quants")
    op.execute("ALTER TABLE quants DROP COLUMN search_shape")
