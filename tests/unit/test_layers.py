"""DESIGN.md's layers hold: no import cycle inside queuelog, no upward arrow, a small top level.

Every import counts, at module level, inside functions and under ``TYPE_CHECKING`` (read with
``ast``, as /work/shared/tools/import_cycles.py does): a lazy import that dodges a cycle at run
time is still a knot in the design. A package importing its own submodules is not a cycle.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import pathlib
import subprocess
import sys
from typing import Iterable

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "queuelog"
MAX_TOP_LEVEL = 5  # DESIGN.md: __init__, cli (and __main__) beside client/ and the worlds' packages


@dataclasses.dataclass(frozen=True)
class Rule:
    """Modules under ``layer`` import only ``only`` (when given) and never ``never``."""

    layer: str
    only: tuple[str, ...] = ()
    never: tuple[str, ...] = ()

    def breaks(self, imported: str) -> bool:
        """Whether an import of ``imported`` from inside this layer points the wrong way."""
        if self.only and not within(imported, self.only):
            return True
        return within(imported, self.never)


SERVER = "queuelog.server"
CLIENT = "queuelog.client"
API, UI, STORE, ACTIONS = (f"{SERVER}.{room}" for room in ("api", "ui", "store", "actions"))
RULES = [
    Rule("queuelog.model", only=("queuelog.model",)),
    Rule(CLIENT, only=(CLIENT, "queuelog.model")),
    Rule("queuelog.worker", only=("queuelog.worker", CLIENT, "queuelog.model")),
    Rule(STORE, never=(API, UI, ACTIONS, f"{SERVER}.requests.openapi")),
    Rule(ACTIONS, never=(API, UI)),
    Rule(f"{SERVER}.requests", never=(API, UI, STORE, ACTIONS)),
    Rule(API, never=(UI,)),
    Rule(UI, never=(API,)),
]


@dataclasses.dataclass(frozen=True)
class Edge:
    """One import statement: ``importer`` line ``line`` imports module ``imported``."""

    importer: str
    imported: str
    line: int

    def __str__(self) -> str:
        return f"{self.importer} (line {self.line}) imports {self.imported}"


def within(module: str, prefixes: Iterable[str]) -> bool:
    """Whether ``module`` is one of ``prefixes`` or lies inside one of them."""
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def modules(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """Every module of the package at ``root``, by dotted name."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def targets(mods: dict[str, pathlib.Path], name: str, node: ast.AST) -> set[str]:
    """The package's modules one import statement names (``from p import m``: p.m if a module)."""
    if isinstance(node, ast.Import):
        named = [alias.name for alias in node.names]
    else:
        assert isinstance(node, ast.ImportFrom)
        base = node.module or ""
        if node.level:
            package = name if mods[name].name == "__init__.py" else name.rpartition(".")[0]
            kept = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join(kept + ([node.module] if node.module else []))
        # `from p import m` imports the module p.m when there is one, else a name of p itself
        named = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
    # `import a.b.c` binds a, but the module it loads (and depends on) is a.b.c
    return {n for n in named if n in mods and n != name}


@functools.cache  # one walk per test process, shared by every case below
def edges(root: pathlib.Path = PACKAGE) -> tuple[Edge, ...]:
    """Every import of one of the package's modules by another, with its line."""
    mods = modules(root)
    found: list[Edge] = []
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found += [Edge(name, t, node.lineno) for t in sorted(targets(mods, name, node))]
    return tuple(found)


def graph(found: Iterable[Edge]) -> dict[str, set[str]]:
    """Who imports whom, leaving out a package's imports of its own submodules."""
    out: dict[str, set[str]] = {}
    for e in found:
        if not e.imported.startswith(e.importer + "."):
            out.setdefault(e.importer, set()).add(e.imported)
    return out


