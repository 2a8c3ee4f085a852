"""``queuelog work`` against a live gunicorn server, with real child processes.

Each test claims only its own job type (the server is configured with many), so one server
per backend serves the whole module without the tests seeing each other's jobs. The runner
speaks HTTP and never sees the database, so its tests run on SQLite; the ones whose outcome
rests on the server's claim and fencing (ON_BOTH) run on PostgreSQL too, and the server's
behaviour on both backends is the subject of tests/api.
"""
from __future__ import annotations

import http.client
import http.server
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Iterator

import pytest
import server_process
from conftest import BACKENDS, _empty_pg
from server_process import ROOT, Server, make_keys

from queuelog.client import Client
from queuelog.server.store import Store

TYPES = [f"t{i}" for i in range(40)]
_type_numbers = itertools.count()


def wait_for(check: Callable[[], Any], timeout: float = 20, what: str = "condition") -> Any:
    """Poll ``check`` (real time: other processes do the work) until it returns a truthy value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Live:
    """A gunicorn server on one backend, with keys and clients for the tests."""

    def __init__(self, db_url: str, log_path: str) -> None:
        self.db_url = db_url
        keys = make_keys(db_url, {"producer": "producer", "worker": "worker",
                                  "other": "worker", "root": "admin"})
        self.tokens = {n: h["Authorization"].split()[1] for n, h in keys.items()}
        # Fast retries: a failed job comes back within a fraction of a second.
        self.server = Server(db_url, log_path, workers=2, threads=8, env={
            "QUEUELOG_JOB_TYPES": json.dumps({t: {} for t in [*TYPES, "email"]}),
            "QUEUELOG_RETRY_BACKOFF_SECONDS": "0.1"}).start()
        self.producer = self.client("producer")
        self.admin = self.client("root")

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.server.port}"

    def client(self, name: str) -> Client:
        """A client with the named key."""
        return Client(self.url, self.tokens[name])

    def new_key(self, name: str, role: str, types: list[str] | None = None) -> str:
        """A new key (a producer's: up to ``medium``, as by default); its token."""
        store = Store(self.db_url)
        try:
            _, token = store.accounts.create_key(name, role, types=types, max_priority=10)
            return token
        finally:
            store.close()


# Run on both backends where the server's claim and fencing decide the outcome.
ON_BOTH = pytest.mark.parametrize("live", BACKENDS, indirect=True)


@pytest.fixture(scope="module", params=["sqlite"])
def live(request: pytest.FixtureRequest, tmp_path_factory: Any) -> Iterator[Live]:
    """One server per backend for the module."""
    tmp = tmp_path_factory.mktemp("live")
    if request.param == "sqlite":
        url = f"sqlite:///{tmp}/runner.sqlite3"
    else:
        url = request.getfixturevalue("pg_ready")
        _empty_pg(url)
    server = Live(url, str(tmp / "server.log"))
    yield server
    server.server.stop()


@pytest.fixture
def jtype() -> str:
    """A job type no other test of the module uses."""
    return TYPES[next(_type_numbers) % len(TYPES)]


class Worker:
    """A ``queuelog work`` child process; its standard error goes to a file."""

    def __init__(self, live: Live, tmp_path: Any, args: list[str], *, token: str | None = None,
                 env: dict[str, str] | None = None, cwd: Any = None) -> None:
        self.log_path = tmp_path / f"worker-{time.monotonic_ns()}.log"
        full_env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1",
                    "QUEUELOG_URL": live.url,
                    "QUEUELOG_TOKEN": token if token is not None else live.tokens["worker"],
                    **(env or {})}
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "queuelog", "work", *args],
                                         env=full_env, cwd=cwd or tmp_path, stdout=log,
                                         stderr=log, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    def log(self) -> str:
        """Everything the runner wrote."""
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        """Send a signal to the runner alone (not to its commands)."""
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30) -> int:
        """Its exit status."""
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        """Make sure it is gone."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """Runners started by a test; killed at its end whatever happened."""
    started: list[Worker] = []
    yield started
    for w in started:
        w.kill()


@pytest.fixture
def work(live: Live, tmp_path: Any, workers: list[Worker]) -> Callable[..., Worker]:
    """Start ``queuelog work ARGS`` against the live server."""
    def start(*args: str, **kwargs: Any) -> Worker:
        w = Worker(live, tmp_path, list(args), **kwargs)
        workers.append(w)
        return w
    return start


def script(tmp_path: Any, name: str, body: str) -> str:
    """An executable shell script."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def finished(live: Live, job_id: int) -> dict[str, Any] | None:
    """The job (admin view) once it is completed or failed, else None."""
    job = live.admin.get(job_id)
    return job if job["status"] in ("completed", "failed") else None


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone between open and read
        return False


