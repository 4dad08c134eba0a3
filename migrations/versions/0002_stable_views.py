"""stable views v_quants and v_tensor_groups (documented in docs/catalog.md)

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02

The SQL is frozen here, not imported, so this revision never changes once applied. Both views
show live rows only: analysed quants of repos and files that have not vanished.
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

V_QUANTS = """
CREATE VIEW v_quants AS
SELECT r.repo_id, q.revision, q.path, q.quant_label, q.architecture, q.size_bytes,
       q.n_params, q.bpw, q.mtp_present, q.mtp_min_bits, q.mtp_preserved,
       q.attn_min_bits, q.attn_preserved, q.dynamic, q.loadable_by_mainline, q.analysed_at
FROM quants q
JOIN repos r ON r.id = q.repo_pk
WHERE q.vanished_at IS NULL AND r.vanished_at IS NULL AND q.analysed_at IS NOT NULL
"""

V_TENSOR_GROUPS = """
CREATE VIEW v_tensor_groups AS
SELECT r.repo_id, q.path, g.group_name, g.n_tensors, g.n_params, g.n_bytes, g.bpw,
       g.min_bits, g.max_bits
FROM tensor_groups g
JOIN quants q ON q.id = g.quant_id
JOIN repos r ON r.id = q.repo_pk
WHERE q.vanished_at IS NULL AND r.vanished_at IS NULL AND q.analysed_at IS NOT NULL
"""


def upgrade() -> None:
    op.execute(V_QUANTS)
    op.execute(V_TENSOR_GROUPS)


def downgrade() -> None:
    op.execute("DROP VIEW v_tensor_groups")
    op.execute("DROP VIEW v_quants")
