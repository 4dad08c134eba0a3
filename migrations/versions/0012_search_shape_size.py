"""search shape by size: ix_quants_search_shape adds size, quality and repo, for --sort size

Revision ID: 0012_search_shape_size
Revises: 0011_search_trigrams
Create Date: 2026-12-06

The memory bound reads only a quant's search shape, so ``--sort size`` reads the quants of the
shapes that pass it, each from its largest quant down, merged by size
(crawler.catalog.ordered). With (size_bytes, quality_score, repo_pk) after the shape the index
serves that read (one seek a shape, then its entries in size order, each with its repo, whose
downloads order a shape's many copies of one size, without reading the quants' rows) and each
shape's largest quant (one seek); the loose index scan over the distinct shapes reads it as
before.
"""

from __future__ import annotations

from alembic import op

revision = "0012_search_shape_size"
down_revision: str | None = "0011_search_trigrams"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_quants_search_shape", table_name="quants")
    op.create_index(
        "ix_quants_search_shape",
        "quants",
        ["live", "search_shape", "size_bytes", "quality_score", "repo_pk"],
    )


def downgrade() -> None:
    op.drop_index("ix_quants_search_shape", table_name="quants")
    op.create_index("ix_quants_search_shape", "quants", ["live", "search_shape"])
