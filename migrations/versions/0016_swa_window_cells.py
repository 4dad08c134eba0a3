"""swa window cells: the sliding-window cache apart from the fixed cache bytes, per quant

Revision ID: 0016_swa_window_cells
Revises: 0015_search_shape_grams
Create Date: 2026-12-06

``quants.fit_fixed_bytes`` counts a sliding-window layer's cache at its full window
(pad(n_swa + 512, 256) cells), but llama.cpp caps it at the context's cells: below n_swa + 512
tokens the memory prefilter's lower bound was above the estimate and dropped quants that fit.
``fit_swa_kv_per_cell`` (f16 K+V bytes of one SWA cell) and ``fit_swa_cells`` (the window's
cells) let the bound take the smaller (crawler.ranking.bounds.swa_surplus_bytes), computed by
``crawler.ranking.columns.fit_extras``. This revision only adds the columns (NULL: the bound
counts the whole window, as before); ``Catalog.upgrade`` fills them after migrating a catalog
from below it (``crawler.catalog.search_index.refresh_search_columns``, same transaction, which
also rewrites ``search_shape`` and drops the name pieces of shapes gone). ``search_shape``
gains the columns (rewritten here too: migration 0015's triggers add the new shapes' name
pieces) and the three search indexes that cover the memory bound are rebuilt with them.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0016_swa_window_cells"
down_revision: str | None = "0015_search_shape_grams"
branch_labels = None
depends_on = None

_NEW = ("fit_swa_kv_per_cell", "fit_swa_cells")
# crawler.catalog.search_index.SHAPE_COLUMNS at this revision (a migration keeps its own copy).
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
    *_NEW,
)
_OLD_SHAPE = tuple(c for c in _SHAPE if c not in _NEW)
# What the memory bound reads (crawler/catalog/tables.py _BOUND_COLUMNS), before and after.
_OLD_BOUND = (
    "fit_weights_bytes",
    "fit_expert_bytes",
    "fit_mtp_bytes",
    "fit_kv_per_token",
    "fit_fixed_bytes",
    "fit_ubatch_bytes",
    "fit_mtp_kv_per_token",
    "search_text",
)
_BOUND = (*_OLD_BOUND[:-1], *_NEW, "search_text")
_COMPUTED_HEAD = (
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
)


def _indexes(bound: tuple[str, ...]) -> dict[str, list[str]]:
    return {
        "ix_quants_search_quality": ["live", "quality_score", *bound],
        "ix_quants_search_size": ["live", "size_bytes", *bound],
        "ix_quants_search_computed": [*_COMPUTED_HEAD, *bound],
    }


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


def _reindex(bound: tuple[str, ...]) -> None:
    for name, columns in _indexes(bound).items():
        op.drop_index(name, table_name="quants")
        op.create_index(name, "quants", columns)


def upgrade() -> None:
    # Plain DDL (no batch mode: SQLite refuses to recreate tables the 0002 views refer to).
    for name in _NEW:
        op.add_column("quants", sa.Column(name, sa.BigInteger(), nullable=True))
    _rewrite_shapes(_SHAPE)
    _reindex(_BOUND)


def downgrade() -> None:
    for name in _indexes(_BOUND):
        op.drop_index(name, table_name="quants")
    for name in _NEW:
        op.execute(f"ALTER TABLE quants DROP COLUMN {name}")
    _rewrite_shapes(_OLD_SHAPE)
    for name, columns in _indexes(_OLD_BOUND).items():
        op.create_index(name, "quants", columns)
