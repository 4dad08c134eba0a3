"""provenance: where each quant's analysis came from

Revision ID: 0006_provenance
Revises: 0005_repo_claims
Create Date: 2026-12-03

``quants.source`` is NULL for an analysis this catalog's own crawl read, else where the import
came from (``dataset OWNER/NAME`` for ``quants pull``, ``directory PATH`` for ``quants import``),
with ``source_revision`` the dataset commit or the manifest's sha256. A local read always
outranks an imported one (crawler/snapshot/import_.py).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_provenance"
down_revision = "0005_repo_claims"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("quants", sa.Column("source", sa.String(512), nullable=True))
    op.add_column("quants", sa.Column("source_revision", sa.String(64), nullable=True))


def downgrade() -> None:
    # Plain DDL, as 0003/0004 (batch mode would recreate the table, which SQLite refuses while
    # the 0002 views refer to it; SQLite >= 3.35 and PostgreSQL both drop a column in place).
    op.execute("ALTER TABLE quants DROP COLUMN source_revision")
    op.execute("ALTER TABLE quants DROP COLUMN source")
