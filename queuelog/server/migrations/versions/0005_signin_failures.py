"""Failed sign-ins in the database, so the throttle holds across workers and servers.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``signin_failures`` with its two indexes."""
    op.create_table(
        "signin_failures",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True,
                  autoincrement=True),
        sa.Column("username", sa.String(255), nullable=False),
        sa.Column("address", sa.String(255), nullable=False),
        sa.Column("at", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_signin_failures_pair_at", "signin_failures",
                    ["username", "address", "at"])
    op.create_index("ix_signin_failures_at", "signin_failures", ["at"])


def downgrade() -> None:
    """Drop the table (and its indexes)."""
    op.drop_index("ix_signin_failures_at", table_name="signin_failures")
    op.drop_index("ix_signin_failures_pair_at", table_name="signin_failures")
    op.drop_table("signin_failures")
