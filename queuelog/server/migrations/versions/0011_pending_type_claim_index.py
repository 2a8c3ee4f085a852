"""A claim of one type walks an index of its own type's pending jobs, in claim order.

``ix_jobs_pending_type_claim`` (type, priority DESC, run_at, id), pending jobs only. A
claim of one type walked ``ix_jobs_claim`` and skipped every due job of the other types
ahead of its own: with 300,000 ``pdf`` jobs pending at a higher priority, each claim of an
``email`` job read all of them, a cost growing with the other types' backlog. An enqueue
writes one index entry more.

Building it reads every pending job once; on a large queue run ``queuelog db upgrade``
in a quiet moment (SQLite holds its write lock, PostgreSQL blocks writes to ``jobs``,
for the build).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """The index, over pending jobs."""
    op.create_index("ix_jobs_pending_type_claim", "jobs",
                    ["type", sa.text("priority DESC"), "run_at", "id"],
                    sqlite_where=sa.text("status = 'pending'"),
                    postgresql_where=sa.text("status = 'pending'"))


def downgrade() -> None:
    """Without it."""
    op.drop_index("ix_jobs_pending_type_claim", table_name="jobs")
