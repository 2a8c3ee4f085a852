"""Jobs per (status, type) kept by triggers, so counts cost the same at any table size;
an index for the workers page.

- SQLite (one writer at a time): row triggers add and subtract in ``job_counts`` directly.
- PostgreSQL: a row every claim updated would serialize concurrent claims of a type on its
  lock, so statement triggers (transition tables: a batch of 500 is one row) append signed
  deltas to ``job_count_deltas``; readers add them up, and fold them into ``job_counts``
  once there are many (``Stats.job_counts``).
Triggers, not code in the store: no path that changes a job's status can forget them.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_SQLITE_UPSERT = ("INSERT INTO job_counts (status, type, n) VALUES ({row}.status, {row}.type, "
                  "{d}) ON CONFLICT (status, type) DO UPDATE SET n = n + {d};")
SQLITE_TRIGGERS = [
    "CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs BEGIN "
    + _SQLITE_UPSERT.format(row="NEW", d=1) + " END",
    "CREATE TRIGGER jobs_count_update AFTER UPDATE OF status, type ON jobs "
    "WHEN OLD.status IS NOT NEW.status OR OLD.type IS NOT NEW.type BEGIN "
    + _SQLITE_UPSERT.format(row="OLD", d=-1) + " "
    + _SQLITE_UPSERT.format(row="NEW", d=1) + " END",
    "CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs BEGIN "
    + _SQLITE_UPSERT.format(row="OLD", d=-1) + " END",
]

PG_FUNCTION = """
CREATE OR REPLACE FUNCTION queuelog_count_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO job_count_deltas (status, type, n)
      SELECT status, type, count(*) FROM new_rows GROUP BY status, type;
  ELSIF TG_OP = 'DELETE' THEN
    INSERT INTO job_count_deltas (status, type, n)
      SELECT status, type, -count(*) FROM old_rows GROUP BY status, type;
  ELSE  -- an UPDATE: only rows whose status or type changed leave a delta
    INSERT INTO job_count_deltas (status, type, n)
      SELECT status, type, sum(d) FROM (
        SELECT status, type, -1 AS d FROM old_rows
        UNION ALL SELECT status, type, 1 FROM new_rows) AS c
      GROUP BY status, type HAVING sum(d) <> 0;
  END IF;
  RETURN NULL;
END $$
"""
PG_TRIGGERS = [
    "CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs REFERENCING NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION queuelog_count_jobs()",
    "CREATE TRIGGER jobs_count_update AFTER UPDATE ON jobs REFERENCING OLD TABLE AS old_rows "
    "NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION queuelog_count_jobs()",
    "CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs REFERENCING OLD TABLE AS old_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION queuelog_count_jobs()",
]


def upgrade() -> None:
    """Add the count tables, fill them from ``jobs``, then the triggers; the workers index."""
    op.create_table(
        "job_counts",
        sa.Column("status", sa.String(16), primary_key=True),
        sa.Column("type", sa.String(100), primary_key=True),
        sa.Column("n", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "job_count_deltas",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True,
                  autoincrement=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("type", sa.String(100), nullable=False),
        sa.Column("n", sa.BigInteger, nullable=False),
    )
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:  # no claim may change a count between the fill and the triggers
        op.execute("LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE")
    op.execute("INSERT INTO job_counts (status, type, n) "
               "SELECT status, type, count(*) FROM jobs GROUP BY status, type")
    if postgres:
        op.execute(PG_FUNCTION)
    for ddl in PG_TRIGGERS if postgres else SQLITE_TRIGGERS:
        op.execute(ddl)
    # GET /workers: who claimed in the last 24 hours, from the index alone.
    op.create_index("ix_attempts_started_worker", "job_attempts", ["started_at", "worker_id"])


def downgrade() -> None:
    """Drop the triggers, the count tables and the index."""
    postgres = op.get_bind().dialect.name == "postgresql"
    for name in ("jobs_count_insert", "jobs_count_update", "jobs_count_delete"):
        op.execute(f"DROP TRIGGER IF EXISTS {name}" + (" ON jobs" if postgres else ""))
    if postgres:
        op.execute("DROP FUNCTION IF EXISTS queuelog_count_jobs()")
    op.drop_index("ix_attempts_started_worker", table_name="job_attempts")
    op.drop_table("job_count_deltas")
    op.drop_table("job_counts")
