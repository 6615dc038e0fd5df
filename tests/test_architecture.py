"""The layering rules of the code base, checked from the source with ``ast``.

The rules (see docs/architecture.md):

- no import cycle between modules of ``crdt_state`` or ``sync``, counting every
  import (also those under ``TYPE_CHECKING`` and inside functions);
- ``crdt_state`` never imports ``sync``, ``websockets`` or an asyncio server;
- the merge planner imports nothing that (transitively) imports ``pycrdt``;
- ``sync.wire`` imports (transitively) neither ``websockets`` nor ``asyncio``;
- ``sync.server`` and ``sync.client`` never import each other;
- no module imports an underscore name (a private module or a private member)
  from another top-level package;
- no module of ``crdt_state`` or ``sync`` is longer than :data:`MAX_LINES` lines (small
  modules, one idea each).

Each rule is a pure function of an import graph, so the tests below also feed
it small graphs that break it: a rule that could never fail proves nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("crdt_state", "sync")
SERVER_LIBS = ("websockets", "aiohttp", "http.server", "socketserver", "uvicorn", "starlette")
MAX_LINES = 400


@dataclass(frozen=True)
class Import:
    """One imported module (``target``), with the names taken from it (``names``)."""

    target: str
    names: tuple[str, ...]


Graph = Mapping[str, tuple[Import, ...]]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(path: Path) -> tuple[Import, ...]:
    """Every import in the file, wherever it stands."""
    module = module_name(path)
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(Import(alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, path.name == "__init__.py", node)
            found.append(Import(target, tuple(a.name for a in node.names)))
    return tuple(found)


def project_graph() -> dict[str, tuple[Import, ...]]:
    graph: dict[str, tuple[Import, ...]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            graph[module_name(path)] = imports_of(path)
    return graph


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _targets(graph: Graph, imp: Import) -> list[str]:
    """The modules an import loads: ``from pkg import mod`` loads ``pkg.mod``, and ``pkg``
    itself only when it also takes a name that is not a submodule."""
    subs = [f"{imp.target}.{n}" for n in imp.names if f"{imp.target}.{n}" in graph]
    if len(subs) < len(imp.names) or not imp.names:
        subs.append(imp.target)
    return subs


def _edges(graph: Graph, module: str) -> Iterator[str]:
    """Project modules that ``module`` imports (its own package parents left out)."""
    for imp in graph.get(module, ()):
        for target in _targets(graph, imp):
            if target in graph and target != module and target not in _parents(module):
                yield target


def _parents(module: str) -> Iterator[str]:
    parts = module.split(".")
    for i in range(1, len(parts)):
        yield ".".join(parts[:i])


def cycles(graph: Graph) -> list[list[str]]:
    """Import cycles between project modules (a package's ``__init__`` re-exporting its
    own submodules is not a cycle: importing a submodule runs its parent first anyway)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in _edges(graph, module):
            if module in _parents(target):
                continue
            if state.get(target) == 1:
                cycle = [*stack[stack.index(target) :], target]
                if cycle not in found:
                    found.append(cycle)
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return found


def reachable(graph: Graph, start: str, within: str) -> dict[str, str]:
    """Every module imported from ``start``, directly or through modules of ``within``:
    ``{module: importer}``. Modules outside ``within`` are listed, not followed (the
    rules of their own package judge them)."""
    seen: dict[str, str] = {}
    todo = [start]
    while todo:
        module = todo.pop()
        for imp in graph.get(module, ()):
            for target in _targets(graph, imp):
                if target == module or target in _parents(module) or target in seen:
                    continue
                seen[target] = module
                if target in graph and _within(target, within):
                    todo.append(target)
    return seen


def forbidden_imports(graph: Graph, package: str, banned: Iterable[str]) -> list[str]:
    """Direct imports of any ``banned`` module by a module of ``package``."""
    bad = []
    for module, imps in graph.items():
        if not _within(module, package):
            continue
        for imp in imps:
            for ban in banned:
                if _within(imp.target, ban):
                    bad.append(f"{module} imports {imp.target}")
    return bad


def transitive_imports(graph: Graph, start: str, within: str, banned: Iterable[str]) -> list[str]:
    """``banned`` modules reached from ``start`` through ``within``, with their importer."""
    bans = tuple(banned)
    return sorted(
        f"{importer} imports {target}"
        for target, importer in reachable(graph, start, within).items()
        if any(_within(target, ban) for ban in bans)
    )


def private_imports(graph: Graph) -> list[str]:
    """Imports of an underscore module or name from another top-level package."""
    bad = []
    for module, imps in graph.items():
        home = module.split(".")[0]
        for imp in imps:
            if imp.target.split(".")[0] == home or imp.target.split(".")[0] not in PACKAGES:
                continue
            parts = imp.target.split(".")
            private = [p for p in parts if p.startswith("_") and not p.startswith("__")]
            private += [n for n in imp.names if n.startswith("_") and not n.startswith("__")]
            if private:
                bad.append(f"{module} imports {', '.join(private)} from {imp.target}")
    return bad


def planner_modules(graph: Graph) -> list[str]:
    return [
        m for m in graph if _within(m, "crdt_state") and m.split(".")[-1].strip("_") == "planner"
    ]


