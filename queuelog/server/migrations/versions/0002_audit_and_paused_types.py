"""The audit log and paused job types (issue 10).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``audit_events`` (with its three indexes) and ``paused_types``."""
    op.create_table(
        "audit_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True,
                  autoincrement=True),
        sa.Column("at", sa.BigInteger, nullable=False),
        sa.Column("actor", sa.String(100), nullable=False),
        sa.Column("action", sa.String(50), nullable=False),
        sa.Column("target", sa.String(255)),
        sa.Column("detail", sa.Text),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_audit_action_id", "audit_events", ["action", "id"])
    op.create_index("ix_audit_actor_id", "audit_events", ["actor", "id"])
    op.create_index("ix_audit_at", "audit_events", ["at"])
    op.create_table(
        "paused_types",
        sa.Column("type", sa.String(100), primary_key=True),
        sa.Column("paused_at", sa.BigInteger, nullable=False),
        sa.Column("paused_by", sa.String(100), nullable=False),
    )


def downgrade() -> None:
    """Drop both tables."""
    op.drop_table("paused_types")
    op.drop_index("ix_audit_at", table_name="audit_events")
    op.drop_index("ix_audit_actor_id", table_name="audit_events")
    op.drop_index("ix_audit_action_id", table_name="audit_events")
    op.drop_table("audit_events")
