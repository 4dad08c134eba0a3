"""repo_claims: crawl processes sharing one catalog claim the repos they read

Revision ID: 0005_repo_claims
Revises: 0004
Create Date: 2026-12-03

One row per repo being read by some crawler (crawler/catalog/repo_locks.py); rows are deleted when
the repo is written, and a killed crawler's rows lapse at ``expires_at``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_repo_claims"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "repo_claims",
        sa.Column("repo_id", sa.String(256), nullable=False),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("repo_id", name="pk_repo_claims"),
    )
    op.create_index("ix_repo_claims_expires_at", "repo_claims", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_repo_claims_expires_at", table_name="repo_claims")
    op.drop_table("repo_claims")