def test_exit_zero_completes_with_json_text_or_no_result(live, work, jtype, tmp_path):
    handler = script(tmp_path, "h.sh", """payload=$(cat)
case "$payload" in
  *json*) printf '{"sent": %s, "job": "%s"}\\n' "$payload" "$QUEUELOG_JOB_ID" ;;
  *text*) printf 'line one\\nline two\\n' ;;
esac
""")
    jobs = [live.producer.enqueue(jtype, {"out": kind}) for kind in ("json", "text", "none")]
    w = work("--types", jtype, "--", handler)
    done = [wait_for(lambda j=j: finished(live, j["id"]), what="completion") for j in jobs]
    assert [j["status"] for j in done] == ["completed"] * 3
    assert done[0]["result"] == {"sent": {"out": "json"}, "job": str(jobs[0]["id"])}
    assert done[1]["result"] == {"stdout": "line one\nline two\n"}
    assert done[2]["result"] is None
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    lines = [line for line in w.log().splitlines() if "outcome=completed" in line]
    assert len(lines) == 3 and f"job={jobs[0]['id']} type={jtype} attempt=1" in w.log()


def test_failure_stores_the_sanitized_stderr_tail_and_exit_status(live, work, jtype, tmp_path):
    handler = script(tmp_path, "fail.sh", """head -c 20000 /dev/zero | tr '\\0' x >&2
echo >&2
echo "connect to postgresql://app:hunter2@db/prod failed, password=swordfish" >&2
exit 3
""")
    job = live.producer.enqueue(jtype, {}, max_retries=0)
    w = work("--types", jtype, "--", handler)
    done = wait_for(lambda: finished(live, job["id"]), what="the failure")
    assert done["status"] == "failed" and done["attempt"] == 1
    error = done["error"]
    assert error.startswith("exit status 3\n")
    assert error.rstrip().endswith(
        "connect to postgresql://[REDACTED]@db/prod failed, password=[REDACTED]")
    assert "hunter2" not in error and "swordfish" not in error
    assert "xxxx" in error and len(error.encode()) <= 8192  # the tail, not the head
    assert done["attempts"][0]["outcome"] == "failed"
    # Written once the answer landed: with one slot, when the answer (which waits for the
    # next job) returns, or at a stop, which does not wait for it.
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=10) == 0
    assert f"job={job['id']} type={jtype} attempt=1 outcome=failed" in w.log()


def test_the_stderr_tail_is_sized_to_the_servers_max_error_bytes(live, work, jtype, tmp_path):
    """The server keeps the first MAX_ERROR_BYTES of an error: a runner told a smaller limit
    than its 8 KiB default sends that much, so the end of stderr is what survives."""
    handler = script(tmp_path, "fail.sh", """head -c 20000 /dev/zero | tr '\\0' x >&2
echo "the last line" >&2
exit 3
""")
    job = live.producer.enqueue(jtype, {}, max_retries=0)
    w = work("--types", jtype, "--", handler, env={"QUEUELOG_MAX_ERROR_BYTES": "300"})
    done = wait_for(lambda: finished(live, job["id"]), what="the failure")
    error = done["error"]
    assert error.startswith("exit status 3\nxxx") and error.endswith("xthe last line\n")
    assert 250 < len(error.encode()) <= 300, len(error.encode())
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=10) == 0


def test_timeout_kills_the_process_group_grandchildren_too(live, work, jtype, tmp_path):
    pids = tmp_path / "pids"
    handler = script(tmp_path, "slow.sh", f"""sleep 60 &
echo $! >> {pids}
sh -c 'sleep 60' &
echo $! >> {pids}
wait
""")
    job = live.producer.enqueue(jtype, {}, max_retries=0)
    work("--types", jtype, "--timeout", "1", "--", handler)
    done = wait_for(lambda: finished(live, job["id"]), what="the timeout")
    assert done["status"] == "failed" and done["error"] == "timed out after 1 s"
    grandchildren = [int(p) for p in pids.read_text().split()]
    assert len(grandchildren) == 2
    wait_for(lambda: not any(alive(p) for p in grandchildren), timeout=5,
             what="the grandchildren to die")


def test_heartbeats_keep_a_2s_lease_through_a_5s_job(live, work, jtype, tmp_path):
    handler = script(tmp_path, "long.sh", "sleep 5\necho '{\"slept\": 5}'\n")
    job = live.producer.enqueue(jtype, {})
    work("--types", jtype, "--lease", "2", "--", handler)
    wait_for(lambda: live.admin.get(job["id"])["status"] == "running", what="the claim")
    other = live.client("other")
    deadline = time.monotonic() + 4.5
    while time.monotonic() < deadline:  # another worker keeps trying to take it back
        assert other.claim([jtype]) is None
        time.sleep(0.25)
    done = wait_for(lambda: finished(live, job["id"]), what="completion")
    assert done["status"] == "completed" and done["result"] == {"slept": 5}
    assert [a["outcome"] for a in done["attempts"]] == ["completed"]


