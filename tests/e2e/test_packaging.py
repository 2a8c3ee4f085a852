"""An installed wheel, not only the editable checkout, carries the pages and serves them."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import zipfile

import pytest

from helpers import copy_source, once_per_run

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Renders /ui/ from whatever ``queuelog`` is first on sys.path; prints where its pages live.
RENDER = """
import base64, sys
import queuelog
from queuelog.server.auth import hash_password
app = queuelog.create_app({"DATABASE_URL": "sqlite:///" + sys.argv[1], "SECRET_KEY": "x",
                           "BOOTSTRAP_ADMIN": False})
app.extensions["queuelog.store"].accounts.create_user("ann", hash_password("pw"), "viewer")
auth = {"Authorization": "Basic " + base64.b64encode(b"ann:pw").decode()}
page = app.test_client().get("/ui/", headers=auth)
assert page.status_code == 200 and b"queuelog" in page.data, page.status_code
import queuelog.server; print(queuelog.server.TEMPLATES)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """Build the wheel from a copy of the tree (the checkout stays untouched).

    pip builds it as it builds the editable install: setuptools in an isolated environment.
    """
    def build(folder: pathlib.Path) -> None:
        src, out = copy_source(folder / "src", "queuelog", "templates"), folder / "dist"
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                               "-q", "-w", str(out), str(src)],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
    (built,) = (once_per_run(tmp_path_factory, "server-wheel", build) / "dist").glob(
        "queuelog-*.whl")
    return built


def test_the_wheel_carries_every_template_static_file_and_migration(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = {f"queuelog/templates/{p.relative_to(ROOT / 'templates').as_posix()}"
                 for p in (ROOT / "templates").rglob("*.html")}
    static = {f"queuelog/server/static/{p.name}" for p in (ROOT / "queuelog" / "server" / "static").iterdir()
              if p.is_file()}
    migrations = {f"queuelog/{p.relative_to(ROOT / 'queuelog').as_posix()}"
                  for p in (ROOT / "queuelog" / "server" / "migrations").rglob("*")
                  if p.is_file() and p.suffix in (".py", ".mako")}
    assert templates and static and migrations
    wanted = templates | static | migrations
    assert wanted <= names, sorted(wanted - names)


def test_an_installed_wheel_renders_the_dashboard(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-c", RENDER, str(tmp_path / "q.sqlite3")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(site / "queuelog" / "templates")
