"""The dashboard through the test client, on SQLite and PostgreSQL."""
from __future__ import annotations

import base64
import json
import re
from typing import Any
from urllib.parse import quote

import pytest
from flask import template_rendered
from werkzeug.security import generate_password_hash

from helpers import SQLITE_ONLY, add, hash_checks, password_clock
from queuelog.server.requests.bodies import DASHBOARD_STATUSES
from queuelog.server.ui import helpers
from queuelog.server.ui.filters import PAGE_SIZE
from queuelog.server.ui.charts import minute_chart, nice_ceiling
from queuelog.model.jobs import Job, Status
from queuelog.server.store import NewJob, Store

MARKER = "ERRMARK-7f3a"
SCRIPT = '<script>alert("x")</script>'
ALL_STATUSES = ["blocked", "pending", "scheduled", "running", "completed", "failed", "cancelled"]


def run(store: Store, outcome: str, error: str = MARKER, retry: bool = False) -> int:
    """Claim the next due job and finish it as ``outcome``; return its id."""
    job = store.claim("mailer-1", lease_seconds=60)
    assert job is not None
    if outcome == "completed":
        store.complete(job.id, "mailer-1", job.attempt, json.dumps({"ok": SCRIPT}))
    elif outcome == "failed":
        store.fail(job.id, "mailer-1", job.attempt, error, retry=retry)
    return job.id


def child(store: Store, *parents: int, how: str = "cancel", type: str = "email") -> int:
    """A job that depends on ``parents`` (on_parent_failure ``how``); return its id."""
    job, created = store.enqueue(NewJob("billing", type, "{}", 0, 3, depends_on=parents,
                                        on_parent_failure=how))
    assert created
    return job.id


@pytest.fixture
def seeded(store: Store, clock: Any) -> dict[str, int]:
    """One job in every state; failed attempts carry the error marker."""
    ids = {}
    ids["completed"] = add(store, payload={"html": SCRIPT})
    run(store, "completed")
    ids["failed"] = add(store)
    run(store, "failed")
    ids["retrying"] = add(store, "pdf")  # pending again, with a failed attempt in history
    run(store, "failed", retry=True)
    ids["running"] = add(store, "sync")
    run(store, "running")
    ids["cancelled"] = add(store)
    store.cancel(ids["cancelled"])
    ids["scheduled"] = add(store, delay=3600)
    ids["pending"] = add(store, priority=20)
    ids["blocked"] = child(store, ids["pending"])  # waits for it
    clock.advance(10)  # past the retry's backoff: only the delayed job is scheduled
    return ids


def person(store: Store, username: str, role: str) -> dict[str, str]:
    """A user with a deliberately cheap hash (tests only; the app's hash is slow)."""
    password = "correct horse battery"
    store.accounts.create_user(username, generate_password_hash(password, "pbkdf2:sha256:1"),
                               role)
    raw = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"Authorization": f"Basic {raw}"}


@pytest.fixture
def viewer(store: Store) -> dict[str, str]:
    """A viewer's Basic credentials."""
    return person(store, "vera", "viewer")


@pytest.fixture
def admin_user(store: Store) -> dict[str, str]:
    """An admin's Basic credentials."""
    return person(store, "ada", "admin")


def every_page(ids: dict[str, int]) -> list[str]:
    """Every dashboard page for the seeded jobs, with each filter."""
    pages = ["/ui/", "/ui/?type=email", "/ui/?priority=high", "/ui/?status=&type=&priority=",
             "/ui/types"]
    pages += [f"/ui/?status={s}" for s in ALL_STATUSES]
    pages += [f"/ui/jobs/{i}" for i in ids.values()]
    pages += [f"/ui/?before={max(ids.values())}", f"/ui/?after={min(ids.values())}"]
    return pages


def csrf_token(client: Any, job_id: int, headers: dict[str, str]) -> str:
    """The hidden csrf_token of the admin forms on a job page."""
    page = client.get(f"/ui/jobs/{job_id}", headers=headers)
    match = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert match, "no CSRF token on the job page"
    return match.group(1)


def test_root_redirects_to_ui(client: Any, viewer: dict[str, str]) -> None:
    resp = client.get("/", headers=viewer)
    assert resp.status_code == 302 and resp.headers["Location"].endswith("/ui/")


def test_every_page_renders_for_viewer_and_admin(client: Any, seeded: dict[str, int],
                                                 viewer: dict[str, str],
                                                 admin_user: dict[str, str]) -> None:
    for who in (viewer, admin_user):
        for page in every_page(seeded):
            resp = client.get(page, headers=who)
            assert resp.status_code == 200, page
            assert resp.mimetype == "text/html"


def test_viewer_pages_never_contain_error_text(client: Any, seeded: dict[str, int],
                                              viewer: dict[str, str],
                                              admin_user: dict[str, str]) -> None:
    for page in every_page(seeded):
        assert MARKER not in client.get(page, headers=viewer).text, page
    # The marker is really there: admins see it in the table and on the job pages.
    assert MARKER in client.get("/ui/?status=failed", headers=admin_user).text
    for key in ("failed", "retrying"):
        assert MARKER in client.get(f"/ui/jobs/{seeded[key]}", headers=admin_user).text


def jobs_in(value: Any, depth: int = 0) -> list[Job]:
    """The jobs a template's context value holds: a job, or one in a page or a list."""
    if isinstance(value, Job):
        return [value]
    if depth > 2:
        return []
    if isinstance(value, (list, tuple)):
        return [j for v in value for j in jobs_in(v, depth + 1)]
    if isinstance(value, dict):
        return [j for v in value.values() for j in jobs_in(v, depth + 1)]
    return jobs_in(getattr(value, "jobs", None), depth + 1) if hasattr(value, "jobs") else []


def test_error_text_never_reaches_a_viewers_template(app: Any, client: Any,
                                                     seeded: dict[str, int],
                                                     viewer: dict[str, str],
                                                     admin_user: dict[str, str]) -> None:
    """V-10: error text is removed from a viewer's jobs before the template (ui/queue.py),
    not merely left unrendered by it: a template, a macro or a new page that forgot its
    ``is_admin`` would still have none to show."""
    seen: list[Job] = []

    def record(sender: Any, template: Any, context: dict[str, Any], **extra: Any) -> None:
        seen.extend(jobs_in(context))

    with template_rendered.connected_to(record, app):
        for page in every_page(seeded):
            assert client.get(page, headers=viewer).status_code == 200, page
        viewed = list(seen)
        seen.clear()
        for key in ("failed", "retrying"):
            client.get(f"/ui/jobs/{seeded[key]}", headers=admin_user)
        client.get("/ui/?status=failed", headers=admin_user)
    ids = {j.id for j in viewed}
    assert {seeded["failed"], seeded["retrying"]} <= ids  # the jobs with errors were shown
    leaks = [(j.id, j.error, [a.error for a in j.attempts or ()]) for j in viewed
             if j.error is not None or any(a.error is not None for a in j.attempts or ())]
    assert leaks == []
    # The check can see an error where there is one: an admin's jobs carry theirs.
    assert any(j.error == MARKER for j in seen)
    assert any(a.error == MARKER for j in seen for a in j.attempts or ())


