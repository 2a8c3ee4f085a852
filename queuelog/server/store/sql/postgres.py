"""PostgreSQL's statements: JSON items read as ``jsonb``, wake-ups by ``pg_notify``."""
from __future__ import annotations

from sqlalchemy import text


# Many rows in one statement (``insert_rows``), read as ``jsonb`` in array order: parsed
# once, where each ``->>`` on a ``json`` value parsed its row again.
INSERT_ROWS = ("INSERT INTO {table} ({columns}) SELECT {picks} FROM "
               "jsonb_array_elements(CAST(:rows AS jsonb)) WITH ORDINALITY AS r(v, ord) "
               "ORDER BY ord{returning}")
# pg_notify in a RETURNING: told to every LISTEN at commit, once however many rows.
NOTIFIED = "pg_notify(:channel, '') AS notified"
# The items of a complete or an end (``{columns}``: what each item adds), the fence's
# status and worker beside them, in a MATERIALIZED CTE: so they are join clauses on
# ``jobs``, which no index can take alone, and each item is a primary-key lookup (FENCE).
# As constants the planner weighed them by statistics and, with a new or stale table's,
# hashed every running job of the worker through the lease and worker indexes, dead
# entries and the worker's whole history included: a cost growing with the table (a
# 100-job complete's join 3.2 ms, not 0.25, after 20,000 jobs). SQLite's form: ``+``.
ITEMS = ("v AS MATERIALIZED (SELECT CAST(i ->> 0 AS BIGINT) AS id, "
         "CAST(i ->> 1 AS INTEGER) AS att, {columns}, "
         "CAST('running' AS VARCHAR) AS running, CAST(:wkr AS VARCHAR) AS wkr "
         "FROM jsonb_array_elements(CAST(:items AS jsonb)) AS e(i))")
FENCE = "jobs.id = v.id AND jobs.status = v.running AND jobs.attempt = v.att"
# The one complete: the items joined to their rows, each fenced alone; their attempts
# closed and a freed slot's wake-up sent by the same statement. ``{guard}``: PLAIN, in
# autocommit, leaves a job with dependents to a transaction (their release goes with it).
PLAIN = " AND NOT jobs.has_dependents"
COMPLETE = (
    "WITH " + ITEMS.format(columns="i ->> 2 AS res") + ", "
    "done AS (UPDATE jobs SET status = 'completed', result = v.res, "
    "lease_expires_at = NULL, finished_at = :now, updated_at = :now FROM v "
    "WHERE " + FENCE + " AND jobs.worker_id = v.wkr{guard} "
    "RETURNING jobs.*), "
    "ended AS (UPDATE job_attempts SET finished_at = :now, outcome = 'completed', "
    "error = NULL FROM done WHERE job_attempts.job_id = done.id "
    "AND job_attempts.attempt = done.attempt) SELECT {returning}, CASE WHEN done.type = "
    "ANY(CAST(:slot_types AS VARCHAR[])) THEN pg_notify(:channel, '') END AS notified "
    "FROM done")
# Attempts ended by a failure (a fail, leases taken back), as one statement: the items
# (``[[id, attempt, status, retry_count, run_at, error], ...]``, each decided by
# ``Finishing``) joined to their rows, each fenced alone, and their attempts closed with
# the same outcome and error. ``{own}``: held by ``:wkr``.
END = (
    "WITH " + ITEMS.format(columns="i ->> 2 AS status, CAST(i ->> 3 AS INTEGER) AS n, "
                                   "CAST(i ->> 4 AS BIGINT) AS run_at, i ->> 5 AS error") + ", "
    "ended AS (UPDATE jobs SET status = v.status, retry_count = v.n, "
    "run_at = coalesce(v.run_at, jobs.run_at), error = v.error, lease_expires_at = NULL, "
    "updated_at = :now, finished_at = CASE WHEN v.status = 'failed' THEN :now END "
    "FROM v WHERE " + FENCE + "{own} "
    "RETURNING jobs.*), "
    "closed AS (UPDATE job_attempts SET finished_at = :now, outcome = :outcome, "
    "error = ended.error FROM ended WHERE job_attempts.job_id = ended.id "
    "AND job_attempts.attempt = ended.attempt) SELECT * FROM ended")
OWN = " AND jobs.worker_id = v.wkr"
WRITABLE = text("SELECT NOT pg_is_in_recovery() "
                "AND current_setting('transaction_read_only') = 'off'")
ADVISORY = text("SELECT pg_advisory_xact_lock(:key)")
NOTIFY = text("SELECT pg_notify(:channel, '')")  # :channel one of listen.CHANNELS
# Two folds at once: the second's DELETE waits on the first's rows and then finds them
# gone, so no delta is added twice.
FOLD_COUNTS = text(
    "WITH moved AS (DELETE FROM job_count_deltas RETURNING status, type, n) "
    "INSERT INTO job_counts (status, type, n) "
    "SELECT status, type, sum(n) FROM moved GROUP BY status, type "
    "ON CONFLICT (status, type) DO UPDATE SET n = job_counts.n + excluded.n")
EXPIRED_BY_TYPE = text("SELECT type, count(*) FROM jobs WHERE status = 'running' "
                       "AND lease_expires_at < :now GROUP BY type")
