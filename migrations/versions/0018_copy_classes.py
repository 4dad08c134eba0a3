"""copy classes: each quant's copy class within its shape and its repo's downloads, indexed

Revision ID: 0018_copy_classes
Revises: 0017_shape_index_ids
Create Date: 2026-12-06

The search leaves out the copies of a quant that cannot enter the answer: within a copy class,
those that at least ``--limit`` others beat on (size, downloads). It ranked every copy of a run
in SQL, partitioned by the coefficient text and sums over the tensor groups (a window over
9,455 copies: ~0.1 s at 1M quants). ``copy_key`` (a digest of what ranking reads beside the
shape, crawler.ranking.columns.copy_key) names the class, and ``repo_downloads`` copies the
repo's downloads (-1 for none), so ``ix_quants_copy_class`` lists a shape's classes one seek
each and holds each class's quants best first (crawler.catalog.copy_walk). This revision adds
the columns and the index and copies the downloads; ``Catalog.upgrade`` fills ``copy_key``
after migrating a catalog from below it (``crawler.catalog.search_index.refresh_search_columns``,
same transaction). Until then (NULL) a run is ranked in SQL as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_copy_classes"
down_revision: str | None = "0017_shape_index_ids"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain DDL (no batch mode: SQLite refuses to recreate tables the 0002 views refer to).
    op.add_column("quants", sa.Column("copy_key", sa.BigInteger(), nullable=True))
    op.add_column(
        "quants",
        sa.Column("repo_downloads", sa.BigInteger(), nullable=False, server_default="-1"),
    )
    op.execute(
        "UPDATE quants SET repo_downloads = COALESCE("
        "(SELECT r.downloads FROM repos r WHERE r.id = quants.repo_pk), -1)"
    )
    op.create_index(
        "ix_quants_copy_class",
        "quants",
        ["live", "search_shape", "copy_key", "size_bytes", "repo_downloads"],
    )


def downgrade() -> None:
    op.drop_index("ix_quants_copy_class", table_name="quants")
    for name in ("repo_downloads", "copy_key"):
        op.execute(f"ALTER TABLE quants DROP COLUMN {name}")