def test_error_column_for_admins_only(client: Any, seeded: dict[str, int],
                                      viewer: dict[str, str],
                                      admin_user: dict[str, str]) -> None:
    assert "<th>Error</th>" in client.get("/ui/", headers=admin_user).text
    assert "<th>Error</th>" not in client.get("/ui/", headers=viewer).text


def test_no_credentials_is_401_everywhere_even_for_posts(client: Any,
                                                          seeded: dict[str, int]) -> None:
    job = seeded["failed"]
    for path in ("/", "/ui/", f"/ui/jobs/{job}", "/ui/jump?id=1"):
        resp = client.get(path)
        assert resp.status_code == 401 and "WWW-Authenticate" in resp.headers, path
    for action in ("retry", "cancel"):  # 401 before the CSRF check, not 400
        assert client.post(f"/ui/jobs/{job}/{action}").status_code == 401
    bad = {"Authorization": "Basic dmVyYTp3cm9uZw=="}  # vera:wrong
    assert client.get("/ui/", headers=bad).status_code == 401


def test_roles(client: Any, seeded: dict[str, int], viewer: dict[str, str],
               producer: dict[str, str], worker: dict[str, str],
               admin: dict[str, str]) -> None:
    for key in (producer, worker):
        assert client.get("/ui/", headers=key).status_code == 403
    assert client.get("/ui/", headers=admin).status_code == 200  # an admin API key
    job = seeded["failed"]
    assert client.post(f"/ui/jobs/{job}/retry", headers=viewer).status_code == 403


def test_viewer_sees_no_admin_buttons(client: Any, seeded: dict[str, int],
                                      viewer: dict[str, str]) -> None:
    for job in seeded.values():
        page = client.get(f"/ui/jobs/{job}", headers=viewer).text
        assert "csrf_token" not in page and "<form method=\"post\"" not in page


def test_retry_needs_a_valid_csrf_token(client: Any, store: Store, seeded: dict[str, int],
                                        admin_user: dict[str, str]) -> None:
    job = seeded["failed"]
    url = f"/ui/jobs/{job}/retry"
    assert client.post(url, headers=admin_user).status_code == 400
    assert client.post(url, data={"csrf_token": "forged"}, headers=admin_user).status_code == 400
    assert store.get(job).status is Status.FAILED
    token = csrf_token(client, job, admin_user)
    resp = client.post(url, data={"csrf_token": token}, headers=admin_user)
    assert resp.status_code == 303 and resp.headers["Location"].endswith(f"/ui/jobs/{job}")
    assert store.get(job).status is Status.PENDING
    page = client.get(f"/ui/jobs/{job}", headers=admin_user).text
    assert f"Job #{job} is pending again" in page and "flash-ok" in page


def test_a_retry_that_leaves_the_job_blocked_says_so(client: Any, store: Store,
                                                     admin_user: dict[str, str]) -> None:
    # A job cancelled while its parent runs goes back to blocked, not pending (Workflows).
    parent = add(store)
    assert store.claim("mailer-1", lease_seconds=60).id == parent  # type: ignore[union-attr]
    job = child(store, parent)
    store.cancel(job)
    token = csrf_token(client, job, admin_user)
    resp = client.post(f"/ui/jobs/{job}/retry", data={"csrf_token": token}, headers=admin_user)
    assert resp.status_code == 303 and store.get(job).status is Status.BLOCKED
    page = client.get(f"/ui/jobs/{job}", headers=admin_user).text
    assert "pending again" not in page
    assert f"Job #{job} is blocked again" in page and "flash-ok" in page


@pytest.mark.parametrize("state,button", [("pending", "Cancel job"), ("blocked", "Cancel job"),
                                          ("running", "Cancel running job")])
def test_cancel_from_the_form(client: Any, store: Store, seeded: dict[str, int],
                              admin_user: dict[str, str], viewer: dict[str, str],
                              state: str, button: str) -> None:
    job = seeded[state]
    assert button not in client.get(f"/ui/jobs/{job}", headers=viewer).text
    assert button in client.get(f"/ui/jobs/{job}", headers=admin_user).text
    url = f"/ui/jobs/{job}/cancel"
    assert client.post(url, headers=admin_user).status_code == 400
    assert store.get(job).status is Status(state)
    token = csrf_token(client, job, admin_user)
    assert client.post(url, data={"csrf_token": token}, headers=admin_user).status_code == 303
    assert store.get(job).status is Status.CANCELLED
    page = client.get(f"/ui/jobs/{job}", headers=admin_user).text
    assert f"Job #{job} is cancelled." in page
    assert ("out-cancelled" in page) is (state == "running")  # the attempt it ended
    # Cancelling again changes nothing and says why.
    client.post(url, data={"csrf_token": token}, headers=admin_user)
    assert "was not changed" in client.get(f"/ui/jobs/{job}", headers=admin_user).text


def related(job_id: int, type_: str, status: str) -> str:
    """A parent or dependent as the job page links it: id and type, then its badge."""
    return (f'<a href="/ui/jobs/{job_id}">#{job_id} <span class="type">{type_}</span></a> '
            f'<span class="badge st-{status}">{status}</span>')


def test_the_job_page_links_parents_and_dependents(client: Any, store: Store,
                                                   viewer: dict[str, str]) -> None:
    """Both ways, each with its type and status: a workflow is found from any of its jobs."""
    done = add(store)
    run(store, "completed")
    waiting = add(store, "pdf")
    last = child(store, waiting, done, how="run", type="sync")
    after = child(store, last)
    page = client.get(f"/ui/jobs/{last}", headers=viewer).text
    flow = page[page.index('class="card workflow"'):]
    flow = flow[:flow.index("</section>")]
    assert related(waiting, "pdf", "pending") in flow and related(done, "email", "completed") in flow
    assert flow.index(f"#{waiting} ") < flow.index(f"#{done} ")  # depends_on order
    assert "waiting for 1 of 2" in flow and "on_parent_failure: run" in flow
    assert related(after, "email", "blocked") in flow
    assert related(last, "sync", "blocked") in client.get(f"/ui/jobs/{done}", headers=viewer).text
    assert related(last, "sync", "blocked") in client.get(f"/ui/jobs/{after}",
                                                          headers=viewer).text
    assert "on_parent_failure: cancel" in client.get(f"/ui/jobs/{after}", headers=viewer).text
    alone = client.get(f"/ui/jobs/{add(store)}", headers=viewer).text
    assert 'class="card workflow"' not in alone


