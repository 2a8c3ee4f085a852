"""Tables and indexes (SQLAlchemy Core). Timestamps are epoch microseconds (BigInteger).

Integers sort and compare the same on SQLite and PostgreSQL, cost no parsing on the
claim path, and keep the fixed-width ISO text a matter of serialization alone.
"""
from __future__ import annotations

from sqlalchemy import (BigInteger, Boolean, Column, Float, ForeignKey, Index, Integer,
                        MetaData, String, Table, Text, UniqueConstraint, false, text)

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
    # Set on jobs a schedule made (SCHEDULES): its name and the tick (migration 0007).
    Column("schedule", String(100)),
    Column("scheduled_for", BigInteger),
    # The last progress a heartbeat reported (a JSON object), and whether a request waits
    # for the job's finish (``GET /jobs/{id}?wait=``): only then does the finish tell the
    # other processes (migration 0012), so an unwatched finish pays no wake-up.
    Column("progress", Text),
    Column("watched", Boolean, nullable=False, server_default=false()),
    # Workflows (migration 0013): the parents' ids as a JSON list (NULL: none), what a
    # parent's failure does (NULL: "cancel"), the parent whose failure cancelled it, how
    # many parents it still waits for (a blocked job), and whether any job depends on it:
    # a job no one depends on finishes without a look at ``job_dependencies``.
    Column("depends_on", Text),
    Column("on_parent_failure", String(8)),
    Column("cancelled_by_parent", BigInteger),
    Column("waiting_for", Integer),
    Column("has_dependents", Boolean, nullable=False, server_default=false()),
    # W3C trace context from the enqueue's headers, checked (migration 0014); NULL: none.
    Column("traceparent", Text),
    Column("tracestate", Text),
    # V-09: a key is unique per producer, not across producers.
    UniqueConstraint("producer", "idempotency_key", name="uq_jobs_producer_idempotency"),
    # SQLite reuses the highest rowid once that row is deleted; AUTOINCREMENT never
    # does, so a purged job's id (in a worker's hands, a URL, a log) names no other job.
    sqlite_autoincrement=True,
)

# The claim walks this partial index in claim order and stops at the first due row.
Index("ix_jobs_claim", jobs.c.priority.desc(), jobs.c.run_at, jobs.c.id,
      sqlite_where=text("status = 'pending'"), postgresql_where=text("status = 'pending'"))
# A claim of one type walks its own jobs in claim order: in ix_jobs_claim it would pass
# every due job of the other types ahead of them (a backlog of one type at a higher
# priority, or older, made each claim of another type read all of it: migration 0011).
Index("ix_jobs_pending_type_claim", jobs.c.type, jobs.c.priority.desc(), jobs.c.run_at,
      jobs.c.id, sqlite_where=text("status = 'pending'"),
      postgresql_where=text("status = 'pending'"))
# Taking back expired leases looks only at running jobs, oldest lease first.
Index("ix_jobs_lease", jobs.c.lease_expires_at,
      sqlite_where=text("status = 'running'"), postgresql_where=text("status = 'running'"))
# Newest-first list pages: keyset on id within each filter.
Index("ix_jobs_status_id", jobs.c.status, jobs.c.id)
# "Failed pdf jobs" is the dashboard's common pair; and /metrics groups by status and type,
# which this index answers alone (no table rows, no sort).
Index("ix_jobs_status_type_id", jobs.c.status, jobs.c.type, jobs.c.id)
Index("ix_jobs_type_id", jobs.c.type, jobs.c.id)
Index("ix_jobs_priority_id", jobs.c.priority, jobs.c.id)
Index("ix_jobs_producer_id", jobs.c.producer, jobs.c.id)
# The next three hold only the rows their queries can find (migration 0010): an enqueue
# writes none of them, a claim only the worker's.
Index("ix_jobs_worker_id", jobs.c.worker_id, jobs.c.id,
      sqlite_where=text("worker_id IS NOT NULL"), postgresql_where=text("worker_id IS NOT NULL"))
# GET /jobs?schedule= and a schedule's last job (GET /schedules): newest first per schedule.
Index("ix_jobs_schedule_id", jobs.c.schedule, jobs.c.id,
      sqlite_where=text("schedule IS NOT NULL"), postgresql_where=text("schedule IS NOT NULL"))
# Retention deletes the oldest finished jobs first, in batches.
Index("ix_jobs_status_finished", jobs.c.status, jobs.c.finished_at,
      sqlite_where=text("finished_at IS NOT NULL"),
      postgresql_where=text("finished_at IS NOT NULL"))
# The oldest due pending job of a type (GET /types, queue age): one seek per type.
Index("ix_jobs_pending_type_run", jobs.c.type, jobs.c.run_at,
      sqlite_where=text("status = 'pending'"), postgresql_where=text("status = 'pending'"))

