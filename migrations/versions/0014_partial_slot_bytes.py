"""partial slot bytes: the largest trunk layer's device bytes per quant, for --tier partial

Revision ID: 0014_partial_slot_bytes
Revises: 0013_speed_type_eff
Create Date: 2026-12-06

Under ``--tier partial`` a quant that runs with some layers in host memory gets a margin below
what one more layer would take on the GPU. ``quants.fit_slot_bytes`` (the largest trunk layer's
weights, experts and recurrent state), ``fit_slot_kv_per_token`` (its K+V bytes per cell at f16)
and ``fit_resident_bytes`` (the device weights no trunk layer holds) let the ``--sort margin``
bound say so, computed by ``crawler.ranking.columns.fit_extras`` (the crawl's function). This
revision only adds the columns (NULL: the bound falls back to the budget less the floor, as
before): a migration never calls live model code. ``Catalog.upgrade`` fills them after migrating
a catalog from below this revision (``crawler.catalog.search_index.refresh_search_columns``,
in the same transaction, which also rewrites ``search_shape``). ``search_shape`` gains the
columns (rewritten here too, so the shapes are never stale), and ``ix_quants_search_computed``
covers them.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0014_partial_slot_bytes"
down_revision: str | None = "0013_speed_type_eff"
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
    "fit_slot_bytes",
    "fit_slot_kv_per_token",
    "fit_resident_bytes",
    "fit_ctx_train",
    "mtp_present",
    "mtp_preserved",
)
_NEW = ("fit_slot_bytes", "fit_slot_kv_per_token", "fit_resident_bytes")
_OLD_SHAPE = tuple(c for c in _SHAPE if c not in _NEW)
# ix_quants_search_computed (migrations 0004 and 0013), with and without the new columns.
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
    "fit_slot_bytes",
    "fit_slot_kv_per_token",
    "fit_resident_bytes",
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
    for name in _NEW:
        op.add_column("quants", sa.Column(name, sa.BigInteger(), nullable=True))
    _rewrite_shapes(_SHAPE)
    op.drop_index("ix_quants_search_computed", table_name="quants")
    op.create_index("ix_quants_search_computed", "quants", list(_COMPUTED))


def downgrade() -> None:
    op.drop_index("ix_quants_search_computed", table_name="quants")
    for name in _NEW:
        op.execute(f"ALTER TABLE quants DROP COLUMN {name}")
    _rewrite_shapes(_OLD_SHAPE)
    op.create_index("ix_quants_search_computed", "quants", list(_OLD_COMPUTED))
