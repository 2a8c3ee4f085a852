"""Baseline: the schema of queuelog 0.1, before Alembic (jobs, attempts, keys, users).

Revision ID: 0001
Revises:
Create Date: 2026-12-01

A frozen copy of ``queuelog/schema.py`` as that release made it. ``metadata`` is also what
``migrate`` uses to complete a database made by that release before stamping it 0001
(that release added missing tables and indexes at every start, so an older file may lack
an index). Never edit this file: change the schema in a new revision.
"""
from __future__ import annotations

from alembic import op
from sqlalchemy import (BigInteger, Column, ForeignKey, Index, Integer, MetaData, String,
                        Table, Text, UniqueConstraint, text)

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

metadata = MetaData()

jobs = Table(
    "jobs", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
           autoincrement=True),
    Column("type", String(100), nullable=False),
    Column("payload", Text, nullable=False),
    Column("priority", Integer, nullable=False, default=0),
    Column("status", String(16), nullable=False),
    Column("attempt", Integer, nullable=False, default=0),
    Column("retry_count", Integer, nullable=False, default=0),
    Column("max_retries", Integer, nullable=False, default=3),
    Column("idempotency_key", String(255)),
    Column("request_hash", String(64)),
    Column("producer", String(100), nullable=False),
    Column("worker_id", String(100)),
    Column("run_at", BigInteger, nullable=False),
    Column("claimed_at", BigInteger),
    Column("lease_expires_at", BigInteger),
    Column("result", Text),
    Column("error", Text),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    Column("finished_at", BigInteger),
    UniqueConstraint("producer", "idempotency_key", name="uq_jobs_producer_idempotency"),
    sqlite_autoincrement=True,
)
Index("ix_jobs_claim", jobs.c.priority.desc(), jobs.c.run_at, jobs.c.id,
      sqlite_where=text("status = 'pending'"), postgresql_where=text("status = 'pending'"))
Index("ix_jobs_lease", jobs.c.lease_expires_at,
      sqlite_where=text("status = 'running'"), postgresql_where=text("status = 'running'"))
Index("ix_jobs_status_id", jobs.c.status, jobs.c.id)
Index("ix_jobs_status_type_id", jobs.c.status, jobs.c.type, jobs.c.id)
Index("ix_jobs_type_id", jobs.c.type, jobs.c.id)
Index("ix_jobs_priority_id", jobs.c.priority, jobs.c.id)
Index("ix_jobs_producer_id", jobs.c.producer, jobs.c.id)
Index("ix_jobs_worker_id", jobs.c.worker_id, jobs.c.id)
Index("ix_jobs_status_finished", jobs.c.status, jobs.c.finished_at)

job_attempts = Table(
    "job_attempts", metadata,
    Column("job_id", BigInteger().with_variant(Integer, "sqlite"),
           ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("worker_id", String(100), nullable=False),
    Column("started_at", BigInteger, nullable=False),
    Column("finished_at", BigInteger),
    Column("outcome", String(16), nullable=False),
    Column("error", Text),
)
Index("ix_attempts_finished", job_attempts.c.finished_at)
Index("ix_attempts_worker", job_attempts.c.worker_id, job_attempts.c.job_id)

api_keys = Table(
    "api_keys", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(100), nullable=False),
    Column("role", String(16), nullable=False),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("types", Text),
    Column("max_priority", Integer, nullable=False, default=10),
    Column("created_at", BigInteger, nullable=False),
    Column("revoked_at", BigInteger),
)
Index("uq_api_keys_active_name", api_keys.c.name, unique=True,
      sqlite_where=text("revoked_at IS NULL"), postgresql_where=text("revoked_at IS NULL"))

users = Table(
    "users", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("username", String(100), nullable=False, unique=True),
    Column("password_hash", String(255), nullable=False),
    Column("role", String(16), nullable=False),
    Column("created_at", BigInteger, nullable=False),
)


def upgrade() -> None:
    """Create the four tables and their indexes."""
    metadata.create_all(op.get_bind())


def downgrade() -> None:
    """Drop them (every job, key and user goes with them)."""
    metadata.drop_all(op.get_bind())
