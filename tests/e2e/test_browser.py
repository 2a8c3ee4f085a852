"""The dashboard in a real browser: Debian's Chromium driven by Playwright, live server.

Run alone with ``pytest -m browser``. Set ``QUEUELOG_DOCS_SCREENSHOT=docs/dashboard.png``
to refresh the README's screenshot from the same run.
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import math
import os
import pathlib
import re
import shutil
import tarfile
import threading
import urllib.request
from typing import Any, Iterator

import pytest
from werkzeug.security import generate_password_hash
from werkzeug.serving import make_server

from queuelog import create_app
from queuelog.model.jobs import Status
from queuelog.server.store import NewJob, Store

CHROMIUM = "/usr/bin/chromium"
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                 reason=f"needs Debian's chromium at {CHROMIUM} "
                                        "(apt-get install -y chromium; CI installs it)")]

MARKER = "ERRMARK-browser"
PASSWORD = "correct horse battery"
VIEWER = {"username": "vera", "password": PASSWORD}
ADMIN = {"username": "ada", "password": PASSWORD}
TYPES = ("email", "pdf", "sync")
ERRORS = ("SMTP 550: mailbox unavailable", "render timeout after 30 s",
          "upstream returned HTTP 503")


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    """Launch the system Chromium; never a downloaded one (no ``playwright install``)."""
    return {**browser_type_launch_args, "executable_path": CHROMIUM,
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                     "--no-first-run", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync"]}


class SteppedClock:
    """The store's clock: seeding walks it through the last hour; then it stands still."""

    def __init__(self, start: int) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now


@dataclasses.dataclass
class Live:
    """A running dashboard: its base URL, store and some job ids by state."""

    base: str
    store: Store
    ids: dict[str, list[int]]


def seed(store: Store, clock: SteppedClock) -> dict[str, list[int]]:
    """An hour of traffic (a few jobs a minute, some failing), then work in every state."""
    ids: dict[str, list[int]] = {s.value: [] for s in Status}
    n = 0

    def enqueue(delay: float | None = None) -> int:
        nonlocal n
        n += 1
        job, _ = store.enqueue(NewJob(
            "billing" if n % 3 else "reports", TYPES[n % 3],
            json.dumps({"to": f"user{n}@example.com", "template": "welcome",
                        "note": "<script>alert(1)</script>"}), (n % 4) * 10, 3,
            delay_seconds=delay))
        return job.id

    for minute in range(60):
        per_minute = 3 + round(3 * math.sin(minute / 7) + 2 * math.sin(minute / 3) ** 2)
        for i in range(per_minute):
            enqueue()
            job = store.claim(f"worker-{i % 4}", lease_seconds=300)
            assert job is not None
            if (minute * 7 + i) % 11 == 0:
                store.fail(job.id, job.worker_id or "", job.attempt,
                           f"{MARKER} {ERRORS[i % 3]} <script>x</script>", retry=False)
                ids["failed"].append(job.id)
            else:
                store.complete(job.id, job.worker_id or "", job.attempt,
                               json.dumps({"ok": True}))
                ids["completed"].append(job.id)
            clock.now += 60_000_000 // per_minute
    for i in range(3):
        job_id = enqueue()
        store.claim(f"worker-{i}", lease_seconds=600)
        ids["running"].append(job_id)
    for _ in range(2):
        job_id = enqueue()
        store.cancel(job_id)
        ids["cancelled"].append(job_id)
    ids["pending"] = [enqueue(delay=1800) for _ in range(2)] + [enqueue() for _ in range(6)]
    # A workflow: a job waiting for a completed and a running parent, and three of its
    # own dependents (five links: more than a phone's line); its page is in every walk.
    waits, _ = store.enqueue(NewJob("reports", "pdf", "{}", 0, 3, depends_on=(
        ids["completed"][-1], ids["running"][0]), on_parent_failure="run"))
    ids["blocked"] = [waits.id] + [store.enqueue(NewJob(
        "reports", t, "{}", 0, 3, depends_on=(waits.id,)))[0].id for t in TYPES]
    return ids


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A seeded SQLite dashboard served by werkzeug on a free port, in a thread."""
    folder = tmp_path_factory.mktemp("live")
    app = create_app({"DATABASE_URL": f"sqlite:///{folder}/queuelog.sqlite3",
                      "SECRET_KEY": "browser-test", "BOOTSTRAP_ADMIN": False,
                      "SQLITE_SYNCHRONOUS": "OFF", "AUTH_CACHE_SECONDS": 60,
                      # a row in the schedules table, whose columns the page walk checks
                      "SCHEDULES": {"nightly-report": {"cron": "0 3 * * *", "type": "pdf",
                                                       "timezone": "Europe/Berlin"}}})
    store: Store = app.extensions["queuelog.store"]
    clock = SteppedClock(store.clock() - 3600 * 1_000_000)
    store.clock = clock
    ids = seed(store, clock)
    for user, role in ((VIEWER, "viewer"), (ADMIN, "admin")):
        # A cheap hash keeps the test fast; the app's own hash is deliberately slow.
        store.accounts.create_user(user["username"], generate_password_hash(
            user["password"], "pbkdf2:sha256:1"), role)
    # Audit events with long details, so the audit page is seen with a full table.
    for n in range(3):
        store.accounts.create_key(f"billing-key-{n}", "producer", types=list(TYPES),
                                  max_priority=20, actor=ADMIN["username"])
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Live(f"http://127.0.0.1:{server.server_port}", store, ids)
    finally:
        server.shutdown()
        thread.join(timeout=10)
        store.close()


@pytest.fixture
def problems() -> list[str]:
    """Console errors, page errors and CSP violations seen by the test's pages."""
    return []