def test_a_job_cancelled_by_its_parent_says_which(client: Any, store: Store,
                                                  admin_user: dict[str, str]) -> None:
    failing = add(store)
    by_failure = child(store, failing)
    run(store, "failed")
    stopped = add(store)
    by_cancel = child(store, stopped)
    store.cancel(stopped)
    for kid, parent, why in ((by_failure, failing, "failed"),
                             (by_cancel, stopped, "was cancelled")):
        assert store.get(kid).cancelled_by_parent == parent
        page = client.get(f"/ui/jobs/{kid}", headers=admin_user).text
        assert (f'Cancelled because job <a class="inline" href="/ui/jobs/{parent}">#{parent}'
                f'</a> {why}.') in page
        assert related(parent, "email", why.split()[-1]) in page
    assert "Cancelled because" not in client.get(f"/ui/jobs/{stopped}", headers=admin_user).text


def test_a_hundred_dependents_are_shown_then_more_is_said(client: Any, store: Store,
                                                          viewer: dict[str, str]) -> None:
    parent = add(store)
    store.enqueue_many([NewJob("billing", "email", "{}", 0, 3, depends_on=(parent,))
                        for _ in range(101)])
    page = client.get(f"/ui/jobs/{parent}", headers=viewer).text
    assert len(re.findall(r'<li><a href="/ui/jobs/\d+">', page)) == 100
    assert "Dependents: 100 shown, more exist." in page
    assert "Dependents: 100 shown" not in client.get(f"/ui/jobs/{parent + 1}",
                                                     headers=viewer).text


def test_the_job_page_shows_progress(client: Any, store: Store, seeded: dict[str, int],
                                     viewer: dict[str, str]) -> None:
    job = seeded["running"]
    assert "<h2>Progress</h2>" not in client.get(f"/ui/jobs/{job}", headers=viewer).text
    store.heartbeat(job, "mailer-1", 1, progress_json='{"percent": 40, "step": "<b>resize"}')
    page = client.get(f"/ui/jobs/{job}", headers=viewer).text
    assert "<h2>Progress</h2>" in page and 'value="40"' in page
    assert "&lt;b&gt;resize" in page and "<b>resize" not in page  # escaped


def test_cross_site_post_refused_even_with_token(client: Any, store: Store,
                                                 seeded: dict[str, int],
                                                 admin_user: dict[str, str]) -> None:
    job = seeded["failed"]
    token = csrf_token(client, job, admin_user)
    resp = client.post(f"/ui/jobs/{job}/retry", data={"csrf_token": token},
                       headers={**admin_user, "Sec-Fetch-Site": "cross-site"})
    assert resp.status_code == 403
    assert resp.mimetype == "text/html" and "Cross-site requests" in resp.text  # the page
    assert store.get(job).status is Status.FAILED


def test_security_headers_on_pages_api_and_static(client: Any, seeded: dict[str, int],
                                                  viewer: dict[str, str],
                                                  admin: dict[str, str]) -> None:
    responses = [client.get(p, headers=viewer) for p in ("/ui/", f"/ui/jobs/{seeded['failed']}",
                                                          "/ui/?status=bogus", "/ui/jobs/999999")]
    responses += [client.get("/ui/"), client.get("/jobs", headers=admin),
                  client.get("/static/ui.css")]
    for resp in responses:
        csp = resp.headers["Content-Security-Policy"]
        for part in ("default-src 'self'", "object-src 'none'", "base-uri 'none'",
                     "frame-ancestors 'none'"):
            assert part in csp
        assert "unsafe-inline" not in csp
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        assert resp.headers["Referrer-Policy"] == "same-origin"
        assert resp.headers["Cache-Control"] == "no-store"


def test_pages_have_no_inline_script_or_style(client: Any, seeded: dict[str, int],
                                              admin_user: dict[str, str]) -> None:
    for page in every_page(seeded):
        html = client.get(page, headers=admin_user).text
        assert not re.search(r"<script(?![^>]*\bsrc=)", html), page
        assert not re.search(r"\sstyle=|<style|\son[a-z]+=", html), page


@SQLITE_ONLY  # a stylesheet: no database in it
def test_every_status_has_its_badge_and_count_colours(client: Any) -> None:
    css = client.get("/static/ui.css").text
    for status in DASHBOARD_STATUSES:
        assert re.search(rf"\.st-{status}\b[^{{]*\{{ color: #\w+; background:", css), status
        assert f".count.st-{status} .dot {{ color:" in css, status


def test_static_assets_need_no_credentials(client: Any) -> None:
    for asset in ("/static/ui.css", "/static/ui.js", "/static/favicon.svg"):
        assert client.get(asset).status_code == 200


def _walk(client: Any, headers: dict[str, str], url: str, link: str) -> list[list[int]]:
    pages = []
    while url:
        html = client.get(url, headers=headers).text
        pages.append([int(i) for i in re.findall(r'<td[^>]*><a href="/ui/jobs/\d+">#(\d+)</a>', html)])
        found = re.search(rf'<a rel="{link}" href="([^"]+)"', html)
        url = found.group(1).replace("&amp;", "&") if found else ""
    return pages


def test_paging_visits_every_job_exactly_once(client: Any, store: Store,
                                              viewer: dict[str, str]) -> None:
    ids = [add(store, ("email", "pdf")[i % 2]) for i in range(2 * PAGE_SIZE + 3)]
    pages = _walk(client, viewer, "/ui/", "next")
    seen = [i for page in pages for i in page]
    assert seen == sorted(ids, reverse=True) and len(pages) == 3
    assert [len(page) for page in pages] == [PAGE_SIZE, PAGE_SIZE, 3]
    # From the last page back to the first via "newer": the same pages, reversed.
    last = pages[-1][0] + 1
    back = _walk(client, viewer, f"/ui/?before={last}", "prev")
    assert back == pages[::-1]
    # Filters stay in the links while paging.
    emails = [i for page in _walk(client, viewer, "/ui/?type=email", "next") for i in page]
    assert emails == sorted(ids[::2], reverse=True)


def test_a_cursor_past_either_end_shows_that_end_not_an_empty_page(
        client: Any, store: Store, clock: Any, viewer: dict[str, str]) -> None:
    # Paging a filtered list while its jobs leave it (retried, purged): the cursor the
    # Newer or Older link carries passes every job still listed.
    ids = sorted((add(store) for _ in range(PAGE_SIZE + 5)), reverse=True)
    html = client.get(f"/ui/?after={ids[0]}", headers=viewer).text
    assert listed(html) == ids[:PAGE_SIZE]
    assert 'rel="next"' in html and 'rel="prev"' not in html
    html = client.get(f"/ui/?before={ids[-1]}", headers=viewer).text
    assert listed(html) == ids[-PAGE_SIZE:]
    assert 'rel="prev"' in html and 'rel="next"' not in html
    html = client.get(f"/ui/?status=failed&after={ids[-1]}", headers=viewer).text
    assert listed(html) == [] and 'rel="next"' not in html and 'rel="prev"' not in html