@ON_BOTH
def test_a_lost_lease_kills_the_command_and_reports_nothing(live, work, jtype, tmp_path):
    pid_file = tmp_path / "pid"
    handler = script(tmp_path, "held.sh", f"echo $$ > {pid_file}\nsleep 30\n")
    job = live.producer.enqueue(jtype, {})
    w = work("--types", jtype, "--lease", "1", "--", handler)
    wait_for(pid_file.exists, what="the command to start")
    wait_for(lambda: pid_file.read_text().strip(), what="its pid")
    command_pid = int(pid_file.read_text())
    w.signal(signal.SIGSTOP)  # a frozen runner: no heartbeats
    try:
        time.sleep(1.5)
        taken = live.client("other").claim([jtype], wait=3)
        assert taken is not None and taken["id"] == job["id"] and taken["attempt"] == 2
    finally:
        w.signal(signal.SIGCONT)
    wait_for(lambda: not alive(command_pid), timeout=5, what="the command to be killed")
    wait_for(lambda: "outcome=lost" in w.log(), timeout=5, what="the log line")
    now = live.admin.get(job["id"])
    assert now["status"] == "running" and now["worker_id"] == "other" and now["attempt"] == 2
    assert [a["outcome"] for a in now["attempts"]] == ["lease_expired", "running"]
    live.client("other").complete(taken)  # attempt 2 is untouched by the lost runner


def test_sigterm_lets_a_job_finish_within_the_grace_period(live, work, jtype, tmp_path):
    started = tmp_path / "started"
    handler = script(tmp_path, "grace.sh", f"touch {started}\nsleep 2\necho done\n")
    job = live.producer.enqueue(jtype, {})
    w = work("--types", jtype, "--grace", "20", "--", handler)
    wait_for(started.exists, what="the command to start")
    w.signal(signal.SIGTERM)
    later = live.producer.enqueue(jtype, {})  # no new claims after the signal
    assert w.wait(timeout=20) == 0
    done = live.admin.get(job["id"])
    assert done["status"] == "completed" and done["result"] == {"stdout": "done\n"}
    assert live.admin.get(later["id"])["status"] == "pending"


def test_when_grace_runs_out_the_job_is_failed_with_retry(live, work, jtype, tmp_path):
    started = tmp_path / "started"
    handler = script(tmp_path, "stuck.sh", f"touch {started}\necho partial >&2\nsleep 30\n")
    job = live.producer.enqueue(jtype, {}, max_retries=2)
    w = work("--types", jtype, "--grace", "1", "--", handler)
    wait_for(started.exists, what="the command to start")
    begun = time.monotonic()
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=20) == 0
    assert time.monotonic() - begun < 10
    now = live.admin.get(job["id"])
    assert now["status"] == "pending" and now["retry_count"] == 1  # back for another worker
    assert now["attempts"][0]["outcome"] == "failed"
    assert "stopped" in now["error"] and "partial" in now["error"]


def test_a_second_sigint_kills_at_once(live, work, jtype, tmp_path):
    pid_file = tmp_path / "pid"
    handler = script(tmp_path, "stubborn.sh", f"echo $$ > {pid_file}\nsleep 30\n")
    job = live.producer.enqueue(jtype, {}, max_retries=2)
    w = work("--types", jtype, "--grace", "60", "--", handler)
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(),
             what="the command to start")
    w.signal(signal.SIGINT)
    time.sleep(0.5)
    assert w.proc.poll() is None  # the first one waits for the grace period
    begun = time.monotonic()
    w.signal(signal.SIGINT)
    w.wait(timeout=10)
    assert time.monotonic() - begun < 5
    assert not alive(int(pid_file.read_text()))
    now = live.admin.get(job["id"])
    assert now["status"] == "pending" and now["attempts"][0]["outcome"] == "failed"


def test_a_refused_token_exits_1_with_one_line(live, work, jtype, tmp_path):
    w = work("--types", jtype, "--", "true", token="ql_not-a-real-token")
    assert w.wait(timeout=20) == 1
    lines = w.log().strip().splitlines()
    assert len(lines) == 1 and "refused" in lines[0] and "401" in lines[0]
    producer_key = work("--types", jtype, "--", "true", token=live.tokens["producer"])
    assert producer_key.wait(timeout=20) == 1 and "403" in producer_key.log()