@pytest.fixture
def open_as(browser: Any, problems: list[str]) -> Iterator[Any]:
    """Open a signed-in browser page for a user; every console error is recorded."""
    contexts = []

    def open_page(user: dict[str, str]) -> Any:
        context = browser.new_context(http_credentials=user,
                                      viewport={"width": 1280, "height": 900})
        # Report CSP violations explicitly, in case Chromium's console wording changes.
        context.add_init_script("document.addEventListener('securitypolicyviolation', e => "
                                "console.error('CSP violation: ' + e.violatedDirective));")
        contexts.append(context)
        page = context.new_page()
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        return page
    yield open_page
    for context in contexts:
        context.close()


@pytest.fixture(autouse=True)
def screenshots_on_failure(request: pytest.FixtureRequest, browser: Any, live: Live,
                           tmp_path: Any) -> Iterator[None]:
    """When the test fails, save /ui/ and a job page under the test's tmp dir."""
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed == failed_before:
        return
    context = browser.new_context(http_credentials=VIEWER,
                                  viewport={"width": 1280, "height": 900})
    page = context.new_page()
    for name, path in (("ui", "/ui/"), ("job", f"/ui/jobs/{live.ids['failed'][0]}")):
        page.goto(live.base + path)
        page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
    context.close()
    print(f"screenshots saved in {tmp_path}")


def test_viewer_filters_to_failed_jobs_and_sees_no_error_text(live: Live, open_as: Any,
                                                              problems: list[str]) -> None:
    page = open_as(VIEWER)
    page.goto(live.base + "/ui/")
    page.select_option("select[name=status]", "failed")
    page.click(".filters button[type=submit]")
    page.wait_for_url(re.compile(r"status=failed"))
    badges = page.locator("table.jobs tbody .badge").all_inner_texts()
    assert badges and set(badges) == {"failed"}
    assert MARKER not in page.content()
    page.locator("table.jobs tbody tr a").first.click()
    page.wait_for_url(re.compile(r"/ui/jobs/\d+$"))
    assert page.locator(".job-head .badge").inner_text() == "failed"
    text = page.inner_text("main").lower()  # headings are upper-cased by the stylesheet
    assert "payload" in text and "attempts" in text
    # The error is not shown, and the page says why rather than leaving a blank.
    assert page.locator(".hidden-error").first.inner_text() == "hidden: admins only"
    html = page.content()
    assert MARKER not in html and "SMTP 550" not in html
    assert page.locator("form[method=post]").count() == 0  # no admin buttons
    assert problems == []


