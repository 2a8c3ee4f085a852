"""Flow control: a limiter row per job type (limits set at run time, the token bucket).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-08
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``type_limits``."""
    op.create_table(
        "type_limits",
        sa.Column("type", sa.String(100), primary_key=True),
        sa.Column("overridden", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("concurrency", sa.Integer),
        sa.Column("rate", sa.String(20)),
        sa.Column("burst", sa.Integer),
        sa.Column("tokens", sa.Float),
        sa.Column("refilled_at", sa.BigInteger),
        sa.Column("updated_at", sa.BigInteger),
        sa.Column("updated_by", sa.String(100)),
    )


def downgrade() -> None:
    """Drop the table."""
    op.drop_table("type_limits")