def test_the_token_reaches_no_command(live, work, jtype, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(live.tokens["worker"] + "\n")
    token_file.chmod(0o600)
    dump = tmp_path / "dump"
    handler = script(tmp_path, "dump.sh", f"""cat /proc/$$/environ > {dump}.env
cat /proc/$$/cmdline > {dump}.argv
sh -c 'cat /proc/$$/environ' > {dump}.child
""")
    job = live.producer.enqueue(jtype, {}, priority="low")
    for how in ({"token": "", "env": {"QUEUELOG_TOKEN_FILE": str(token_file)}}, {}):
        w = work("--types", jtype, "--", handler, "arg", **how)
        done = wait_for(lambda j=job: finished(live, j["id"]), what="completion")
        assert done["status"] == "completed"
        w.signal(signal.SIGTERM)
        assert w.wait() == 0
        token = live.tokens["worker"].encode()
        for part in ("env", "argv", "child"):
            raw = (tmp_path / f"dump.{part}").read_bytes()
            assert token not in raw and b"QUEUELOG_TOKEN" not in raw, part
        env_vars = dict(v.split(b"=", 1) for v in
                        (tmp_path / "dump.env").read_bytes().split(b"\0") if b"=" in v)
        assert env_vars[b"QUEUELOG_JOB_ID"] == str(job["id"]).encode()
        assert env_vars[b"QUEUELOG_JOB_TYPE"] == jtype.encode()
        assert env_vars[b"QUEUELOG_JOB_ATTEMPT"] == b"1"
        assert env_vars[b"QUEUELOG_JOB_PRIORITY"] == b"low"
        job = live.producer.enqueue(jtype, {}, priority="low")  # for the second round


@ON_BOTH
def test_concurrency_8_over_500_jobs_runs_no_job_twice(live, work, jtype, tmp_path):
    seen, events = tmp_path / "seen", tmp_path / "events"
    handler = script(tmp_path, "record.sh", f"""echo + >> {events}
echo $QUEUELOG_JOB_ID >> {seen}
echo - >> {events}
""")
    live.producer.enqueue_many([{"type": jtype, "payload": {"n": n}} for n in range(500)])
    w = work("--types", jtype, "--concurrency", "8", "--", handler)

    def all_done() -> bool:
        return seen.exists() and len(seen.read_text().split()) >= 500 and not any(
            True for _ in live.admin.list(type=jtype, status="running"))
    wait_for(all_done, timeout=180, what="500 jobs")
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    ids = seen.read_text().split()
    assert len(ids) == len(set(ids)) == 500
    running = peak = 0
    for event in events.read_text().split():  # appends of a few bytes do not interleave
        running += 1 if event == "+" else -1
        peak = max(peak, running)
    assert 1 <= peak <= 8  # never more commands at once than --concurrency
    completed = list(live.admin.list(type=jtype, status="completed", limit=200))
    assert len(completed) == 500 and {j["attempt"] for j in completed} == {1}


def test_the_runner_survives_a_server_restart_and_its_answer_lands(live, work, jtype, tmp_path,
                                                                   monkeypatch):
    started, go, ended = tmp_path / "started", tmp_path / "go", tmp_path / "ended"
    handler = script(tmp_path, "restart.sh", f"touch {started}\n"
                     f"while [ ! -e {go} ]; do sleep 0.05; done\n"
                     f"echo '{{\"ok\": 1}}'\ntouch {ended}\n")
    job = live.producer.enqueue(jtype, {})
    w = work("--types", jtype, "--lease", "60", "--", handler)
    wait_for(started.exists, what="the command to start")
    port = live.server.port
    live.server.kill()
    go.touch()  # the command ends while the server is down: the answer must wait
    wait_for(ended.exists, what="the command to end")
    time.sleep(1)  # the runner's first tries at the answer meet no server
    monkeypatch.setattr(server_process, "free_port", lambda: port)
    live.server.start()
    done = wait_for(lambda: finished(live, job["id"]), timeout=30, what="the answer")
    assert done["status"] == "completed" and done["result"] == {"ok": 1}
    assert w.proc.poll() is None  # still working
    second = live.producer.enqueue(jtype, {})
    assert wait_for(lambda: finished(live, second["id"]), what="the next job")["attempt"] == 1


class DropFirstAnswer(http.server.ThreadingHTTPServer):
    """An HTTP proxy that forwards everything, but answers the first complete with a 503.

    The server did commit that complete: the worker cannot know, and its retry gets 409.
    With ``drop=False`` it only forwards. ``requests`` lists every request, as it came.
    """

    daemon_threads = True

    def __init__(self, upstream_port: int, *, drop: bool = True) -> None:
        self.upstream_port = upstream_port
        self.drop = drop
        self.dropped: list[str] = []
        self.requests: list[str] = []
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _forward(self) -> None:
        server: DropFirstAnswer = self.server  # type: ignore[assignment]
        server.requests.append(f"{self.command} {self.path}")
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        upstream = http.client.HTTPConnection("127.0.0.1", server.upstream_port, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        upstream.request(self.command, self.path, body=body, headers=headers)
        resp = upstream.getresponse()
        data = resp.read()
        upstream.close()
        if self.path.endswith("/complete") and server.drop and not server.dropped \
                and resp.status == 200:
            server.dropped.append(self.path)
            resp_status, data = 503, b'{"type": "urn:x:unavailable", "status": 503}'
            content_type = "application/problem+json"
        else:
            resp_status, content_type = resp.status, resp.getheader("Content-Type", "")
        self.send_response(resp_status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _forward


def test_a_complete_whose_answer_was_lost_is_found_in_the_history(live, work, jtype, tmp_path):
    """With one slot the complete carries ``next``: the job its lost answer claimed is not
    run twice, but waits out its lease (2 s here), and then the runner runs it."""
    proxy = DropFirstAnswer(live.server.port)
    try:
        job, second = (live.producer.enqueue(jtype, {"n": n}) for n in range(2))
        w = work("--types", jtype, "--lease", "2", "--", "true",
                 env={"QUEUELOG_URL": f"http://127.0.0.1:{proxy.server_address[1]}"})
        wait_for(lambda: "outcome=" in w.log(), what="the log line")
        # The single route (with next, or on a server without batches) or the batch route.
        assert proxy.dropped in (["/jobs/complete"], [f"/jobs/{job['id']}/complete"])
        assert f"job={job['id']} type={jtype} attempt=1 outcome=completed" in w.log()
        done = live.admin.get(job["id"])
        assert done["status"] == "completed"
        assert [a["outcome"] for a in done["attempts"]] == ["completed"]
        later = wait_for(lambda: finished(live, second["id"]), what="the second job")
        assert later["status"] == "completed"
        assert [a["outcome"] for a in later["attempts"]] in (
            ["lease_expired", "completed"], ["completed"])
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_work_creates_no_file_here_or_in_an_instance_folder(live, work, jtype, tmp_path):
    import shutil
    site = tmp_path / "site"
    shutil.copytree(os.path.join(ROOT, "queuelog"), site / "queuelog",
                    ignore=shutil.ignore_patterns("__pycache__"))
    here = tmp_path / "here"
    here.mkdir()
    job = live.producer.enqueue(jtype, {})
    w = work("--types", jtype, "--", "true", cwd=here,
             env={"PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"})
    wait_for(lambda: finished(live, job["id"]), what="completion")
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    assert os.listdir(here) == []
    assert sorted(os.listdir(site)) == ["queuelog"]


def test_a_long_poll_whose_client_left_claims_nothing(live, jtype):
    """A worker stopped during its long poll: the job enqueued next goes to someone else."""
    conn = http.client.HTTPConnection("127.0.0.1", live.server.port, timeout=10)
    conn.request("POST", "/jobs/claim", body=json.dumps({"types": [jtype], "wait": 20}),
                 headers={"Authorization": f"Bearer {live.tokens['worker']}",
                          "Content-Type": "application/json"})
    time.sleep(0.5)  # the poll is waiting in the server now
    conn.sock.shutdown(2)
    conn.close()
    time.sleep(0.5)
    job = live.producer.enqueue(jtype, {})
    time.sleep(1.5)  # an open poll looks again within a second of an enqueue
    taken = live.client("other").claim([jtype])
    assert taken is not None and taken["id"] == job["id"] and taken["attempt"] == 1


def readme_block(name: str) -> str:
    """The code block between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` in the docs."""
    with open(os.path.join(ROOT, "docs", "writing-a-worker.md"), encoding="utf-8") as fh:
        text = fh.read()
    part = text[text.index(f"<!-- {name}:begin -->"):text.index(f"<!-- {name}:end -->")]
    return part.split("```", 1)[1].split("\n", 1)[1].rsplit("```", 1)[0]


def test_the_readme_shows_the_example_handler_as_it_is():
    with open(os.path.join(ROOT, "examples", "check-url.sh"), encoding="utf-8") as fh:
        assert readme_block("check-url") == fh.read()


def test_the_example_handler_checks_urls(live, work, jtype):
    ok = live.producer.enqueue(jtype, {"url": f"{live.url}/healthz"})
    refused = live.producer.enqueue(jtype, {"url": f"{live.url}/jobs"}, max_retries=0)
    work("--types", jtype, "--", os.path.join(ROOT, "examples", "check-url.sh"))
    done = wait_for(lambda: finished(live, ok["id"]), what="the check")
    assert done["status"] == "completed" and done["result"]["status"] == 200
    assert done["result"]["bytes"] > 0 and done["result"]["seconds"] >= 0
    failed = wait_for(lambda: finished(live, refused["id"]), what="the failed check")
    assert failed["status"] == "failed" and failed["error"].startswith("exit status 22\n")
    assert "401" in failed["error"] and f"job {refused['id']} (attempt 1)" in failed["error"]


@pytest.mark.skipif(not shutil.which("jq"), reason="the README's bash worker needs jq")
def test_the_readme_bash_worker_loop_works(live, jtype, tmp_path):
    """The loop as the README shows it, with its 30 s heartbeat and 90 s lease made 1 s and 3 s."""
    loop = readme_block("worker-loop")
    assert loop.count("sleep 30") == 1 and loop.count('"lease_seconds": 90') == 1
    (tmp_path / "worker.sh").write_text(
        loop.replace("sleep 30", "sleep 1").replace('"lease_seconds": 90', '"lease_seconds": 3'))
    handler = script(tmp_path, "handle.sh", """payload=$(cat)
case "$payload" in
  *slow*) sleep 5; echo '{"slept": true}' ;;
  *bad*) echo "no such invoice, token=abc123" >&2; exit 3 ;;
  *) printf '{"got": %s, "env": "%s %s %s %s"}\n' "$payload" "$QUEUELOG_JOB_ID" \
       "$QUEUELOG_JOB_ATTEMPT" "$QUEUELOG_JOB_TYPE" "${QUEUELOG_TOKEN:-no token}" ;;
esac
""")
    token = live.new_key(f"bash-{jtype}", "worker", [jtype])
    env = {**os.environ, "QUEUELOG_URL": live.url, "QUEUELOG_TOKEN": token}
    proc = subprocess.Popen(["bash", str(tmp_path / "worker.sh"), handler], env=env,
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        good = live.producer.enqueue(jtype, {"n": 1})
        # The handler gets the job's fields, as from queuelog work, and not the token.
        assert wait_for(lambda: finished(live, good["id"]))["result"] == {
            "got": {"n": 1}, "env": f"{good['id']} 1 {jtype} no token"}
        bad = live.producer.enqueue(jtype, {"bad": 1}, max_retries=0)
        failed = wait_for(lambda: finished(live, bad["id"]))
        assert failed["status"] == "failed"
        assert failed["error"] == "exit status 3\nno such invoice, token=[REDACTED]\n"
        slow = live.producer.enqueue(jtype, {"slow": 1})
        wait_for(lambda: live.admin.get(slow["id"])["status"] == "running")
        other = live.client("other")
        for _ in range(16):  # 4 s, past the 3 s lease: the heartbeats keep it
            assert other.claim([jtype]) is None
            time.sleep(0.25)
        done = wait_for(lambda: finished(live, slow["id"]))
        assert done["result"] == {"slept": True} and done["attempt"] == 1
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.mark.skipif(not shutil.which("jq"), reason="the README's bash worker needs jq")
def test_the_bash_worker_runs_the_example_handler_as_the_guide_says(live, jtype, tmp_path):
    """``bash examples/worker.sh examples/check-url.sh``: the handler reads the job's id and
    attempt (``set -u``), which only queuelog work used to set."""
    job = live.producer.enqueue(jtype, {"url": f"{live.url}/healthz"})
    token = live.new_key(f"bash-check-{jtype}", "worker", [jtype])
    env = {**os.environ, "QUEUELOG_URL": live.url, "QUEUELOG_TOKEN": token}
    proc = subprocess.Popen(["bash", os.path.join(ROOT, "examples", "worker.sh"),
                             os.path.join(ROOT, "examples", "check-url.sh")], env=env,
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        done = wait_for(lambda: finished(live, job["id"]), what="the check")
        assert done["status"] == "completed", done.get("error")
        assert done["result"]["status"] == 200
        # Its next long poll runs now: no process of the worker shows the token, and the
        # heartbeat loop of the job it finished left no sleep behind.
        wait_for(lambda: any("curl" in c for c in _session(proc.pid).values()),
                 what="the next long poll")
        time.sleep(0.3)
        assert not [c for c in _session(proc.pid).values() if token in c]
        assert not [c for c in _session(proc.pid).values() if c.startswith("sleep")]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _session(sid: int) -> dict[int, str]:
    """The command lines of the processes in session ``sid`` (orphans included: a child
    reparented to init keeps its session)."""
    out: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                session = int(f.read().rsplit(")", 1)[1].split()[3])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        if session == sid:
            out[int(entry)] = cmdline
    return out


def test_the_readme_client_snippet_runs(live):
    code = readme_block("client-snippet")
    producer = live.new_key("snippet-producer", "producer")
    env = {**os.environ, "PYTHONPATH": ROOT, "QUEUELOG_URL": live.url,
           "PRODUCER_TOKEN": producer, "WORKER_TOKEN": live.tokens["worker"]}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "403 urn:queuelog:problem:forbidden"
    job = next(live.admin.list(type="email"))
    assert job["status"] == "completed" and job["result"] == {"receipt": "sent to ada@example.com"}
    assert f"{job['id']} {{'receipt': 'sent to ada@example.com'}}" in lines


def test_work_refuses_missing_settings_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")}
    env["PYTHONPATH"] = ROOT

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "queuelog", "work", *args],
                              env={**env, **extra}, cwd=tmp_path, capture_output=True,
                              text=True, timeout=60)

    no_url = run("--", "true", QUEUELOG_TOKEN="ql_x")
    assert no_url.returncode == 2 and "QUEUELOG_URL" in no_url.stderr
    no_token = run("--url", "http://127.0.0.1:9", "--", "true")
    assert no_token.returncode == 2 and "QUEUELOG_TOKEN" in no_token.stderr
    missing_file = run("--url", "http://127.0.0.1:9", "--token-file", str(tmp_path / "nope"),
                       "--", "true")
    assert missing_file.returncode == 2 and "token file" in missing_file.stderr
    no_command = run("--url", "http://127.0.0.1:9", "--", "no-such-command-here",
                     QUEUELOG_TOKEN="ql_x")
    assert no_command.returncode == 2 and "no-such-command-here" in no_command.stderr
    assert os.listdir(tmp_path) == []  # the runner wrote nothing where it ran


def test_work_refuses_a_url_or_token_it_cannot_use_in_one_line(tmp_path):
    """A --url httpx cannot parse, or none at all, and a token no key can be (a byte-order
    mark, a second line, bytes that are not UTF-8): exit 2 and one line, not a traceback
    (nor a claim retried for ever)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")}
    env["PYTHONPATH"] = ROOT

    def run(*args: str, token: str = "ql_x", **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "queuelog", "work", *args],
                              env={**env, "QUEUELOG_TOKEN": token, **extra}, cwd=tmp_path,
                              capture_output=True, text=True, timeout=30)

    for url in ("http://[::1", "http://127.0.0.1:abc", "notaurl", "http://"):
        proc = run("--url", url, "--", "true")
        assert proc.returncode == 2, (url, proc.stderr)
        assert "Traceback" not in proc.stderr and "--url" in proc.stderr, url
    bad_post = run("--url", "http://127.0.0.1:9", "--post", "http://[::1")
    assert bad_post.returncode == 2 and "Traceback" not in bad_post.stderr
    assert "--post" in bad_post.stderr
    for name, content in (("bom.token", "\ufeffql_x\n"), ("two.token", "ql_x\nql_y\n")):
        path = tmp_path / name
        path.write_text(content, encoding="utf-8")
        path.chmod(0o600)
        proc = run("--url", "http://127.0.0.1:9", "--token-file", str(path), "--", "true")
        assert proc.returncode == 2, (name, proc.stderr)
        assert "Traceback" not in proc.stderr and "holds characters no API key has" in \
            proc.stderr, name
        path.unlink()
    binary = tmp_path / "binary.token"
    binary.write_bytes(b"\xff\xfe")
    binary.chmod(0o600)
    proc = run("--url", "http://127.0.0.1:9", "--token-file", str(binary), "--", "true")
    assert proc.returncode == 2 and "cannot read the token file" in proc.stderr
    binary.unlink()
    proc = run("--url", "http://127.0.0.1:9", "--", "true", token="ql_\u00e9")
    assert proc.returncode == 2 and "QUEUELOG_TOKEN holds characters" in proc.stderr
    assert os.listdir(tmp_path) == []  # the runner wrote nothing where it ran


def test_a_wrong_url_exits_1_with_one_line(live, work, jtype):
    w = work("--types", jtype, "--", "true", env={"QUEUELOG_URL": f"{live.url}/not-queuelog"})
    assert w.wait(timeout=20) == 1
    lines = w.log().strip().splitlines()
    assert len(lines) == 1 and "404" in lines[0]


def test_a_result_the_server_refuses_fails_the_job_without_retry(live, work, jtype, tmp_path):
    handler = script(tmp_path, "big.sh", """printf '{"blob": "'
head -c 70000 /dev/zero | tr '\\0' a
printf '"}\\n'
""")
    job = live.producer.enqueue(jtype, {}, max_retries=3)
    work("--types", jtype, "--", handler)
    done = wait_for(lambda: finished(live, job["id"]), what="the refusal")
    assert done["status"] == "failed" and done["attempt"] == 1  # no retry: it would repeat
    assert done["error"].startswith("the server refused the result (422)")


# -- the runner as a good citizen (issue 15) -------------------------------------------------

def pids_in(path: Any) -> list[int]:
    """The pids a handler wrote, one a line."""
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def test_a_sigkilled_runner_takes_its_command_and_background_grandchild(live, work, jtype,
                                                                       tmp_path):
    pids = tmp_path / "pids"
    handler = script(tmp_path, "forever.sh", f"""sleep 60 >/dev/null 2>&1 </dev/null &
echo $! >> {pids}
echo $$ >> {pids}
sleep 60
""")
    live.producer.enqueue(jtype, {}, max_retries=0)
    w = work("--types", jtype, "--", handler)
    wait_for(lambda: len(pids_in(pids)) == 2, what="the command and its grandchild")
    os.kill(w.proc.pid, signal.SIGKILL)  # the runner alone: no handler of its can run
    w.wait()
    wait_for(lambda: not any(alive(p) for p in pids_in(pids)), timeout=3,
             what="the orphans to die")


def test_a_background_grandchild_dies_when_its_job_ends(live, work, jtype, tmp_path):
    pids = tmp_path / "pids"
    # Its output redirected, so no pipe of the job's stays open: only the group kill finds it.
    handler = script(tmp_path, "leaves.sh", f"""sleep 60 >/dev/null 2>&1 </dev/null &
echo $! >> {pids}
echo '{{"ok": true}}'
""")
    job = live.producer.enqueue(jtype, {})
    work("--types", jtype, "--", handler)
    done = wait_for(lambda: finished(live, job["id"]), what="completion")
    assert done["status"] == "completed" and done["result"] == {"ok": True}
    [grandchild] = pids_in(pids)
    wait_for(lambda: not alive(grandchild), timeout=3, what="the grandchild to die")


def test_grace_ends_with_sigterm_then_sigkill_5s_later(live, work, jtype, tmp_path):
    got, pids = tmp_path / "got", tmp_path / "pids"
    # Traps SIGTERM (notes it, keeps going): only the SIGKILL 5 s later ends it.
    handler = script(tmp_path, "stubborn.sh", f"""trap 'echo TERM >> {got}' TERM
echo $$ >> {pids}
while true; do sleep 0.1; done
""")
    job = live.producer.enqueue(jtype, {}, max_retries=2)
    w = work("--types", jtype, "--grace", "1", "--", handler)
    wait_for(lambda: pids_in(pids), what="the command to start")
    begun = time.monotonic()
    w.signal(signal.SIGTERM)
    wait_for(got.exists, timeout=5, what="SIGTERM at the end of the grace")
    termed = time.monotonic() - begun
    assert w.proc.poll() is None  # still waiting out the 5 s before SIGKILL
    assert w.wait(timeout=30) == 0
    ended = time.monotonic() - begun
    assert termed >= 0.9 and ended - termed >= 4.5, (termed, ended)
    assert not alive(pids_in(pids)[0])
    now = live.admin.get(job["id"])
    assert now["status"] == "pending" and "killed by signal" not in now["error"]
    assert "stopped" in now["error"]


def test_the_command_cannot_read_the_token_from_its_parent(live, work, jtype, tmp_path):
    dump = tmp_path / "dump"
    handler = script(tmp_path, "peek.sh", f"""cat /proc/$PPID/environ > {dump} 2>/dev/null
tr '\\0' ' ' < /proc/$PPID/cmdline >> {dump}
""")
    job = live.producer.enqueue(jtype, {})
    work("--types", jtype, "--", handler)
    assert wait_for(lambda: finished(live, job["id"]), what="completion")["status"] == "completed"
    seen = dump.read_bytes()
    assert b"queuelog" in seen and b"work" in seen  # it did look at the runner
    assert live.tokens["worker"].encode() not in seen and b"QUEUELOG_TOKEN" not in seen


def test_a_tls_verification_failure_exits_1_with_one_line(work, jtype, tmp_path):
    import ssl
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a self-signed certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        w = work("--types", jtype, "--", "true",
                 env={"QUEUELOG_URL": f"https://localhost:{httpd.server_port}"})
        assert w.wait(timeout=20) == 1
        lines = w.log().strip().splitlines()
        assert len(lines) == 1 and "TLS verification failed" in lines[0], lines
    finally:
        httpd.shutdown()