def test_admin_retries_a_failed_job_with_the_button(live: Live, open_as: Any,
                                                    problems: list[str]) -> None:
    job_id = live.ids["failed"][-1]
    page = open_as(ADMIN)
    page.goto(f"{live.base}/ui/jobs/{job_id}")
    assert MARKER in page.inner_text(".error-card")  # admins do see the error
    page.click("button:has-text('Retry')")
    page.wait_for_selector(".flash-ok")
    assert f"Job #{job_id} is pending again" in page.inner_text(".flash-ok")
    assert page.locator(".job-head .badge").inner_text() == "pending"
    assert live.store.get(job_id).status is Status.PENDING
    assert page.locator("button:has-text('Cancel')").count() == 1  # now cancellable
    assert problems == []


def test_no_csp_violation_or_console_error_on_any_page(live: Live, open_as: Any,
                                                       problems: list[str],
                                                       tmp_path: Any) -> None:
    page = open_as(ADMIN)
    paths = ["/", "/ui/?status=scheduled", "/ui/?type=pdf&priority=high",
             f"/ui/?before={live.ids['completed'][40]}"]
    paths += [f"/ui/jobs/{ids[0]}" for ids in live.ids.values() if ids]
    for path in paths:
        page.goto(live.base + path)
        assert page.locator("main").count() == 1, path
    page.goto(live.base + "/ui/")
    assert page.locator(".chart rect.completed").count() > 30  # the chart drew
    refresh = page.locator("#autorefresh")
    assert refresh.is_visible()  # the static script ran and revealed the toggle
    refresh.check()
    assert page.evaluate("localStorage.getItem('queuelog.autorefresh')") == "1"
    refresh.uncheck()
    page.fill("input[name=q]", str(live.ids["running"][0]))
    page.click(".filters button[type=submit]")
    page.wait_for_url(re.compile(rf"q={live.ids['running'][0]}$"))
    assert page.locator("table.jobs tbody tr").count() == 1
    page.click(f"table.jobs a:has-text('#{live.ids['running'][0]}')")
    page.wait_for_url(re.compile(rf"/ui/jobs/{live.ids['running'][0]}$"))
    assert problems == []
    page.goto(live.base + "/ui/")
    page.screenshot(path=str(tmp_path / "dashboard.png"))
    target = os.environ.get("QUEUELOG_DOCS_SCREENSHOT")
    if target:
        shutil.copyfile(tmp_path / "dashboard.png", target)


def test_auto_refresh_waits_while_someone_types(live: Live, open_as: Any,
                                                problems: list[str]) -> None:
    """The page reloads every 10 s when asked, but never under a half-typed job id."""
    page = open_as(ADMIN)
    page.clock.install()  # page timers run on a clock the test moves: no sleeping
    page.goto(live.base + "/ui/")
    page.locator("#autorefresh").check()
    page.evaluate("window.__before_reload = true")
    box = page.locator("input[name=q]")
    box.fill("4")  # focused and half-typed
    page.clock.run_for(25_000)
    assert page.evaluate("window.__before_reload === true")  # no reload
    assert box.input_value() == "4"
    page.locator("h2").first.click()  # focus leaves the box
    with page.expect_navigation():
        page.clock.run_for(11_000)
    assert page.evaluate("window.__before_reload === undefined")  # reloaded
    page.locator("#autorefresh").uncheck()  # the choice persists: leave it off
    assert problems == []