def test_payloads_results_errors_and_names_are_escaped(client: Any, store: Store,
                                                       admin_user: dict[str, str]) -> None:
    job = add(store, payload={"body": SCRIPT}, producer='<img src=x onerror="alert(1)">')
    run(store, "failed", error=f"boom {SCRIPT}")
    # The queue shows the producer; the job page its payload too; a filter echoes its value.
    for page, escaped in (("/ui/", "&lt;img"), (f"/ui/jobs/{job}", "&lt;script&gt;"),
                          ("/ui/?type=" + quote(SCRIPT), "&lt;script&gt;")):
        html = client.get(page, headers=admin_user).text
        assert SCRIPT not in html and "<img src=x" not in html, page
        assert escaped in html, page


def test_bad_filters_are_400(client: Any, viewer: dict[str, str]) -> None:
    for query in ("status=bogus", "priority=urgent", "before=abc", "after=-1",
                  "before=99999999999999999999", "type=" + "x" * 101, "type=a%00b"):
        resp = client.get(f"/ui/?{query}", headers=viewer)
        assert resp.status_code == 400 and "Bad filter" in resp.text, query


def test_missing_job_is_a_404_page(client: Any, viewer: dict[str, str]) -> None:
    resp = client.get("/ui/jobs/424242", headers=viewer)
    assert resp.status_code == 404 and "No such job" in resp.text


def test_jump_to_a_job(client: Any, seeded: dict[str, int], viewer: dict[str, str]) -> None:
    resp = client.get(f"/ui/jump?id=%23{seeded['failed']}", headers=viewer)
    assert resp.status_code == 303
    assert resp.headers["Location"].endswith(f"/ui/jobs/{seeded['failed']}")
    resp = client.get("/ui/jump?id=abc", headers=viewer, follow_redirects=True)
    assert "must be a job id" in resp.text


def test_counts_show_every_status_and_stop_at_the_cap(client: Any, store: Store,
                                                      seeded: dict[str, int],
                                                      viewer: dict[str, str]) -> None:
    counts = store.count_by_status(100)
    assert counts == {"blocked": 1, "pending": 3, "scheduled": 1, "running": 1,
                      "completed": 1, "failed": 1, "cancelled": 1}
    assert store.count_by_status(2)["pending"] == 3  # cap + 1 means "more than cap"
    client.application.config["COUNT_CAP"] = 2
    html = client.get("/ui/", headers=viewer).text
    assert re.search(r"pending</span>\s*<strong>2\+</strong>", html)
    assert re.search(r"scheduled</span>\s*<strong>1</strong>", html)
    assert re.search(r'st-blocked"\s*href="/ui/\?status=blocked">\s*<span class="dot" '
                     r'aria-hidden="true"></span><span class="label">blocked</span>\s*'
                     r'<strong>1</strong>', html)
    listed_blocked = client.get("/ui/?status=blocked", headers=viewer).text
    assert '<option value="blocked" selected>' in listed_blocked
    assert re.findall(r'<td[^>]*><a href="/ui/jobs/(\d+)">', listed_blocked) == [
        str(seeded["blocked"])]
    assert '<span class="badge st-blocked">blocked</span>' in listed_blocked


def test_the_jobs_page_names_its_parts_for_screen_readers_and_keyboards(
        client: Any, seeded: dict[str, int], viewer: dict[str, str]) -> None:
    """One heading, a named table, the active filter marked, one Tab stop per job."""
    html = client.get("/ui/?status=scheduled", headers=viewer).text
    assert re.search(r'<h1 class="sr-only">Scheduled jobs</h1>', html)
    assert '<caption class="sr-only">Jobs, newest first</caption>' in html
    current = re.findall(r'<a class="count st-(\w+)[^"]*" aria-current="page"', html)
    assert current == ["scheduled"]
    assert re.search(r"scheduled</span>\s*<strong>1</strong><span class=\"of\"> of pending",
                     html)
    # the scheduled mark sits in the status cell, which phones still show
    assert re.search(r'badge st-pending[^<]*</span> <span class="tag st-scheduled">', html)
    row_links = re.findall(r'<td[^>]*><a href="/ui/jobs/\d+"( tabindex="-1")?>', html)
    assert row_links == ["", ' tabindex="-1"']  # the id is a stop, the type is not
    bad = client.get("/ui/jump?id=abc", headers=viewer, follow_redirects=True).text
    assert re.search(r'class="flash flash-error" role="alert"', bad)


def test_scheduled_filter_lists_future_pending_jobs(client: Any, store: Store, clock: Any,
                                                    seeded: dict[str, int],
                                                    viewer: dict[str, str]) -> None:
    html = client.get("/ui/?status=scheduled", headers=viewer).text
    assert re.findall(r'<td[^>]*><a href="/ui/jobs/\d+">#(\d+)</a>', html) == [str(seeded["scheduled"])]
    clock.advance(3601)  # now due: no longer scheduled
    assert "No jobs match" in client.get("/ui/?status=scheduled", headers=viewer).text


def test_chart_counts_attempts_per_minute_over_the_last_hour(store: Store, clock: Any) -> None:
    add(store)
    run(store, "completed")        # 70 minutes before the end: outside the window
    clock.advance(70 * 60)
    for outcome in ("completed", "completed", "failed"):
        add(store)
        run(store, outcome)
    clock.advance(125)             # two minutes later, one more completion
    add(store)
    run(store, "completed")
    series = store.outcomes_per_minute(60)
    assert len(series.completed) == len(series.failed) == 60
    assert sum(series.completed) == 3 and sum(series.failed) == 1
    assert series.completed[-1] == 1 and series.completed[-3] == 2 and series.failed[-3] == 1
    assert series.start + 60 * series.bucket > clock() >= series.start + 59 * series.bucket


def test_chart_svg_scales_to_the_busiest_minute(store: Store) -> None:
    series = store.outcomes_per_minute(60)
    series.completed[10], series.failed[10], series.completed[59] = 6, 1, 2
    chart = minute_chart(series)
    assert (chart.completed, chart.failed, len(chart.bars)) == (8, 1, 60)
    tallest = chart.bars[10]
    assert tallest.failed_y == pytest.approx(8 + (150 - 8 - 20) * (1 - 7 / 10))
    assert "6 completed, 1 failed" in tallest.title
    narrow = minute_chart(series, 400, 190)  # the phone's: the same hour in a narrower box
    assert (narrow.width, len(narrow.bars), narrow.x_ticks[-1].x) == (400, 60, 400)
    assert narrow.bars[-1].x + narrow.bars[-1].width <= 400 < chart.bars[-1].x
    assert [nice_ceiling(v) for v in (0, 1, 3, 7, 11, 5000)] == [1, 1, 5, 10, 20, 5000]