# Which job waits for which (Workflows): a finished parent's dependents are found by its
# primary key; a purged child's rows go with it (the child index).
job_dependencies = Table(
    "job_dependencies", metadata,
    Column("parent_id", BigInteger().with_variant(Integer, "sqlite"),
           ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("child_id", BigInteger().with_variant(Integer, "sqlite"),
           ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
)
Index("ix_job_dependencies_child", job_dependencies.c.child_id)

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
# Completed/failed per minute for the dashboard chart.
Index("ix_attempts_finished", job_attempts.c.finished_at)
Index("ix_attempts_worker", job_attempts.c.worker_id, job_attempts.c.job_id)

api_keys = Table(
    "api_keys", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(100), nullable=False),
    Column("role", String(16), nullable=False),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("types", Text),  # JSON list, NULL = every configured type
    Column("max_priority", Integer, nullable=False, default=10),
    Column("created_at", BigInteger, nullable=False),
    Column("revoked_at", BigInteger),
)
# Names are unique among active keys only, so a revoked name can be reused (rotation).
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

# Who changed what: one row per admin or operator action (CONTRACT "Audit log"). The
# detail is a small JSON object; never a token, password, payload or error text.
audit_events = Table(
    "audit_events", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
           autoincrement=True),
    Column("at", BigInteger, nullable=False),
    Column("actor", String(100), nullable=False),
    Column("action", String(50), nullable=False),
    Column("target", String(255)),
    Column("detail", Text),
    sqlite_autoincrement=True,
)
Index("ix_audit_action_id", audit_events.c.action, audit_events.c.id)
Index("ix_audit_actor_id", audit_events.c.actor, audit_events.c.id)
Index("ix_audit_at", audit_events.c.at)

# One row per paused job type; no row means the type runs. In the database, so a pause holds
# across restarts and for every app server.
paused_types = Table(
    "paused_types", metadata,
    Column("type", String(100), primary_key=True),
    Column("paused_at", BigInteger, nullable=False),
    Column("paused_by", String(100), nullable=False),
)

# Flow control: one limiter row per type (CONTRACT "Flow control"). Every claim that may take
# a limited type locks its row, so concurrency and tokens are decided one claim at a time on
# every app server. ``overridden``: the limits were set by PUT /types/{type}/limits (else the
# config's apply, and the limit columns are unused). ``tokens`` NULL: a full bucket.
type_limits = Table(
    "type_limits", metadata,
    Column("type", String(100), primary_key=True),
    Column("overridden", Boolean, nullable=False, default=False, server_default=false()),
    Column("concurrency", Integer),
    Column("rate", String(20)),
    Column("burst", Integer),
    Column("tokens", Float),
    Column("refilled_at", BigInteger),
    Column("updated_at", BigInteger),
    Column("updated_by", String(100)),
)

# Failed Basic sign-ins, one row each, for the throttle (CONTRACT "Who is who"). In the
# database so that every worker process and app server counts the same failures; rows older
# than the throttle's minute are deleted as new failures come in, so the table stays small.
signin_failures = Table(
    "signin_failures", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
           autoincrement=True),
    Column("username", String(255), nullable=False),
    Column("address", String(255), nullable=False),
    Column("at", BigInteger, nullable=False),
)
Index("ix_signin_failures_pair_at", signin_failures.c.username, signin_failures.c.address,
      signin_failures.c.at)
Index("ix_signin_failures_at", signin_failures.c.at)  # the bounded sweep of expired rows

# Jobs per (status, type), kept by triggers on ``jobs`` (migration 0008), so that /metrics,
# GET /types and the dashboard count in time independent of the table's size. On
# PostgreSQL the triggers append to ``job_count_deltas`` (no row lock shared by claims);
# the true count is ``job_counts.n`` plus the deltas (``Stats.job_counts``).
job_counts = Table(
    "job_counts", metadata,
    Column("status", String(16), primary_key=True),
    Column("type", String(100), primary_key=True),
    Column("n", BigInteger, nullable=False),
)
job_count_deltas = Table(
    "job_count_deltas", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
           autoincrement=True),
    Column("status", String(16), nullable=False),
    Column("type", String(100), nullable=False),
    Column("n", BigInteger, nullable=False),
)
# GET /workers: each worker name's newest claim, one seek per name (migration 0009; it
# replaces 0008's (started_at, worker_id), whose day of attempts grew with the throughput).
Index("ix_attempts_worker_started", job_attempts.c.worker_id, job_attempts.c.started_at)

# One row per (schedule, tick) that made a job: the primary key is what makes a tick one job
# however many servers race for it (the loser's transaction rolls back, job and all). Rows
# older than an hour before a schedule's newest are deleted as new ones come in.
schedule_ticks = Table(
    "schedule_ticks", metadata,
    Column("schedule", String(100), primary_key=True),
    Column("tick", BigInteger, primary_key=True),
    Column("job_id", BigInteger, nullable=False),
)

# One row per paused schedule; no row means it runs. In the database, as paused_types.
paused_schedules = Table(
    "paused_schedules", metadata,
    Column("schedule", String(100), primary_key=True),
    Column("paused_at", BigInteger, nullable=False),
    Column("paused_by", String(100), nullable=False),
)

# Attempts ended per (minute, type, worker), kept by triggers on ``job_attempts`` (migration
# 0015), so the last hour of GET /types, GET /workers and the dashboard's chart costs the
# hour's rows here (types x workers x 60), not its attempts. ``minute_at``: the minute's
# first epoch microsecond. ``shard``: PostgreSQL's writers spread over rows (see 0015);
# 0 on SQLite. ``failed`` counts lease expiries too. Pruned after two hours (minutes.py).
attempt_minutes = Table(
    "attempt_minutes", metadata,
    Column("minute_at", BigInteger, primary_key=True),
    Column("type", String(100), primary_key=True),
    Column("worker_id", String(100), primary_key=True),
    Column("shard", Integer, primary_key=True),
    Column("completed", BigInteger, nullable=False),
    Column("failed", BigInteger, nullable=False),
)
