"""measured_quality: quality figures a repo publishes for its own quants

Revision ID: 0008_measured_quality
Revises: 0005_repo_claims
Create Date: 2026-12-03

One row per (quant, metric, artifact) read at crawl time from a MagicQuant manifest or a
llama-perplexity log in the repo (crawler/profile/measured.py); the rows of a repo are replaced when
the repo is written with a file listing.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_measured_quality"
down_revision: str | None = "0007_tokenizer_templates"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "measured_quality",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("repo_pk", sa.Integer(), nullable=False),
        sa.Column("quant_path", sa.String(1024), nullable=False),
        sa.Column("file_name", sa.String(1024), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("revision", sa.String(64), nullable=False),
        sa.Column("metric", sa.String(32), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("corpus", sa.String(256), nullable=True),
        sa.Column("reference", sa.String(256), nullable=True),
        sa.Column("artifact", sa.String(1024), nullable=False),
        sa.Column("fmt", sa.String(32), nullable=False),
        sa.Column("source_url", sa.Text(), nullable=False),
        sa.Column("read_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["repo_pk"],
            ["repos.id"],
            name="fk_measured_quality_repo_pk_repos",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_measured_quality"),
    )
    op.create_index("ix_measured_quality_repo_pk", "measured_quality", ["repo_pk"])


def downgrade() -> None:
    op.drop_index("ix_measured_quality_repo_pk", table_name="measured_quality")
    op.drop_table("measured_quality")
