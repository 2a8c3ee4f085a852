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
from typing import Iterable


PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "queuelog"
MAX_TOP_LEVEL = 5  # DESIGN.md: __init__, cli, client (and __main__) beside the worlds' packages


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
API, UI, STORE, ACTIONS = (f"{SERVER}.{room}" for room in ("api", "ui", "store", "actions"))
RULES = [
    Rule("queuelog.model", only=("queuelog.model",)),
    Rule("queuelog.client", only=("queuelog.client", "queuelog.model")),
    Rule("queuelog.worker", only=("queuelog.worker", "queuelog.client", "queuelog.model")),
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