def test_at_1400_px_the_job_table_fits_and_shows_the_error_column(
        live: Live, browser: Any, problems: list[str]) -> None:
    """No sideways scrolling and no error cell cut off, with a long error text too."""
    job, _ = live.store.enqueue(NewJob("billing", "long-error", "{}", 0, 0))
    claimed = live.store.claim("worker-long", lease_seconds=60, types=["long-error"])
    assert claimed is not None and claimed.id == job.id
    live.store.fail(job.id, "worker-long", claimed.attempt,
                    f"{MARKER} " + "Traceback: a very long error line without breaks_" * 12,
                    retry=False)
    context = browser.new_context(http_credentials=ADMIN, viewport={"width": 1400, "height": 900})
    try:
        page = context.new_page()
        for path in ("/ui/", "/ui/?status=failed"):
            page.goto(live.base + path)
            box = page.evaluate("""() => {
                const s = document.querySelector('.table-card .scroll');
                const cells = [...document.querySelectorAll('table.jobs .error-cell')];
                return {scroll: s.scrollWidth, client: s.clientWidth,
                        page: document.documentElement.scrollWidth, view: window.innerWidth,
                        right: Math.max(...cells.map(c => c.getBoundingClientRect().right)),
                        narrowest: Math.min(...cells.map(c => c.getBoundingClientRect().width))};
            }""")
            assert box["scroll"] <= box["client"], (path, box)      # no sideways scroll
            assert box["page"] <= box["view"], (path, box)
            assert box["right"] <= box["view"], (path, box)          # the column is not cut
            assert box["narrowest"] >= 150, (path, box)              # and has room to read
        assert MARKER in page.inner_text("table.jobs")
    finally:
        context.close()
        live.store.retry(job.id)  # leave the module's data as other tests expect it
        live.store.cancel(job.id)


def test_admin_pauses_a_type_and_reads_the_audit_log(live: Live, open_as: Any,
                                                     problems: list[str]) -> None:
    page = open_as(ADMIN)
    page.goto(live.base + "/ui/types")
    assert page.locator("table.types tbody tr").count() == len(TYPES)
    page.click("button:has-text('Pause sync')")
    page.wait_for_selector(".flash-ok")
    assert "sync" in live.store.paused()
    assert page.locator("button:has-text('Resume sync')").count() == 1
    page.click("nav.pages a:has-text('Audit')")
    page.wait_for_url(re.compile(r"/ui/audit$"))
    first = page.locator("table.audit tbody tr").first.inner_text()
    assert "type.pause" in first and ADMIN["username"] in first and "sync" in first
    page.goto(live.base + "/ui/types")
    page.click("button:has-text('Resume sync')")
    page.wait_for_selector(".flash-ok")
    assert live.store.paused() == {}
    assert problems == []


def test_admin_retries_all_failed_pdf_jobs_after_confirming(live: Live, open_as: Any,
                                                            problems: list[str]) -> None:
    page = open_as(ADMIN)
    failed_pdf = [i for i in live.ids["failed"] if live.store.get(i).type == "pdf"
                  and live.store.get(i).status is Status.FAILED]
    assert failed_pdf
    page.goto(live.base + "/ui/?status=failed&type=pdf")
    page.click("a.bulk-retry")
    page.wait_for_url(re.compile(r"/ui/bulk/retry\?"))
    assert f"Retry {len(failed_pdf)} job" in page.inner_text("h1")
    page.click("button:has-text('Retry all')")
    page.wait_for_selector(".flash-ok")
    assert f"{len(failed_pdf)} job(s) are pending again" in page.inner_text(".flash-ok")
    assert all(live.store.get(i).status is Status.PENDING for i in failed_pdf)
    assert problems == []


def test_viewer_sees_types_but_no_buttons_nor_audit(live: Live, open_as: Any,
                                                    problems: list[str]) -> None:
    page = open_as(VIEWER)
    page.goto(live.base + "/ui/types")
    assert page.locator("form").count() == 0
    assert page.locator("nav.pages a:has-text('Audit')").count() == 0
    assert page.goto(live.base + "/ui/audit").status == 403
    assert [p for p in problems if "403" not in p] == []


# -- every page at phone and desktop width, and through axe-core ---------------------------
AXE = pathlib.Path(__file__).parent / "node_modules" / "axe-core" / "axe.min.js"
LOCK = pathlib.Path(__file__).parent / "package-lock.json"