def test_chart_on_the_page(client: Any, seeded: dict[str, int], viewer: dict[str, str]) -> None:
    html = client.get("/ui/", headers=viewer).text
    # the whole hour twice: the wide chart, and the phone's (the stylesheet shows one)
    wide, narrow = html.split('<svg class="chart ')[1:]
    assert wide.startswith("wide") and narrow.startswith("narrow")
    assert wide.count('<rect class="hit"') == narrow.split("</svg>")[0].count('<rect class="hit"') == 60
    assert '<rect class="completed"' in html and '<rect class="failed"' in html
    assert "1 completed, 2 failed" in html  # the seeded minute, in the bar's title


# -- signing in: the password cache and the first admin ------------------------------

def test_password_check_is_cached_briefly_then_a_removed_user_is_refused(
        client: Any, store: Store, viewer: dict[str, str]) -> None:
    from sqlalchemy import delete

    from queuelog.server.store.tables import users
    now = password_clock(client.application)
    checks = hash_checks(client.application)
    for _ in range(3):
        assert client.get("/ui/", headers=viewer).status_code == 200
    assert len(checks) == 1  # one slow hash check for a page and the next views
    cache = client.application.extensions["queuelog.password_cache"]
    assert len(cache) == 1 and all(b"correct horse" not in k and len(k) == 32 for k in cache)
    with store.engine.begin() as conn:
        conn.execute(delete(users).where(users.c.username == "vera"))
    now[0] += client.application.config["AUTH_CACHE_SECONDS"] + 0.01
    assert client.get("/ui/", headers=viewer).status_code == 401