def path_between(arrows: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """A shortest import chain from ``start`` to ``goal``, or None when there is none."""
    came: dict[str, str | None] = {start: None}
    todo = [start]
    for here in todo:  # breadth first: todo grows while it is walked
        for there in sorted(arrows.get(here, ())):
            if there not in came:
                came[there] = here
                todo.append(there)
    if goal not in came:
        return None
    chain = [goal]
    while (back := came[chain[-1]]) is not None:
        chain.append(back)
    return chain[::-1]


def find_cycle(arrows: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules, the first repeated at the end), or None."""
    for start in sorted(arrows):
        for nxt in sorted(arrows[start]):
            chain = path_between(arrows, nxt, start)
            if chain is not None:
                return [start] + chain
    return None


def describe(chain: list[str], found: tuple[Edge, ...]) -> str:
    """A cycle as lines ``a (line n) imports b``, one per arrow."""
    lines = {(e.importer, e.imported): e.line for e in reversed(found)}
    return "\n  ".join(str(Edge(a, b, lines[a, b])) for a, b in zip(chain, chain[1:]))


def test_no_import_cycle() -> None:
    """No import cycle inside queuelog beyond the known ones (each is a case below)."""
    found = edges()
    chain = find_cycle(graph(found))
    assert chain is None, "import cycle:\n  " + describe(chain or [], found)


def upward(found: Iterable[Edge]) -> list[Edge]:
    """The imports that break a rule of RULES."""
    return [e for e in found for rule in RULES
            if within(e.importer, [rule.layer]) and rule.breaks(e.imported)]


def test_no_upward_import() -> None:
    """Imports point down DESIGN.md's layers."""
    wrong = upward(edges())
    assert not wrong, "upward import:\n  " + "\n  ".join(map(str, wrong))


def test_top_level_stays_small() -> None:
    """The package's top level holds at most a handful of modules."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL, f"{len(top)} modules at queuelog's top level: {top}"


def test_walker_sees_lazy_relative_and_type_checking_imports(tmp_path: pathlib.Path) -> None:
    """The walker finds imports inside functions, relative ones and TYPE_CHECKING ones."""
    pkg = tmp_path / "queuelog"
    (pkg / "model").mkdir(parents=True)
    (pkg / "__init__.py").write_text("def make():\n    from queuelog import cli\n")
    (pkg / "cli.py").write_text("from typing import TYPE_CHECKING\n"
                                "if TYPE_CHECKING:\n    from .model import jobs\n")
    (pkg / "model" / "__init__.py").write_text("")
    (pkg / "model" / "jobs.py").write_text("import os\n\ndef f():\n    from .. import cli\n")
    found = edges(pkg)
    assert {(e.importer, e.imported, e.line) for e in found} == {
        ("queuelog", "queuelog.cli", 2), ("queuelog.cli", "queuelog.model.jobs", 3),
        ("queuelog.model.jobs", "queuelog.cli", 4)}
    assert find_cycle(graph(found)) == ["queuelog.cli", "queuelog.model.jobs", "queuelog.cli"]
    assert [str(e) for e in upward(found)] == [
        "queuelog.model.jobs (line 4) imports queuelog.cli"]


# -- ranks: every server and client module has one, and imports point to a lower rank -----
# Ranks, top to bottom (DESIGN.md's layers); each holds rooms, a module or a package by
# prefix; "queuelog.server" itself is the package's __init__ alone (create_app), and
# "queuelog.client" the client's (the public import path). An import points to its own rank
# or a lower one (RULES above keep api/ and ui/ apart within theirs). A new module must be
# placed here.
RANKS: list[tuple[str, ...]] = [
    (SERVER, f"{SERVER}.app", f"{SERVER}.gunicorn_hooks", f"{SERVER}.commands",  # the app
     f"{SERVER}.access_commands"),
    (API, UI),                                   # views: parse, call actions, serialize
    (f"{SERVER}.schedules",),                    # the ticker: a caller of actions
    (ACTIONS,),                                  # THE gate
    (f"{SERVER}.auth", f"{SERVER}.retention", f"{SERVER}.metrics", f"{SERVER}.tracing",
     f"{SERVER}.longpoll", f"{SERVER}.wakeups", f"{SERVER}.instance", f"{SERVER}.db"),
    (f"{SERVER}.throttle", f"{SERVER}.errors", f"{SERVER}.config", f"{SERVER}.sanitize",
     f"{SERVER}.jsonout"),
    (STORE, f"{SERVER}.migrations"),
    (f"{SERVER}.requests.openapi",),             # the document, built from the declarations
    (f"{SERVER}.requests", f"{SERVER}.cron"),
]
# The client's parts (DESIGN.md: worker/ -> client): the calls over the retry rules over the
# HTTP over the errors, so the transport never learns what a job or an answer is.
CLIENT_RANKS: list[tuple[str, ...]] = [
    (CLIENT,),                                   # re-exports: ``from queuelog.client import``
    (f"{CLIENT}.api",),                          # Client: one method per API call
    (f"{CLIENT}.operating",),                    # the repair and operating calls it inherits
    (f"{CLIENT}.retries",),                      # what is retried, and for how long
    (f"{CLIENT}.transport",),                    # one kept-alive pool, JSON in and out
    (f"{CLIENT}.errors",),                       # what it raises
]
PACKAGES = {SERVER: RANKS, CLIENT: CLIENT_RANKS}


def room_of(module: str, package: str = SERVER) -> tuple[int, str] | None:
    """The rank (0: top) and room of a module of ``package``, by its longest listed prefix."""
    best: tuple[int, str] | None = None
    for rank, rooms in enumerate(PACKAGES[package]):
        for room in rooms:
            fits = module == room if room == package else within(module, [room])
            if fits and (best is None or len(room) > len(best[1])):
                best = (rank, room)
    return best


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_has_a_rank(package: str) -> None:
    """A module DESIGN.md's layers do not place (the actions package's included) fails here."""
    unranked = [m for m in modules(PACKAGE)
                if within(m, [package]) and room_of(m, package) is None]
    assert not unranked, f"{package} modules without a rank: {unranked}"
    assert all(room_of(m) == (3, ACTIONS) for m in modules(PACKAGE) if within(m, [ACTIONS]))


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_point_down_the_ranks(package: str) -> None:
    """A server (client) module imports only its own rank's modules or a lower rank's."""
    wrong = []
    for e in edges():
        here, there = room_of(e.importer, package), room_of(e.imported, package)
        if here is not None and there is not None and there[0] < here[0]:
            wrong.append(str(e))
    assert not wrong, "import up the ranks:\n  " + "\n  ".join(wrong)


# -- the views and commands reach the store only through actions ---------------------------
GATED = (API, UI, f"{SERVER}.commands", f"{SERVER}.access_commands")


def store_reaches(root: pathlib.Path = PACKAGE) -> list[str]:
    """Where a view or command touches the store itself: ``get_store``, the app's
    ``queuelog.store`` extension, or a store module below the package (engine, migrate...).
    Importing the store package's data types (NewJob, ScheduleState) is no access."""
    mods = modules(root)
    found = []
    for name, path in mods.items():
        if not within(name, GATED):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            line = getattr(node, "lineno", 0)
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                below = [t for t in targets(mods, name, node)
                         if within(t, [STORE]) and t != STORE]
                found += [f"{name} (line {line}) imports {t}" for t in below]
            touched = (node.id if isinstance(node, ast.Name) else
                       node.attr if isinstance(node, ast.Attribute) else
                       node.name if isinstance(node, ast.alias) else
                       node.value if isinstance(node, ast.Constant) else None)
            if touched in ("get_store", "queuelog.store"):
                found.append(f"{name} (line {line}) uses {touched}")
    return found


