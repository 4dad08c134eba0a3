"""shape index ids: on PostgreSQL ix_quants_search_shape carries each entry's quant id

Revision ID: 0017_shape_index_ids
Revises: 0016_swa_window_cells
Create Date: 2026-12-06

The search reads a shape's quants ids first, from ix_quants_search_shape and each quant's repo
(crawler.catalog.size_order), then their rows a batch at a time. A SQLite index entry holds its
rowid, the quant id; a PostgreSQL B-tree entry holds only its columns, so each id was read from
the table (one heap page a quant: ~6,000 for one shape of the 1M-quant bench catalog). With
``INCLUDE (id)`` (PostgreSQL 11, https://www.postgresql.org/docs/current/sql-createindex.html)
the read is an index-only scan. SQLite: nothing changes.
"""

from __future__ import annotations

from alembic import op

revision = "0017_shape_index_ids"
down_revision: str | None = "0016_swa_window_cells"
branch_labels = None
depends_on = None

_COLUMNS = ["live", "search_shape", "size_bytes", "quality_score", "repo_pk"]


def _recreate(include: list[str]) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.drop_index("ix_quants_search_shape", table_name="quants")
    op.create_index("ix_quants_search_shape", "quants", _COLUMNS, postgresql_include=include)


def upgrade() -> None:
    _recreate(["id"])


def downgrade() -> None:
    _recreate([])
