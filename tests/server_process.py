"""A real queuelog server in a child process (gunicorn), for the crash and load tests."""
from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from sqlalchemy import create_engine, text

from queuelog.server.store import Store

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_keys(db_url: str, keys: dict[str, str]) -> dict[str, dict[str, str]]:
    """Create the schema and API keys (name -> role); return name -> headers."""
    store = Store(db_url)
    try:
        store.create_schema()
        out = {}
        for name, role in keys.items():
            _, token = store.accounts.create_key(name, role, types=None, max_priority=30)
            out[name] = {"Authorization": f"Bearer {token}",
                         "Content-Type": "application/json"}
        return out
    finally:
        store.close()


def table_rows(db_url: str, sql: str) -> list[Any]:
    """Run one read query against the database directly."""
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(text(sql)).all())
    finally:
        engine.dispose()


class Server:
    """gunicorn serving ``app:app`` on a free loopback port, in its own process group."""

    def __init__(self, db_url: str, log_path: str, *, workers: int = 4, threads: int = 4,
                 env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> None:
        self.db_url = db_url
        self.args = args  # more gunicorn options (e.g. --reuse-port)
        self.log_path = log_path
        self.workers = workers
        self.threads = threads
        self.extra_env = env or {}
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> "Server":
        """Start on a fresh port and wait until /healthz answers."""
        self.port = free_port()
        env = {**os.environ, "QUEUELOG_DATABASE_URL": self.db_url,
               "QUEUELOG_SECRET_KEY": "crash-test-secret", "QUEUELOG_BOOTSTRAP_ADMIN": "false",
               "PYTHONUNBUFFERED": "1", **self.extra_env}
        log = open(self.log_path, "ab")
        # gthread: long polls park a thread, not a whole worker process.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-w", str(self.workers), "-k", "gthread",
             "--threads", str(self.threads), "-b", f"127.0.0.1:{self.port}",
             "--graceful-timeout", "2", *self.args, "app:app"],
            cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log()[-2000:]}")
            try:
                status, _ = request(self.port, "GET", "/healthz", timeout=1)
                if status == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"server did not start: {self.log()[-2000:]}")

    def kill(self) -> None:
        """SIGKILL the whole process group (master and workers) and reap the master."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        """Stop (SIGINT, gunicorn's quick shutdown), then make sure."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGINT)  # quick shutdown: nothing to drain
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()

    def log(self) -> str:
        """Everything the server wrote to stdout and stderr."""
        with open(self.log_path, encoding="utf-8", errors="replace") as fh:
            return fh.read()


def request(port: int, method: str, path: str, body: Any = None,
            headers: dict[str, str] | None = None, timeout: float = 10,
            conn: http.client.HTTPConnection | None = None) -> tuple[int, Any]:
    """One HTTP request; returns (status, decoded JSON or raw text). Raises OSError."""
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body)
        conn.request(method, path, body=data, headers=headers or {})
        resp = conn.getresponse()
        raw = resp.read().decode("utf-8", errors="replace")
        try:
            return resp.status, json.loads(raw) if raw else None
        except ValueError:
            return resp.status, raw
    finally:
        if own:
            conn.close()
