"""search sort columns: MTP draft KV, bytes read per token, trained context, compute floor; indexes

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02

New ``quants`` columns, computed from the coefficient JSON (and the output head's tensor group) by
``crawler.ranking.columns.fit_extras``, the function the crawl uses. This revision only adds them
(NULL): a migration never calls live model code, so that an applied revision does the same thing
whatever the model becomes. ``Catalog.upgrade`` fills them after migrating a catalog from below
0004 (``crawler.catalog.search_index.refresh_search_columns``, in the same transaction), and
``quants reprofile`` recomputes them:
``fit_mtp_kv_per_token`` (the MTP draft's KV cache in the ``--mtp`` memory bound),
``fit_ubatch_bytes`` (the compute and runtime floor per ubatch token in every memory bound),
``fit_read_bytes``, ``fit_moe_layers``, ``fit_draft_bytes`` and ``fit_verify_experts`` (the fewest
bytes a decoded token reads, its MoE layers, what an MTP draft pass reads, the experts an MTP
verify pass adds: the ``--sort speed`` bound) and
``fit_ctx_train`` (the ``--sort ctx`` bound).
``ix_quants_search_quality`` is rebuilt to cover the new bound columns;
``ix_quants_search_size`` serves the size order the same way, ``ix_quants_search_computed``
covers what ``--sort speed|margin|ctx`` compute per request, and ``ix_repos_downloads`` serves
the downloads order.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# crawler.ranking.columns.FIT_EXTRAS at this revision (a migration keeps its own copy).
_NEW = (
    "fit_mtp_kv_per_token",
    "fit_read_bytes",
    "fit_moe_layers",
    "fit_ctx_train",
    "fit_ubatch_bytes",
    "fit_draft_bytes",
    "fit_verify_experts",
)
_OLD_BOUND = (
    "fit_weights_bytes",
    "fit_expert_bytes",
    "fit_mtp_bytes",
    "fit_kv_per_token",
    "fit_fixed_bytes",
)
_BOUND = (*_OLD_BOUND, "fit_ubatch_bytes", "fit_mtp_kv_per_token", "search_text")


def upgrade() -> None:
    with op.batch_alter_table("quants", schema=None) as batch_op:
        for name in _NEW:
            kind = sa.Float() if name == "fit_verify_experts" else sa.BigInteger()
            batch_op.add_column(sa.Column(name, kind, nullable=True))
        batch_op.drop_index("ix_quants_search_quality")
        batch_op.create_index("ix_quants_search_quality", ["live", "quality_score", *_BOUND])
        batch_op.create_index("ix_quants_search_size", ["live", "size_bytes", *_BOUND])
        batch_op.create_index(
            "ix_quants_search_computed",
            [
                "live",
                "fit_read_bytes",
                "fit_moe_layers",
                "fit_draft_bytes",
                "fit_verify_experts",
                "fit_ctx_train",
                "quality_score",
                *_BOUND,
            ],
        )
    op.create_index("ix_repos_downloads", "repos", ["downloads"])


def downgrade() -> None:
    # Plain DDL, as 0003 (batch mode would recreate the tables, which SQLite refuses while the
    # 0002 views refer to them).
    op.drop_index("ix_repos_downloads", table_name="repos")
    for name in ("ix_quants_search_computed", "ix_quants_search_size", "ix_quants_search_quality"):
        op.drop_index(name, table_name="quants")
    for name in _NEW:
        op.execute(f"ALTER TABLE quants DROP COLUMN {name}")
    op.create_index(
        "ix_quants_search_quality",
        "quants",
        ["live", "quality_score", *_OLD_BOUND, "search_text"],
    )
