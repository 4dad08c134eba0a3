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
gains the columns (rewritten here too, with the new shapes' name pieces: migration 0015's
triggers, on PostgreSQL their work done once for the whole table) and the three search indexes
that cover the memory bound are rebuilt with them.
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


#: PostgreSQL: migration 0015's trigger adds a row's pieces one row at a time (~60 a quant, 25+
#: min at 1M quants); off while every shape is rewritten, its work done once for the rows whose
#: shape changed (the same pieces).
_PG_REWRITE = (
    "WITH changed AS (UPDATE quants AS q SET search_shape = {shape} FROM quants AS o"
    " WHERE o.id = q.id RETURNING q.search_text, q.search_shape, o.search_shape AS old_shape)"
    " INSERT INTO search_shape_grams (gram, search_shape)"
    " SELECT DISTINCT substr(c.search_text, p, 3), c.search_shape"
    " FROM changed c, generate_series(1, length(c.search_text) - 2) AS p"
    " WHERE c.search_text IS NOT NULL AND c.search_shape IS NOT NULL"
    " AND c.old_shape IS DISTINCT FROM c.search_shape AND substr(c.search_text, p, 3) ~ '[0-9]'"
    " ON CONFLICT DO NOTHING"
)


def _rewrite_shapes(names: tuple[str, ...]) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        quants = sa.table("quants", *(sa.column(c) for c in (*names, "search_shape")))
        bind.execute(sa.update(quants).values(search_shape=_shape_sql(quants.c, names)))
        return
    q = sa.table("q", *(sa.column(c) for c in names))
    shape = _shape_sql(q.c, names).compile(
        dialect=bind.dialect, compile_kwargs={"literal_binds": True}
    )
    op.execute("ALTER TABLE quants DISABLE TRIGGER search_shape_grams_add")
    op.execute(_PG_REWRITE.format(shape=shape))
    op.execute("ALTER TABLE quants ENABLE TRIGGER search_shape_grams_add")


def _drop(bound: tuple[str, ...]) -> None:
    for name in _indexes(bound):
        op.drop_index(name, table_name="quants")


def _create(bound: tuple[str, ...]) -> None:
    for name, columns in _indexes(bound).items():
        op.create_index(name, "quants", columns)


def upgrade() -> None:
    # Plain DDL (no batch mode: SQLite refuses to recreate tables the 0002 views refer to). The
    # indexes the new columns join are rebuilt after the rewrite, not kept through it.
    for name in _NEW:
        op.add_column("quants", sa.Column(name, sa.BigInteger(), nullable=True))
    _drop(_OLD_BOUND)
    _rewrite_shapes(_SHAPE)
    _create(_BOUND)


def downgrade() -> None:
    _drop(_BOUND)
    for name in _NEW:
        op.execute(f"ALTER TABLE quants DROP COLUMN {name}")
    _rewrite_shapes(_OLD_SHAPE)
    _create(_OLD_BOUND)
