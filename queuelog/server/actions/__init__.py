"""The service layer: one action per thing a person or program can do, and its rules.

Every view, dashboard page and command reads and writes through an action, never the store.
Each action declares the roles that may call it and refuses any other caller itself
(``gate``); past that it holds the rules written nowhere else: a key's types and max
priority, the revoked-key re-check of a waiting claim, which jobs a principal may read and
what of them (V-10: ``reads.sees_errors``), the idempotency hash, sanitizing error text after
fencing, and the metrics' counts (so the single and the batch routes count alike). The
store writes the audit event of an audited change in the change's own transaction and
wakes long polls (wakeups.py); the actions pass it the actor. The command line acts as
``CLI``, the schedules' ticker as ``system("schedule:<name>")``.

Call sites use the package: ``from queuelog.server import actions; actions.enqueue(...)``.
"""
from __future__ import annotations

from queuelog.server.actions.accounts import (create_key, create_user, delete_user, list_keys,
                                              list_users, revoke_key, set_password,
                                              user_exists)
from queuelog.server.actions.admin import (audit_events, job_timings, job_types, purge_audit,
                                           reset_limits, set_limits, set_paused, workers)
from queuelog.server.actions.gate import CLI, SYSTEM, gate, roles_of, scope_of, system
from queuelog.server.actions.jobs import (bulk_cancel, bulk_retry, cancel, count_purgeable,
                                          enqueue, enqueue_many, purge, request_hash, retry,
                                          run_now)
from queuelog.server.actions.operations import (api_document, backup, schema_revision, scrape,
                                                upgrade_deferred, upgrade_schema)
from queuelog.server.actions.reads import (Overview, Relative, Workflow, count_matching,
                                           dashboard, dashboard_job, dashboard_jobs,
                                           dashboard_workflow, get_job, list_jobs, now,
                                           overview, health, sees_errors, sees_key, visible)
from queuelog.server.actions.schedules import (run_schedule, schedule_states,
                                               schedule_tick, set_schedule_paused)
from queuelog.server.actions.work import (Finished, NextClaim, claim, complete,
                                          complete_many, fail, fail_many, heartbeat)

__all__ = [
    "CLI", "SYSTEM", "Finished", "NextClaim", "Overview", "Relative", "Workflow", "api_document", "audit_events", "backup", "bulk_cancel",
    "bulk_retry", "cancel", "claim", "complete", "complete_many", "count_matching",
    "count_purgeable", "create_key", "create_user", "dashboard", "dashboard_job",
    "dashboard_jobs", "dashboard_workflow", "delete_user", "enqueue", "enqueue_many", "fail", "fail_many", "gate",
    "get_job", "heartbeat", "job_timings", "job_types", "list_jobs", "list_keys", "list_users", "now",
    "overview", "health", "purge", "purge_audit", "request_hash", "reset_limits", "retry",
    "revoke_key", "roles_of", "run_now", "run_schedule", "schema_revision", "schedule_states",
    "schedule_tick", "scope_of", "scrape", "sees_errors", "sees_key", "set_limits",
    "set_password", "set_paused", "set_schedule_paused", "system", "upgrade_deferred",
    "upgrade_schema", "user_exists", "visible", "workers",
]
