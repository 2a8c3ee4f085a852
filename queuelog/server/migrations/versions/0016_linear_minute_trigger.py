"""PostgreSQL: the per-minute rollup's trigger in time linear in the statement's rows.

0015's trigger found the attempts a statement ended by joining its transition tables,
``new_rows`` to ``old_rows``. A transition table has no statistics, so the planner takes it
for one row and nests the loops: a complete of 100 jobs compared 10,000 pairs, of 2,000 jobs
four million (``bench/bench_batch_cost.py``: a complete 145 us a job at 500 jobs, 332 at
2,000; 70 and 64 with this function), and ``MAX_BATCH`` may be set up to 100,000.

The same attempts, found without a join of the two: the rows ended in ``new_rows`` (+1) and
those already ended in ``old_rows`` (-1) grouped by attempt (the primary key, which no
statement changes), keeping the attempts whose sum is 1: ended by this statement. A grouping
is hashed or sorted, never nested, whatever the planner guesses of the tables' sizes (a
``NOT IN`` was tried first: hashed at 100 rows, but a plain subplan, quadratic again, once
the rows outgrow ``work_mem``: a 270,000-row UPDATE ran for 20 minutes). Each attempt's job
type is one primary-key probe (a scalar subquery: never a scan of ``jobs``). SQLite's row
trigger compares ``OLD`` and ``NEW`` directly: nothing to change there.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""
from __future__ import annotations

import importlib

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_0015 = importlib.import_module("queuelog.server.migrations.versions.0015_attempt_minutes")

PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION queuelog_count_attempt_minutes() RETURNS trigger LANGUAGE plpgsql
AS $$
BEGIN
  INSERT INTO attempt_minutes AS m (minute_at, type, worker_id, shard, completed, failed)
    SELECT {_0015.MINUTE.format(a='e')}, (SELECT j.type FROM jobs AS j WHERE j.id = e.job_id),
           e.worker_id, pg_backend_pid() % {_0015.SHARDS},
           count(*) FILTER (WHERE e.outcome = 'completed'),
           count(*) FILTER (WHERE e.outcome <> 'completed')
    FROM (SELECT c.job_id, max(c.worker_id) AS worker_id, max(c.finished_at) AS finished_at,
                 max(c.outcome) AS outcome
          FROM (SELECT n.job_id, n.attempt, n.worker_id, n.finished_at, n.outcome, 1 AS d
                FROM new_rows AS n
                WHERE n.finished_at IS NOT NULL AND n.outcome IN {_0015.ENDED}
                UNION ALL
                SELECT o.job_id, o.attempt, NULL, NULL, NULL, -1
                FROM old_rows AS o WHERE o.finished_at IS NOT NULL) AS c
          GROUP BY c.job_id, c.attempt
          HAVING sum(c.d) = 1) AS e
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3  -- every statement locks the rows it adds to in one order: no deadlock
  ON CONFLICT (minute_at, type, worker_id, shard) DO UPDATE
    SET completed = m.completed + excluded.completed, failed = m.failed + excluded.failed;
  RETURN NULL;
END $$
"""


def upgrade() -> None:
    """Replace the function (the trigger calls it by name: it stays as it is)."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_FUNCTION)


def downgrade() -> None:
    """0015's function again."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_0015.PG_FUNCTION)
