"""speed type efficiency: the rate the speed estimate reads a quant's weights at, per quant

Revision ID: 0013_speed_type_eff
Revises: 0012_search_shape_size
Create Date: 2026-12-06

``quants.fit_type_eff`` is the harmonic efficiency of the quant's weight types as the speed
estimate guesses them from its label (else its bits per weight), and ``quants.fit_trunk_layers``
its trunk layers (a platform's cost per layer, Metal's), computed by
``crawler.ranking.columns.fit_extras``, the function the crawl uses. The ``--sort speed`` bound
reads a quant's bytes at that rate instead of the fastest type's and adds the layers' cost, so
far fewer quants beat the last result and get estimated. This revision only adds the columns
(NULL: the bound falls back to the fastest type and no layer cost, as before): a migration never
calls live model code. ``Catalog.upgrade``
fills it after migrating a catalog from below this revision
(``crawler.catalog.search_index.refresh_search_columns``, in the same transaction, which also
rewrites ``search_shape``). ``search_shape`` gains the columns (rewritten here too, so the shapes
are never stale), and ``ix_quants_search_computed`` covers them again.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0013_speed_type_eff"
down_revision: str | None = "0012_search_shape_size"
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
    "fit_type_eff",
    "fit_trunk_layers",
    "fit_ctx_train",
    "mtp_present",
    "mtp_preserved",
)
# Migration 0010's list (what the shapes are made of below this revision).
_NEW = ("fit_type_eff", "fit_trunk_layers")
_OLD_SHAPE = tuple(c for c in _SHAPE if c not in _NEW)
# ix_quants_search_computed (migration 0004), with and without the new column.
_BOUND = (
    "fit_weights_bytes",
    "fit_expert_bytes",
    "fit_mtp_bytes",
    "fit_kv_per_token",
    "fit_fixed_bytes",
    "fit_ubatch_bytes",
    "fit_mtp_kv_per_token",
    "search_text",
)
_COMPUTED = (
    "live",
    "fit_read_bytes",
    "fit_moe_layers",
    "fit_draft_bytes",
    "fit_verify_experts",
    "fit_type_eff",
    "fit_trunk_layers",
    "fit_ctx_train",
    "quality_score",
    *_BOUND,
)
_OLD_COMPUTED = tuple(c for c in _COMPUTED if c not in _NEW)


def _shape_sql(quants: Any, names: tuple[str, ...]) -> Any:
    # crawler.catalog.search_index.search_shape_sql at this revision.
    parts = [sa.func.coalesce(sa.cast(quants[name], sa.String), "") for name in names]
    text = parts[0]
    for part in parts[1:]:
        text = text + sa.literal("|") + part
    return text


def _rewrite_shapes(names: tuple[str, ...]) -> None:
    quants = sa.table("quants", *(sa.column(c) for c in (*names, "search_shape")))
    op.get_bind().execute(sa.update(quants).values(search_shape=_shape_sql(quants.c, names)))


def upgrade() -> None:
    # Plain DDL (no batch mode: SQLite refuses to recreate tables the 0002 views refer to).
    op.add_column("quants", sa.Column("fit_type_eff", sa.Float(), nullable=True))
    op.add_column("quants", sa.Column("fit_trunk_layers", sa.BigInteger(), nullable=True))
    _rewrite_shapes(_SHAPE)
    op.drop_index("ix_quants_search_computed", table_name="quants")
    op.create_index("ix_quants_search_computed", "quants", list(_COMPUTED))


def downgrade() -> None:
    op.drop_index("ix_quants_search_computed", table_name="quants")
    for name in _NEW:
        op.execute(f"ALTER TABLE quants DROP COLUMN {name}")
    _rewrite_shapes(_OLD_SHAPE)
    op.create_index("ix_quants_search_computed", "quants", list(_OLD_COMPUTED))
