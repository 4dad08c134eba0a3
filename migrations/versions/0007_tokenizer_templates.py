"""tokenizer_templates: tokenizer blocks read once, reused by any file that shows the same one

Revision ID: 0007_tokenizer_templates
Revises: 0005_repo_claims
Create Date: 2026-12-03

One row per tokenizer block read in full (crawler/gguf/tokenizer_template.py), keyed by its content
fingerprint and found by the lookup a file's first bytes give; and which repos / base models
used each, so that their files' first request can be small. A nightly crawl and an on-demand
search share them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_tokenizer_templates"
down_revision = "0006_provenance"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tokenizer_templates",
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("lookup", sa.String(64), nullable=False),
        sa.Column("model", sa.String(128), nullable=True),
        sa.Column("pre", sa.String(128), nullable=True),
        sa.Column("keys", sa.JSON(), nullable=False),
        sa.Column("block", sa.LargeBinary(), nullable=False),
        sa.Column("block_bytes", sa.BigInteger(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("block_start", sa.BigInteger(), nullable=False),
        sa.Column("after_bytes", sa.BigInteger(), nullable=False),
        sa.Column("after_keys", sa.Integer(), nullable=False),
        sa.Column("header_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("fingerprint", name="pk_tokenizer_templates"),
    )
    op.create_index("ix_tokenizer_templates_lookup", "tokenizer_templates", ["lookup"])
    op.create_table(
        "tokenizer_template_scopes",
        sa.Column("scope", sa.String(320), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("scope", "fingerprint", name="pk_tokenizer_template_scopes"),
    )


def downgrade() -> None:
    op.drop_table("tokenizer_template_scopes")
    op.drop_index("ix_tokenizer_templates_lookup", table_name="tokenizer_templates")
    op.drop_table("tokenizer_templates")