def axe_script() -> pathlib.Path | None:
    """axe-core's script: ``npm ci``'s copy, else the locked version fetched once from the
    npm registry into the user's cache (its sha512 checked against package-lock.json), so
    the README's plain ``pytest`` runs the check too; None when neither can be had."""
    if AXE.exists():
        return AXE
    locked = json.loads(LOCK.read_text())["packages"]["node_modules/axe-core"]
    cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache")
    target = cache / "queuelog-tests" / f"axe-core-{locked['version']}.min.js"
    if target.exists():
        return target
    url = f"https://registry.npmjs.org/axe-core/-/axe-core-{locked['version']}.tgz"
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            tarball = resp.read()
    except OSError:
        return None  # offline: the layout is still checked
    algorithm, digest = locked["integrity"].split("-", 1)
    assert base64.b64encode(hashlib.new(algorithm, tarball).digest()).decode() == digest, \
        "axe-core's tarball does not match package-lock.json's integrity"
    with tarfile.open(fileobj=io.BytesIO(tarball)) as tar:
        script = tar.extractfile("package/axe.min.js").read()  # type: ignore[union-attr]
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.part")
    partial.write_bytes(script)
    os.replace(partial, target)  # whole or not at all, whichever xdist worker wins
    return target
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
LAPTOP = {"width": 1366, "height": 768}


def every_page(live: Live, page: Any) -> list[str]:
    """The header's pages (whatever the app registers), plus the pages reached from them."""
    page.goto(live.base + "/ui/")
    nav = page.eval_on_selector_all("nav.pages a", "links => links.map(a => a.pathname)")
    assert "/ui/types" in nav  # the walk covers the header's pages, not a list kept here
    return nav + ["/ui/?status=failed&type=pdf", f"/ui/jobs/{live.ids['failed'][0]}",
                  f"/ui/jobs/{live.ids['running'][0]}", f"/ui/jobs/{live.ids['blocked'][0]}",
                  "/ui/bulk/retry?status=failed",
                  "/ui/jobs/999999", "/ui/?bogus=1"]


def shot_name(who: str, width: int, path: str) -> str:
    """A file name for a page's screenshot."""
    return f"{who}-{width}-{re.sub(r'[^a-z0-9]+', '_', path.lower()).strip('_') or 'root'}.png"