def test_first_admin_is_created_once_when_started_concurrently(
        app: Any, store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    import threading

    from queuelog.server import bootstrap_admin
    app.config["BOOTSTRAP_ADMIN"] = True  # the test config turns it off for other tests
    barrier = threading.Barrier(4)
    passwords: list[str | None] = []

    def start() -> None:
        barrier.wait()
        passwords.append(bootstrap_admin(app))
    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    created = [p for p in passwords if p]
    assert len(created) == 1 and len(passwords) == 4
    assert capsys.readouterr().err.count("created user 'admin'") == 1
    raw = base64.b64encode(f"admin:{created[0]}".encode()).decode()
    page = app.test_client().get("/ui/", headers={"Authorization": f"Basic {raw}"})
    assert page.status_code == 200 and '<span class="role">admin</span>' in page.text
    assert bootstrap_admin(app) is None  # a later start creates no one


def form_token(client: Any, path: str, headers: dict[str, str]) -> str:
    """The hidden csrf_token of the first form on a page."""
    match = re.search(r'name="csrf_token" value="([^"]+)"', client.get(path, headers=headers).text)
    assert match, f"no CSRF token on {path}"
    return match.group(1)


def test_types_page(client: Any, store: Store, seeded: dict[str, int], viewer: dict[str, str],
                    admin_user: dict[str, str]) -> None:
    page = client.get("/ui/types", headers=viewer)
    assert page.status_code == 200
    for name in ("email", "pdf", "sync"):
        assert f'href="/ui/?type={name}"' in page.text
    assert "<form" not in page.text and MARKER not in page.text
    page = client.get("/ui/types", headers=admin_user).text
    assert "Pause email" in page and "Resume" not in page
    assert "<th class=\"num\">Blocked</th>" in page
    assert 'href="/ui/?type=email&amp;status=blocked">1</a>' in page  # seeded["blocked"]


def test_pause_and_resume_from_the_types_page(client: Any, store: Store,
                                              admin_user: dict[str, str],
                                              viewer: dict[str, str]) -> None:
    url = "/ui/types/email/pause"
    assert client.post(url, headers=admin_user).status_code == 400  # no CSRF token
    token = form_token(client, "/ui/types", admin_user)
    assert client.post(url, data={"csrf_token": token}, headers=viewer).status_code == 403
    assert client.post(url, data={"csrf_token": token},
                       headers={**admin_user, "Sec-Fetch-Site": "cross-site"}).status_code == 403
    assert store.paused() == {}
    resp = client.post(url, data={"csrf_token": token}, headers=admin_user)
    assert resp.status_code == 303 and resp.headers["Location"].endswith("/ui/types")
    assert "email" in store.paused()
    page = client.get("/ui/types", headers=admin_user).text
    assert "Type email is paused" in page and "Resume email" in page
    assert client.post("/ui/types/fax/pause", data={"csrf_token": token},
                       headers=admin_user).status_code == 404
    client.post("/ui/types/email/resume", data={"csrf_token": token}, headers=admin_user)
    assert store.paused() == {}


def test_audit_page_is_for_admins_and_pages(client: Any, store: Store, viewer: dict[str, str],
                                            admin_user: dict[str, str]) -> None:
    assert client.get("/ui/audit", headers=viewer).status_code == 403
    assert 'href="/ui/audit"' not in client.get("/ui/", headers=viewer).text
    for i in range(PAGE_SIZE + 5):
        store.set_paused("pdf", i % 2 == 0, f"op-{i}")
    page = client.get("/ui/audit", headers=admin_user)
    assert page.status_code == 200 and f"op-{PAGE_SIZE + 4}" in page.text
    assert "op-0<" not in page.text  # the oldest is on the next page
    older = re.search(r'href="/ui/audit\?before=(\d+)"', page.text)
    assert older
    page = client.get(f"/ui/audit?before={older.group(1)}", headers=admin_user).text
    assert "op-0<" in page and f"op-{PAGE_SIZE + 4}<" not in page
    assert client.get("/ui/audit?before=x", headers=admin_user).status_code == 400


def test_retry_all_through_a_confirmation_page(client: Any, store: Store, clock: Any,
                                               admin_user: dict[str, str],
                                               viewer: dict[str, str]) -> None:
    failed_ids = []
    for _ in range(3):
        add(store, "pdf")
        failed_ids.append(run(store, "failed"))
    other = add(store, "email")
    run(store, "failed")
    listing = client.get("/ui/?status=failed&type=pdf", headers=admin_user).text
    assert "Retry all 3" in listing
    assert "Retry all" not in client.get("/ui/?status=failed&type=pdf", headers=viewer).text
    assert "/ui/bulk/" not in client.get("/ui/?status=completed", headers=admin_user).text
    assert "/ui/bulk/" not in client.get("/ui/?type=pdf", headers=admin_user).text
    confirm = client.get("/ui/bulk/retry?status=failed&type=pdf", headers=admin_user)
    assert confirm.status_code == 200 and "Retry 3 jobs?" in confirm.text
    assert store.get(failed_ids[0]).status is Status.FAILED  # looking changes nothing
    assert client.get("/ui/bulk/retry?status=failed", headers=viewer).status_code == 403
    assert client.get("/ui/bulk/retry?status=pending", headers=admin_user).status_code == 400
    form = {"status": "failed", "type": "pdf"}
    assert client.post("/ui/bulk/retry", data=form, headers=admin_user).status_code == 400
    token = form_token(client, "/ui/bulk/retry?status=failed&type=pdf", admin_user)
    assert client.post("/ui/bulk/retry", data={**form, "csrf_token": token},
                       headers=viewer).status_code == 403
    assert all(store.get(i).status is Status.FAILED for i in failed_ids)
    resp = client.post("/ui/bulk/retry", data={**form, "csrf_token": token}, headers=admin_user)
    assert resp.status_code == 303 and "status=failed" in resp.headers["Location"]
    assert all(store.get(i).status is Status.PENDING for i in failed_ids)
    assert store.get(other).status is Status.FAILED
    assert "3 job(s) are pending again" in client.get(resp.headers["Location"],
                                                      headers=admin_user).text


def test_the_confirmation_of_one_job_says_job_in_its_title_too(
        client: Any, store: Store, admin_user: dict[str, str]) -> None:
    add(store, "pdf")
    run(store, "failed")
    page = client.get("/ui/bulk/retry?status=failed", headers=admin_user).text
    assert "<title>Retry 1 job? · queuelog</title>" in page and "<h1>Retry 1 job?</h1>" in page


def test_cancel_all_pending_then_all_blocked(client: Any, store: Store,
                                            admin_user: dict[str, str]) -> None:
    held = add(store)
    run(store, "running")
    pending = [add(store, priority=10) for _ in range(2)] + [add(store)]
    blocked = [child(store, held) for _ in range(2)]  # the running job's: no cascade here
    assert "Cancel all 2" in client.get("/ui/?status=pending&priority=medium",
                                        headers=admin_user).text
    confirm = client.get("/ui/bulk/cancel?status=pending&priority=medium", headers=admin_user)
    assert "Cancel 2 jobs?" in confirm.text
    token = form_token(client, "/ui/bulk/cancel?status=pending&priority=medium", admin_user)
    client.post("/ui/bulk/cancel", data={"status": "pending", "priority": "medium",
                                         "csrf_token": token}, headers=admin_user)
    assert [store.get(i).status.value for i in pending] == ["cancelled"] * 2 + ["pending"]
    # A list of pending jobs cancels only those: the blocked ones were not on it.
    assert {store.get(i).status for i in blocked} == {Status.BLOCKED}
    assert "Cancel all 2" in client.get("/ui/?status=blocked", headers=admin_user).text
    confirm = client.get("/ui/bulk/cancel?status=blocked", headers=admin_user).text
    assert "Cancel 2 jobs?" in confirm and "Every <strong>blocked</strong> job:" in confirm
    resp = client.post("/ui/bulk/cancel", data={"status": "blocked", "csrf_token": token},
                       headers=admin_user)
    assert "2 blocked job(s) are cancelled." in client.get(resp.headers["Location"],
                                                           headers=admin_user).text
    assert {store.get(i).status for i in blocked} == {Status.CANCELLED}
    assert store.get(pending[2]).status is Status.PENDING
    assert store.get(held).status is Status.RUNNING


def test_a_running_job_whose_lease_ran_out_is_marked(client: Any, store: Store, clock: Any,
                                                     viewer: dict[str, str]) -> None:
    job_id = add(store)
    run(store, "running")  # a 60 s lease
    assert "lease expired" not in client.get("/ui/", headers=viewer).text
    assert "lease expired" not in client.get(f"/ui/jobs/{job_id}", headers=viewer).text
    clock.advance(61)
    assert "lease expired" in client.get("/ui/", headers=viewer).text
    assert "lease expired" in client.get(f"/ui/jobs/{job_id}", headers=viewer).text


def test_a_retried_pending_job_is_not_shown_as_held(client: Any, store: Store,
                                                    admin_user: dict[str, str]) -> None:
    job_id = add(store)
    run(store, "failed")
    store.retry(job_id)
    page = client.get(f"/ui/jobs/{job_id}", headers=admin_user).text
    assert "Last worker" in page and "(not held now)" in page and "Last claimed" in page
    assert "<dt>Worker</dt>" not in page
    listing = client.get("/ui/", headers=admin_user).text
    row = re.search(rf'<tr>\s*<td[^>]*><a href="/ui/jobs/{job_id}">.*?</tr>', listing, re.S)
    assert row and "mailer-1" not in row.group(0)
    run(store, "running")  # claimed again: now it is held
    assert "<dt>Worker</dt><dd>mailer-1</dd>" in client.get(f"/ui/jobs/{job_id}",
                                                            headers=admin_user).text


def test_attempts_show_their_duration(client: Any, store: Store, clock: Any,
                                      viewer: dict[str, str]) -> None:
    job_id = add(store)
    job = store.claim("mailer-1", lease_seconds=600)
    assert job is not None
    clock.advance(12.5)
    assert "12.5 s so far" in client.get(f"/ui/jobs/{job_id}", headers=viewer).text
    store.fail(job_id, "mailer-1", job.attempt, "x", retry_in=0)
    job = store.claim("mailer-1", lease_seconds=600)
    assert job is not None
    clock.advance(185)
    store.complete(job_id, "mailer-1", job.attempt)
    page = client.get(f"/ui/jobs/{job_id}", headers=viewer).text
    assert ">12.5 s<" in page and ">3 min 05 s<" in page


@pytest.mark.parametrize("us, text", [(0, "0 ms"), (850_000, "850 ms"), (1_000_000, "1.0 s"),
                                      (59_940_000, "59.9 s"), (61_000_000, "1 min 01 s"),
                                      (7_380_000_000, "2 h 03 min")])
def test_duration_format(us: int, text: str) -> None:
    assert helpers.duration(us) == text


# -- search, filters, refusals as pages ------------------------------------------------------
def listed(html: str) -> list[int]:
    """The job ids in the jobs table of a /ui/ page, in order."""
    return [int(i) for i in re.findall(r'<td[^>]*><a href="/ui/jobs/(\d+)">#', html)]


def test_search_finds_a_job_by_id(client: Any, seeded: dict[str, int],
                                  viewer: dict[str, str]) -> None:
    for q in (str(seeded["failed"]), f"%23{seeded['failed']}", f"+{seeded['failed']}+"):
        assert listed(client.get(f"/ui/?q={q}", headers=viewer).text) == [seeded["failed"]], q
    assert listed(client.get("/ui/?q=424242", headers=viewer).text) == []
    # a number past BIGINT finds nothing rather than failing in the database
    assert client.get("/ui/?q=" + "9" * 30, headers=viewer).status_code == 200


@pytest.mark.parametrize("q", ["%C2%B2", "%E2%91%A0", "%23%C2%B9"])  # ², ①, #¹
def test_a_search_of_digits_int_refuses_finds_nothing(client: Any, seeded: dict[str, int],
                                                       viewer: dict[str, str],
                                                       admin_user: dict[str, str], q: str) -> None:
    # str.isdigit() holds for superscripts and circled digits, which int() refuses.
    for who in (viewer, admin_user):
        page = client.get(f"/ui/?q={q}", headers=who)
        assert page.status_code == 200 and listed(page.text) == []


def test_search_by_idempotency_key_is_for_admins(client: Any, store: Store,
                                                 viewer: dict[str, str],
                                                 admin_user: dict[str, str]) -> None:
    """Admins find any producer's key; a viewer, who sees no keys, finds nothing by one."""
    billing = add(store, producer="billing", key="welcome-ada")
    reports = add(store, producer="reports", key="welcome-ada")
    add(store, producer="billing", key="welcome-bob")
    numeric = add(store, producer="reports", key=str(billing))  # a key that reads like the id
    assert listed(client.get("/ui/?q=welcome-ada", headers=admin_user).text) == [reports,
                                                                                 billing]
    assert listed(client.get(f"/ui/?q={billing}", headers=admin_user).text) == [numeric,
                                                                                billing]
    page = client.get("/ui/?q=welcome-ada", headers=viewer).text
    assert listed(page) == [] and "by id only" in page
    assert listed(client.get(f"/ui/?q={billing}", headers=viewer).text) == [billing]


def test_filters_by_producer_and_worker(client: Any, store: Store, seeded: dict[str, int],
                                        viewer: dict[str, str]) -> None:
    other = add(store, producer="reports")
    assert listed(client.get("/ui/?producer=reports", headers=viewer).text) == [other]
    held = {seeded["completed"], seeded["failed"], seeded["retrying"], seeded["running"]}
    page = client.get("/ui/?worker=mailer-1", headers=viewer).text
    assert set(listed(page)) == held
    page = client.get("/ui/?worker=mailer-1&type=sync", headers=viewer).text
    assert listed(page) == [seeded["running"]]
    assert 'value="mailer-1"' in page  # the form shows the filter in force
    assert listed(client.get("/ui/?worker=nobody", headers=viewer).text) == []


def test_pager_links_keep_the_producer_filter(client: Any, store: Store,
                                              viewer: dict[str, str]) -> None:
    ids = [add(store, producer="reports") for _ in range(PAGE_SIZE + 2)]
    add(store, producer="billing")
    page = client.get("/ui/?producer=reports", headers=viewer).text
    older = re.search(r'href="(/ui/\?before=\d+[^"]*)"', page)
    assert older and "producer=reports" in older.group(1)
    rest = client.get(older.group(1).replace("&amp;", "&"), headers=viewer).text
    assert sorted(listed(page) + listed(rest)) == ids


def test_unknown_query_parameters_are_a_400_page(client: Any, store: Store,
                                                 viewer: dict[str, str],
                                                 admin_user: dict[str, str]) -> None:
    """A mistyped filter is refused, not ignored; nothing changes."""
    job = add(store)
    for url, who in (("/ui/?stauts=failed", viewer), ("/ui/?status=failed&page=2", viewer),
                     ("/ui/audit?after=3", admin_user),
                     ("/ui/bulk/cancel?status=pending&typ=email", admin_user)):
        resp = client.get(url, headers=who)
        assert resp.status_code == 400, url
        assert resp.mimetype == "text/html" and "Unknown parameter" in resp.text, url
    token = csrf_token(client, job, admin_user)
    resp = client.post("/ui/bulk/cancel", data={"csrf_token": token, "status": "pending",
                                                "producer": "billing"}, headers=admin_user)
    assert resp.status_code == 400 and "status, type and priority only" in resp.text
    assert store.get(job).status is Status.PENDING


def test_no_bulk_offer_for_a_list_narrowed_by_producer_worker_or_search(
        client: Any, store: Store, admin_user: dict[str, str]) -> None:
    add(store, producer="reports")
    add(store, producer="billing")
    assert "Cancel all 2" in client.get("/ui/?status=pending", headers=admin_user).text
    for narrowed in ("producer=reports", "worker=mailer-1", "q=1"):
        page = client.get(f"/ui/?status=pending&{narrowed}", headers=admin_user).text
        assert "Cancel all" not in page, narrowed


def test_a_viewers_403_is_the_html_error_page(client: Any, viewer: dict[str, str]) -> None:
    for url in ("/ui/audit", "/ui/bulk/retry?status=failed", "/ui/bulk/cancel?status=pending"):
        resp = client.get(url, headers=viewer)
        assert resp.status_code == 403 and resp.mimetype == "text/html", url
        assert "<h1>Forbidden</h1>" in resp.text and "admins only" in resp.text, url
        assert resp.headers["Content-Security-Policy"].startswith("default-src 'self'")
    api = client.get("/audit", headers=viewer)  # the JSON API keeps its problem+json
    assert api.status_code == 403 and api.mimetype == "application/problem+json"
    assert api.json["detail"] == "Your role may not do this."


def test_a_viewer_is_told_where_error_text_is_hidden(client: Any, seeded: dict[str, int],
                                                     viewer: dict[str, str],
                                                     admin_user: dict[str, str]) -> None:
    for name in ("failed", "retrying"):
        page = client.get(f"/ui/jobs/{seeded[name]}", headers=viewer).text
        assert "hidden: admins only" in page and MARKER not in page, name
    assert "hidden: admins only" not in client.get(f"/ui/jobs/{seeded['completed']}",
                                                   headers=viewer).text
    admin_page = client.get(f"/ui/jobs/{seeded['failed']}", headers=admin_user).text
    assert MARKER in admin_page and "hidden: admins only" not in admin_page


def test_audit_shows_priorities_by_label(client: Any, store: Store,
                                         admin_user: dict[str, str]) -> None:
    store.accounts.create_key("billing-key", "producer", max_priority=20, actor="ada")
    store.accounts.create_key("mail-key", "producer", max_priority=10, actor="ada")
    page = client.get("/ui/audit", headers=admin_user).text
    assert "max_priority: <code>high</code>" in page
    assert "max_priority: <code>medium</code>" in page
    assert "max_priority: <code>20</code>" not in page and "max_priority: <code>10" not in page


def test_times_are_relative_with_the_exact_utc_time_on_hover(client: Any, store: Store,
                                                             clock: Any,
                                                             viewer: dict[str, str]) -> None:
    job = add(store)
    clock.advance(180)
    page = client.get("/ui/", headers=viewer).text
    created = store.get(job).created_at
    exact = helpers._ts(created)
    assert (f'<time datetime="{helpers.isoformat(created)}" title="{exact} UTC">3 min ago'
            '</time>') in page


@pytest.mark.parametrize("seconds,text", [(0, "just now"), (9, "just now"), (42, "42 s ago"),
                                          (185, "3 min ago"), (7300, "2 h ago"),
                                          (90000, "1 day ago"), (3 * 86400, "3 days ago"),
                                          (-1800, "in 30 min")])
def test_relative_time_format(seconds: int, text: str) -> None:
    now = 1_800_000_000_000_000
    assert helpers.relative(now - seconds * 1_000_000, now) == text


def test_auto_refresh_on_every_page_but_confirmations(client: Any, store: Store,
                                                      seeded: dict[str, int],
                                                      admin_user: dict[str, str]) -> None:
    for url in ("/ui/", f"/ui/jobs/{seeded['running']}", "/ui/types", "/ui/audit",
                "/ui/schedules", "/ui/workers"):
        # once: the header's box (an id twice is invalid, and the script finds the first)
        assert client.get(url, headers=admin_user).text.count('id="autorefresh"') == 1, url
    page = client.get("/ui/bulk/retry?status=failed", headers=admin_user).text
    assert 'id="autorefresh"' not in page


def test_sign_out_answers_401_and_shows_how_to_sign_in(client: Any,
                                                       viewer: dict[str, str]) -> None:
    assert 'href="/ui/signout"' in client.get("/ui/", headers=viewer).text
    for headers in (viewer, {}):
        resp = client.get("/ui/signout", headers=headers)
        assert resp.status_code == 401 and resp.mimetype == "text/html"
        assert resp.headers["WWW-Authenticate"] == 'Basic realm="queuelog"'
        assert "Signed out" in resp.text and "vera" not in resp.text


def test_header_lists_the_registered_pages(client: Any, viewer: dict[str, str],
                                           admin_user: dict[str, str]) -> None:
    nav = re.compile(r'<nav class="pages".*?</nav>', re.S)
    viewer_nav = nav.search(client.get("/ui/", headers=viewer).text)
    admin_nav = nav.search(client.get("/ui/", headers=admin_user).text)
    assert viewer_nav and admin_nav
    assert re.findall(r">(\w+)</a>", viewer_nav.group(0))[:2] == ["Jobs", "Types"]
    assert "Audit" not in viewer_nav.group(0) and "Audit</a>" in admin_nav.group(0)


def test_a_request_without_cookies_builds_no_session_signer(client: Any, producer: Any,
                                                            monkeypatch: Any) -> None:
    """Flask would build the cookie signer for every API call; one is built only when a
    cookie comes (the dashboard's session, the CSRF secret's, reads it)."""
    from flask.sessions import SecureCookieSessionInterface
    built: list[int] = []
    real = SecureCookieSessionInterface.get_signing_serializer

    def counted(self: Any, app: Any) -> Any:
        built.append(1)
        return real(self, app)
    monkeypatch.setattr(SecureCookieSessionInterface, "get_signing_serializer", counted)
    assert client.post("/jobs", json={"type": "email"}, headers=producer).status_code == 201
    assert built == []
    client.set_cookie("session", "not-signed")
    assert client.post("/jobs", json={"type": "email"}, headers=producer).status_code == 201
    assert built  # a cookie came: read (and refused) by Flask's signer


def test_run_now_from_the_job_page(client: Any, store: Store, clock: Any,
                                   admin_user: dict[str, str], viewer: dict[str, str]) -> None:
    job = add(store, delay=3600)
    assert "Run now" not in client.get(f"/ui/jobs/{job}", headers=viewer).text
    url = f"/ui/jobs/{job}/run"
    assert client.post(url, headers=viewer).status_code == 403
    assert client.post(url, headers=admin_user).status_code == 400  # no CSRF token
    assert store.get(job).run_at > clock()
    page = client.get(f"/ui/jobs/{job}", headers=admin_user).text
    assert f'action="/ui/jobs/{job}/run"' in page and "Run now" in page
    resp = client.post(url, data={"csrf_token": csrf_token(client, job, admin_user)},
                       headers=admin_user)
    assert resp.status_code == 303 and resp.headers["Location"].endswith(f"/ui/jobs/{job}")
    assert store.get(job).run_at == clock()
    page = client.get(f"/ui/jobs/{job}", headers=admin_user).text
    assert f"Job #{job} is due now" in page and f'action="/ui/jobs/{job}/run"' not in page


def test_types_page_shows_run_and_wait_percentiles_of_the_last_hour(
        client: Any, store: Store, clock: Any, viewer: dict[str, str]) -> None:
    for seconds in (1, 2, 3, 4, 300):  # p50 is the 3rd of 5, p95 the 5th
        job_id = add(store, "pdf", delay=0.5)
        clock.advance(0.5 + seconds / 100)  # due for seconds x 10 ms before its claim
        job = store.claim("w1", types=["pdf"])
        assert job is not None and job.id == job_id
        clock.advance(seconds)
        store.complete(job.id, "w1", job.attempt)
    page = client.get("/ui/types", headers=viewer).text
    row = page[page.index('href="/ui/?type=pdf"'):]
    row = row[:row.index("</tr>")]
    assert "3.0 s / 5.0 min" in row and "30 ms / 3.0 s" in row
    other = page[page.index('href="/ui/?type=sync"'):]
    assert "3.0 s" not in other[:other.index("</tr>")]  # a type with nothing measured
    clock.advance(3600 + 400)
    assert "5.0 min" not in client.get("/ui/types", headers=viewer).text  # the last hour only


def test_brief_durations_fit_a_narrow_column() -> None:
    assert [helpers.brief(us) for us in (None, 850, 4_000, 1_230_000, 12_400_000, 246_000_000,
                                         8_280_000_000)] == [
        "—", "1 ms", "4 ms", "1.2 s", "12 s", "4.1 min", "2.3 h"]


@pytest.mark.parametrize("url,status", [("/ui/audit", 403), ("/ui/?bogus=1", 400),
                                        ("/ui/jobs/999999", 404)])
def test_error_pages_keep_the_header_navigation(client: Any, viewer: dict[str, str],
                                                url: str, status: int) -> None:
    page = client.get(url, headers=viewer)
    assert page.status_code == status
    assert 'class="pages"' in page.text and 'href="/ui/types"' in page.text
    assert "vera" in page.text and "Sign out" in page.text


def test_the_job_page_says_what_is_true_of_a_finished_job(client: Any, store: Store,
                                                          clock: Any,
                                                          admin_user: dict[str, str]) -> None:
    """A cancelled delayed job will not run "in 6 min"; retries count since an admin's."""
    delayed = add(store, delay=360)
    store.cancel(delayed)
    page = client.get(f"/ui/jobs/{delayed}", headers=admin_user).text
    assert "(it will not run: cancelled)" in page and "in 6 min" not in page
    job = add(store, max_retries=0)
    for _ in range(3):  # fails for good, an admin retries it, three times over
        held = store.claim("mailer-1", lease_seconds=60)
        store.fail(held.id, "mailer-1", held.attempt, "boom", retry=False)
        store.retry(job)
    store.claim("mailer-1", lease_seconds=60)
    page = client.get(f"/ui/jobs/{job}", headers=admin_user).text
    assert "0 of 0 <span class=\"muted\">since an admin's retry (4 attempts in all)" in page