def oversized(files: Iterable[Path], limit: int = MAX_LINES) -> list[str]:
    """The files longer than ``limit`` lines, as ``"path: n lines"``."""
    bad = []
    for path in files:
        count = len(path.read_text(encoding="utf-8").splitlines())
        name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        if count > limit:
            bad.append(f"{name}: {count} lines")
    return bad


def violations(graph: Graph) -> list[str]:
    """Every broken rule, as readable lines (empty when the graph is clean)."""
    out = [" -> ".join(c) for c in cycles(graph)]
    out += forbidden_imports(graph, "crdt_state", ("sync", *SERVER_LIBS))
    for planner in planner_modules(graph):
        out += transitive_imports(graph, planner, "crdt_state", ("pycrdt",))
    for wire in [m for m in graph if _within(m, "sync.wire")]:
        out += transitive_imports(graph, wire, "sync.wire", ("websockets", "asyncio"))
    out += forbidden_imports(graph, "sync.server", ("sync.client",))
    out += forbidden_imports(graph, "sync.client", ("sync.server",))
    out += private_imports(graph)
    return out


# -- the project itself ---------------------------------------------------------------


def test_the_project_keeps_every_rule() -> None:
    graph = project_graph()
    assert "crdt_state" in graph and "sync" in graph
    assert violations(graph) == []


def test_the_layers_the_rules_speak_of_exist() -> None:
    graph = project_graph()
    assert planner_modules(graph), "the merge planner module is missing"
    for layer in ("sync.wire", "sync.server", "sync.client"):
        assert layer in graph, f"{layer} is missing"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_is_small(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert len(files) > 10
    assert oversized(files) == []


# -- each rule fails on a graph that breaks it ---------------------------------------------


def g(**edges: list[str]) -> dict[str, tuple[Import, ...]]:
    """A graph from ``module=[imported, ...]`` (``__`` in a keyword stands for a dot)."""
    graph: dict[str, tuple[Import, ...]] = {}
    for name, targets in edges.items():
        graph[name.replace("__", ".")] = tuple(Import(t, ()) for t in targets)
    for imps in list(graph.values()):
        for imp in imps:
            if imp.target.split(".")[0] in PACKAGES:
                graph.setdefault(imp.target, ())
    return graph


CLEAN = g(
    crdt_state=["crdt_state.planner"],
    crdt_state__planner=["crdt_state.paths"],
    crdt_state__state=["crdt_state.planner", "pycrdt"],
    sync__wire=["sync.wire.codec"],
    sync__wire__codec=["crdt_state"],
    sync__server=["sync.wire", "websockets", "asyncio"],
    sync__client=["sync.wire", "websockets", "asyncio"],
)


def test_a_clean_graph_passes() -> None:
    assert violations(CLEAN) == []


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"crdt_state.paths": ["crdt_state.state"]}, "crdt_state.state"),  # a cycle
        ({"crdt_state.state": ["sync.client"]}, "imports sync.client"),
        ({"crdt_state.state": ["websockets.asyncio.server"]}, "imports websockets"),
        ({"crdt_state.paths": ["pycrdt"]}, "imports pycrdt"),  # planner -> paths -> pycrdt
        ({"sync.wire.codec": ["asyncio"]}, "imports asyncio"),
        ({"sync.wire.codec": ["websockets.frames"]}, "imports websockets"),
        ({"sync.server": ["sync.client"]}, "sync.server imports sync.client"),
        ({"sync.client": ["sync.server.hub"]}, "sync.client imports sync.server"),
        ({"sync.client": ["crdt_state._state"]}, "imports _state from crdt_state._state"),
    ],
)
def test_each_rule_fails_on_a_violation(extra: dict[str, list[str]], expected: str) -> None:
    graph = dict(CLEAN)
    for module, targets in extra.items():
        graph[module] = (*graph.get(module, ()), *(Import(t, ()) for t in targets))
        for t in targets:
            if t.split(".")[0] in PACKAGES:
                graph.setdefault(t, ())
    found = violations(graph)
    assert any(expected in line for line in found), found


def test_a_private_name_from_another_package_is_refused() -> None:
    graph = dict(CLEAN)
    graph["sync.client"] = (Import("crdt_state.state", ("_merge_now",)),)
    graph["crdt_state.state"] = ()
    assert violations(graph) == ["sync.client imports _merge_now from crdt_state.state"]


def test_a_long_module_is_refused(tmp_path: Path) -> None:
    at_limit, over = tmp_path / "at_limit.py", tmp_path / "over.py"
    at_limit.write_text("x = 1\n" * MAX_LINES, encoding="utf-8")
    over.write_text("x = 1\n" * (MAX_LINES + 1), encoding="utf-8")
    assert oversized([at_limit, over]) == [f"{over}: {MAX_LINES + 1} lines"]


def test_relative_imports_resolve(tmp_path: Path) -> None:
    node = ast.parse("from ..wire import codec\nfrom . import hub").body
    first, second = node
    assert isinstance(first, ast.ImportFrom) and isinstance(second, ast.ImportFrom)
    assert _resolve("sync.server.room", False, first) == "sync.wire"
    assert _resolve("sync.server", True, second) == "sync.server"