# Seen, not only laid out: each column's header text on screen and on top (not clipped by its
# scroll box, nor under another cell; at phone width, where rows are stacked, each cell of the
# first row carries its column's header as its "label" from data-label), and the chart's
# first and newest minutes on screen. Points are hit-tested with elementFromPoint after the
# window (never a scroll box) is scrolled to them.
SEEN = """
const seen = () => {
    const view = window.innerWidth, out = [];
    const norm = t => t.replace(/\\s+/g, ' ').trim().toLowerCase();
    const label = th => { const c = th.cloneNode(true);
        c.querySelectorAll('.sr-only').forEach(e => e.remove()); return norm(c.textContent); };
    const visible = (el, what, owner) => {  // el's box whole on screen and hit at 3 points
        window.scrollTo(0, el.getBoundingClientRect().top + window.scrollY - 200);
        const r = el.getBoundingClientRect(), box = el.closest('.scroll, .chart-box');
        const b = box ? box.getBoundingClientRect() : {left: 0, right: view};
        if (r.width < 1 || r.height < 1) return out.push(what + ': not shown');
        if (r.left < Math.max(0, b.left) - 0.5 || r.right > Math.min(view, b.right) + 0.5)
            return out.push(what + ': cut off at ' + Math.round(r.left) + '..' + Math.round(r.right));
        for (const x of [r.left + 2, (r.left + r.right) / 2, r.right - 2]) {
            const hit = document.elementFromPoint(x, (r.top + r.bottom) / 2);
            if (!hit || !(owner || el).contains(hit))
                return out.push(what + ': covered by ' + (hit ? hit.outerHTML.slice(0, 60) : 'nothing'));
        }
    };
    for (const t of document.querySelectorAll('table')) {
        const heads = [...t.querySelectorAll('thead tr:first-child th')];
        const rows = [...t.querySelectorAll('tbody tr')];
        const stacked = rows.length && getComputedStyle(rows[0]).display !== 'table-row';
        heads.forEach((th, i) => {
            const name = label(th);
            if (!name) return;  // a header for screen readers only (the buttons' column)
            // stacked: the column's first cell that has something to show (an empty one is left out)
            const cell = stacked ? rows.map(r => r.cells[i]).find(c => c.childNodes.length) : th;
            if (!cell) return;  // stacked, and no row has anything in this column
            if (getComputedStyle(cell).display === 'none') {
                if (!th.classList.contains('opt')) out.push(t.className + ' ' + name + ': hidden');
                return;  // .opt: a column phones do without
            }
            if (stacked) {
                const shown = norm(getComputedStyle(cell, '::before').content.replace(/^"|"$/g, ''));
                if (shown !== name) out.push(t.className + ' ' + name + ': its cells read ' + shown);
            }
            visible(cell, t.className + ' ' + name);
        });
        if (!stacked && rows.length)  // and a row's controls (the types' Pause button) whole
            for (const el of rows[0].querySelectorAll('button, summary'))
                if (!el.closest('details:not([open]) > :not(summary)')) visible(el, t.className + ' ' + el.textContent.trim());
    }
    for (const c of document.querySelectorAll('svg.chart')) {
        if (c.getBoundingClientRect().width === 0) continue;
        const bars = c.querySelectorAll('g.bar');
        visible(bars[0].querySelector('.hit'), 'first minute', bars[0]);
        visible(bars[bars.length - 1].querySelector('.hit'), 'newest minute', bars[bars.length - 1]);
    }
    window.scrollTo(0, 0);
    return out;
};
"""
LAYOUT = """() => {""" + SEEN + """
    const view = window.innerWidth, out = [];
    for (const el of document.querySelectorAll('button, a.button, select, input')) {
        if (el.type === 'hidden' || el.closest('[hidden]')) continue;
        const r = el.getBoundingClientRect(), box = el.closest('.scroll, .chart-box');
        // reachable: on screen, or inside a box that scrolls to it
        if ((r.left < 0 || r.right > view + 0.5) && !box) out.push('off screen: ' + el.outerHTML.slice(0, 80));
    }
    for (const t of document.querySelectorAll('table')) {
        if (!t.closest('.scroll')) out.push('table outside a scroll box: ' + t.className);
    }
    const links = [...document.querySelectorAll('.topbar nav a, .topbar .who, .topbar .signout')]
        .map(a => a.getBoundingClientRect());
    for (let i = 1; i < links.length; i++) {  // side by side: a visible gap between them
        const a = links[i - 1], b = links[i];
        if (Math.abs(a.top - b.top) < 4 && b.left - a.right < 8) out.push('header items touch: ' + i);
    }
    const charts = [...document.querySelectorAll('svg.chart')].filter(c => c.getBoundingClientRect().width > 0);
    if (document.querySelector('svg.chart') && charts.length !== 1) out.push('charts shown: ' + charts.length);
    for (const c of charts) if (c.getBoundingClientRect().height < 90) out.push('chart squashed');
    return {page: document.documentElement.scrollWidth, view: view, problems: out.concat(seen())};
}"""


AXE_RUN = """async () => (await axe.run(document, {resultTypes: ['violations']})).violations
    .map(v => v.id + ': ' + v.nodes.slice(0, 3).map(n => n.target.join(' ')).join(' | '))"""