def test_views_and_commands_reach_the_store_only_through_actions() -> None:
    """Every read and write of api/, ui/ and the commands goes through an action (DESIGN.md)."""
    reaches = store_reaches()
    assert not reaches, "store reached past the actions:\n  " + "\n  ".join(reaches)


def test_the_store_check_sees_calls_imports_and_the_extension(tmp_path: pathlib.Path) -> None:
    """The check finds get_store (called or imported), a store submodule, the extension."""
    server = tmp_path / "queuelog" / "server"
    (server / "store").mkdir(parents=True)
    (server / "api").mkdir()
    for init in (tmp_path / "queuelog", server, server / "store", server / "api"):
        (init / "__init__.py").write_text("")
    (server / "store" / "engine.py").write_text("")
    (server / "api" / "v.py").write_text(
        "from queuelog.server.store import NewJob, get_store\n"
        "from queuelog.server.store import engine\n"
        "def f(app):\n    return app.extensions['queuelog.store'], get_store().clock()\n")
    (server / "commands.py").write_text("from queuelog.server.store import NewJob\n")
    assert sorted(store_reaches(tmp_path / "queuelog")) == [
        "queuelog.server.api.v (line 1) uses get_store",
        "queuelog.server.api.v (line 2) imports queuelog.server.store.engine",
        "queuelog.server.api.v (line 4) uses get_store",
        "queuelog.server.api.v (line 4) uses queuelog.store"]


def test_the_store_loads_without_flask() -> None:
    """The SQL layer is the server's lowest world: it imports no Flask (DESIGN.md)."""
    code = ("import sys, queuelog.server.store; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('flask', 'werkzeug')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=PACKAGE.parent).stdout.strip()
    assert out == "[]"
