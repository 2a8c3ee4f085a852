"""Trace context: a job's W3C ``traceparent`` and ``tracestate``.

Set from the enqueue request's headers (``POST /jobs``, ``POST /jobs/batch``), shown on the
job and handed to whoever claims it. Two nullable text columns with no default: no table
rewrite on either backend, the jobs kept (NULL: none).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """The two columns."""
    op.add_column("jobs", sa.Column("traceparent", sa.Text()))
    op.add_column("jobs", sa.Column("tracestate", sa.Text()))


def downgrade() -> None:
    """Without them."""
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("tracestate")
        batch.drop_column("traceparent")