@pytest.mark.parametrize("size", [PHONE, DESKTOP], ids=["phone", "desktop"])
@pytest.mark.parametrize("user", [ADMIN, VIEWER], ids=["admin", "viewer"])
def test_every_page_fits_the_screen_and_passes_axe(live: Live, browser: Any, size: dict[str, int],
                                                   user: dict[str, str]) -> None:
    """At 390 px and 1280 px: no sideways scroll, wide tables scroll in their box, every
    control reachable; then axe-core, injected past the page's CSP (this test's browser
    context bypasses it), finds no violation. Each page is loaded once for both checks."""
    context = browser.new_context(http_credentials=user, viewport=size, bypass_csp=True)
    shots = os.environ.get("QUEUELOG_SCREENSHOTS")  # a folder to keep every page's picture in
    # The viewer's pages are the admin's HTML less its controls, and CSS alone differs by
    # width: axe at the viewer's desktop found nothing the other three walks do not (and
    # cost 5 s of CI). The layout is still checked there.
    script = axe_script()
    axe = script is not None and not (user is VIEWER and size is DESKTOP)
    found: dict[str, Any] = {}
    try:
        page = context.new_page()
        paths = every_page(live, page) + ([] if user is ADMIN else ["/ui/audit"])
        for path in paths:
            page.goto(live.base + path)
            got = page.evaluate(LAYOUT)
            if shots:
                pathlib.Path(shots).mkdir(parents=True, exist_ok=True)
                page.screenshot(full_page=True, path=os.path.join(
                    shots, shot_name(user["username"], size["width"], path)))
            assert got["page"] <= size["width"], (path, got)
            assert got["problems"] == [], (path, got)
            if axe:
                page.add_script_tag(path=str(script))
                violations = page.evaluate(AXE_RUN)
                if violations:
                    found[path] = violations
    finally:
        context.close()
    if script is None:
        pytest.skip("the layout holds; axe-core could not be fetched from the npm registry "
                    f"(offline?): cd tests/e2e && npm ci puts it in {AXE}")
    assert found == {}


def test_at_1366_px_every_column_header_is_seen(live: Live, browser: Any) -> None:
    """The other common laptop width, on the pages with the widest tables (the admin's, who
    has the most columns and buttons): each header and button whole and on top, as in the
    walk above at 1280 px, and no sideways scroll; and the types page with a "Change limits"
    form open at both laptop widths."""
    context = browser.new_context(http_credentials=ADMIN, viewport=LAPTOP)
    try:
        page = context.new_page()
        for path in ("/ui/types", "/ui/?status=failed", "/ui/schedules", "/ui/workers",
                     "/ui/audit", f"/ui/jobs/{live.ids['failed'][0]}"):
            page.goto(live.base + path)
            got = page.evaluate(LAYOUT)
            assert got["page"] <= LAPTOP["width"] and got["problems"] == [], (path, got)
        for size in (LAPTOP, DESKTOP):  # an admin's open "Change limits" form pushes nothing out
            page.set_viewport_size(size)
            page.goto(live.base + "/ui/types")
            page.locator("table.types summary").first.click()
            got = page.evaluate(LAYOUT)
            assert got["problems"] == [], (size, got)
    finally:
        context.close()


