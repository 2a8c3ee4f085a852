"""A job's progress, and whether a request waits for its finish.

``progress`` holds the last object a heartbeat reported (``POST /jobs/{id}/heartbeat``).
``watched`` is set by ``GET /jobs/{id}?wait=S`` on an unfinished job: the transaction that
finishes a watched job tells every process (a wake-up, as for a claim), and a finish no one
waits for tells no one. Both are added with constant defaults: no table rewrite on either
backend, the jobs kept.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """The two columns."""
    op.add_column("jobs", sa.Column("progress", sa.Text(), nullable=True))
    op.add_column("jobs", sa.Column("watched", sa.Boolean(), nullable=False,
                                    server_default=sa.false()))


def downgrade() -> None:
    """Without them."""
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("watched")
        batch.drop_column("progress")
