"""The dashboard's bulk actions: an admin retries or cancels every job the current filter
shows, after a confirmation page that states how many.

The POST is checked in the same order as the job buttons: signed in (401), admin (403),
not cross-site, then the form's CSRF token.
"""
from __future__ import annotations

from typing import Any

from flask import Blueprint, flash, redirect, render_template, request, url_for

from queuelog.model.jobs import Status
from queuelog.server import actions
from queuelog.server.auth import current_user, require
from queuelog.server.ui.filters import BadFilter, parse_filters, prio_value
from queuelog.server.ui.helpers import check_form, error_page

bp = Blueprint("bulk", __name__)

BULK = {"retry": ("failed", "cancelled"), "cancel": ("pending", "blocked")}


@bp.get("/bulk/<any(retry, cancel):verb>")
@require(actions.dashboard, actions.count_matching)
def bulk_confirm(verb: str) -> Any:
    """Admin: how many jobs the filter matches now, and a form to act on all of them."""
    try:
        f = _bulk_filters(verb, request.args)
    except BadFilter as exc:
        return error_page(400, "Bad filter", str(exc))
    n = actions.count_matching(current_user(), Status(f["status"]), type=f["type"],
                               priority=prio_value(f["priority"]))
    return render_template("ui/bulk.html", verb=verb, count=n,
                           filters={k: v for k, v in f.items() if v})


@bp.post("/bulk/<any(retry, cancel):verb>")
@require(actions.dashboard, actions.bulk_retry, actions.bulk_cancel)
def bulk(verb: str) -> Any:
    """Admin: retry or cancel every job the filter matches (in bounded transactions)."""
    check_form()
    try:
        f = _bulk_filters(verb, request.form, also=("csrf_token",))
    except BadFilter as exc:
        return error_page(400, "Bad filter", str(exc))
    who, prio = current_user(), prio_value(f["priority"])
    if verb == "retry":
        n = actions.bulk_retry(who, statuses=[Status(f["status"])], type=f["type"],
                               priority=prio)
        flash(f"{n:,} job(s) are pending again, with fresh retries.", "ok")
    else:
        # Only the list's status: the confirmation counted those alone.
        n = actions.bulk_cancel(who, statuses=[Status(f["status"])], type=f["type"],
                                priority=prio)
        flash(f"{n:,} {f['status']} job(s) are cancelled.", "ok")
    return redirect(url_for("ui.queue.index", **{k: v for k, v in f.items() if v}), 303)


def _bulk_filters(verb: str, source: Any, also: tuple[str, ...] = ()) -> dict[str, Any]:
    """The filter of a bulk action; its status must be one the action starts from."""
    f = parse_filters(source, also=also)
    narrower = [k for k in ("producer", "worker", "q") if f[k]]
    if narrower:  # the bulk verbs select by status, type and priority alone
        raise BadFilter(f"Bulk actions filter by status, type and priority only, not by "
                        f"{', '.join(narrower)}.")
    if f["status"] not in BULK[verb]:
        raise BadFilter(f"status must be one of {', '.join(BULK[verb])} to {verb} in bulk.")
    return {k: f[k] for k in ("status", "type", "priority")}
