"""Claim-time policy: which due jobs a claim may take now, decided in one place.

Every claim path (single, batch, long poll) runs the same claim statement, built once in
``Queue``; the condition below is part of it, so the policy is checked inside the claim's
own transaction and no path can skip it. Paused types today; per-type concurrency and rate
limits (CONTRACT.md, Flow control) are to be added here, as further conditions.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, select

from queuelog.server.store.tables import paused_types


def eligible(cand: Any) -> ColumnElement[bool]:
    """The condition a due job (a row of ``cand``, an alias of jobs) must meet to be claimed.

    A paused type is skipped by the walk (the small paused_types set is read once per
    statement), so the claim stays a walk of the claim index in claim order.
    """
    return cand.c.type.not_in(select(paused_types.c.type))