@pytest.mark.parametrize("size", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_the_job_page_links_its_workflow_both_ways_on_screen(live: Live, browser: Any,
                                                              size: dict[str, int]) -> None:
    """A job's parents and dependents are links whose text is seen whole, not clipped at
    the card's or the screen's edge; following one leads to a page that links back."""
    job = live.store.get(live.ids["blocked"][0])
    family = [*job.depends_on, *(job.dependents or ())]
    assert len(family) == 5
    expected = [f"#{i} {live.store.get(i).type}" for i in family]
    context = browser.new_context(http_credentials=VIEWER, viewport=size)
    try:
        page = context.new_page()
        page.goto(f"{live.base}/ui/jobs/{job.id}")
        links = page.locator(".workflow .relatives a")
        assert links.all_inner_texts() == expected
        for n in range(links.count()):
            assert links.nth(n).is_visible()
            box = links.nth(n).bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= size["width"], box
        card = page.evaluate("""() => { const c = document.querySelector('.workflow');
            return {scroll: c.scrollWidth, client: c.clientWidth,
                    page: document.documentElement.scrollWidth}; }""")
        assert card["scroll"] <= card["client"] and card["page"] <= size["width"], card
        links.last.click()  # the dependent, whose page names this job among its parents
        page.wait_for_url(re.compile(rf"/ui/jobs/{family[-1]}$"))
        assert page.locator(".workflow .relatives a").all_inner_texts() == [
            f"#{job.id} {job.type}"]
    finally:
        context.close()


def test_a_long_payload_scrolls_from_the_keyboard_and_passes_axe(live: Live,
                                                                  browser: Any) -> None:
    """A job made by a schedule, with a payload taller than its box: the box takes the
    keyboard's focus (else it cannot be scrolled without a mouse), the schedule's link is
    told apart from its text, and axe finds nothing on the page."""
    script = axe_script()
    if script is None:
        pytest.skip(f"axe-core could not be fetched (offline?): cd tests/e2e && npm ci puts it in {AXE}")
    payload = json.dumps({"rows": [{"n": n, "to": f"user{n}@example.com"} for n in range(80)]})
    job = live.store.run_schedule("nightly-report", NewJob("schedule:nightly-report", "pdf",
                                                           payload, 0, 3), ADMIN["username"])
    context = browser.new_context(http_credentials=VIEWER, viewport=PHONE, bypass_csp=True)
    try:
        page = context.new_page()
        page.goto(f"{live.base}/ui/jobs/{job.id}")
        box = page.locator("pre.json").last
        assert box.evaluate("p => p.scrollHeight > p.clientHeight")  # it does scroll
        box.focus()
        assert box.evaluate("p => document.activeElement === p")
        page.keyboard.press("End")  # scrolls the box (smoothly: wait for it to move)
        page.wait_for_function("p => p.scrollTop > 0", arg=box.element_handle(), timeout=5000)
        page.add_script_tag(path=str(script))
        assert page.evaluate(AXE_RUN) == []
    finally:
        context.close()


def test_long_names_and_values_wrap_at_phone_width(live: Live, browser: Any) -> None:
    """A long type name (up to 100 characters, without spaces) in a job's heading and the
    type filter, and a long unknown parameter quoted by the 400 page: none scrolls sideways."""
    name = "billing.invoices.render_monthly_statement_pdf"
    job, _ = live.store.enqueue(NewJob("reports", name, "{}", 0, 3))
    context = browser.new_context(http_credentials=VIEWER, viewport=PHONE)
    try:
        page = context.new_page()
        for path in (f"/ui/jobs/{job.id}", f"/ui/?type={name}", f"/ui/?{'x' * 150}=1"):
            page.goto(live.base + path)
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= PHONE["width"], (path, width)
    finally:
        context.close()


def test_types_pause_buttons_are_on_screen_at_phone_width(live: Live, browser: Any) -> None:
    """The buttons are on screen (the last line of each type's stacked row), not 700 px to
    the right in a box that scrolls."""
    context = browser.new_context(http_credentials=ADMIN, viewport=PHONE)
    try:
        page = context.new_page()
        page.goto(live.base + "/ui/types")
        boxes = page.eval_on_selector_all(
            "table.types td.action button", "bs => bs.map(b => b.getBoundingClientRect().toJSON())")
        assert len(boxes) == len(TYPES)
        assert all(b["left"] >= 0 and b["right"] <= PHONE["width"] for b in boxes), boxes
        page.click("button:has-text('Pause email')")  # clickable where it is
        page.wait_for_selector(".flash-ok")
        assert "email" in live.store.paused()
        page.click("button:has-text('Resume email')")
        page.wait_for_selector(".flash-ok")
        assert live.store.paused() == {}
    finally:
        context.close()


def test_sign_out_answers_401_so_the_browser_forgets_the_password(live: Live,
                                                                  browser: Any) -> None:
    """The page says how to sign in again; with the password the browser holds it is 401."""
    context = browser.new_context(http_credentials=VIEWER, viewport=DESKTOP)
    try:
        page = context.new_page()
        page.goto(live.base + "/ui/")
        page.click("a.signout")
        assert page.url.endswith("/ui/signout")
        assert page.locator("h1").inner_text() == "Signed out"
        assert page.locator("a:has-text('Sign in again')").get_attribute("href") == "/ui/"
        assert page.request.get(live.base + "/ui/signout").status == 401
    finally:
        context.close()
