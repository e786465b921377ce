"""The package has no import cycles: the module graph built from the source is acyclic.

Every ``import`` counts:

- imports under ``if TYPE_CHECKING:`` — they never run, but a module typed against another is
  coupled to it: a lower layer that names ``ShipAgent`` in its signatures depends on the agent as
  much as one that imports it at run time;
- imports inside functions — a lazy import only delays a cycle (and hides it from the
  interpreter's partial-module errors), it does not remove the dependency.

So "nothing below the agent imports it" follows: anything ``shipagent.agent._agent`` reaches that
imported ``shipagent.agent._agent`` back would close a cycle here.

An edge goes to the module named, not to its parent packages: importing ``shipagent.store.files._ref``
runs ``shipagent/__init__`` first, but that is Python's package machinery, not a dependency the
code chose.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import ROOT

PACKAGE = ROOT / "shipagent"


def _modules(package: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement: module level, under ``if TYPE_CHECKING:``, inside functions."""
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """``module -> modules of this package it imports`` for the package at ``package``."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                # ``from . import x`` names the submodule x; ``from .config import X`` the module
                targets = [
                    f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target
                    for alias in node.names
                ]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path ``[a, b, …, a]``, or ``None`` when it is acyclic."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)) is not None:
            return cycle
    return None


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that import each other (strongly connected, two or more), sorted.

    The failure message lists them all, so one run shows every cycle to break, not the first.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan; the package is ~200 modules, recursion is fine
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = [stack.pop()]
            while group[-1] != node:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found)


def _describe(graph: dict[str, set[str]], groups: list[list[str]]) -> str:
    lines = []
    for group in groups:
        lines.append(f"{len(group)} modules import each other:")
        lines.extend(f"  {name} -> {', '.join(sorted(graph[name] & set(group)))}" for name in group)
    return "\n".join(lines)


def _plant(root: Path, files: dict[str, str]) -> Path:
    package = root / "planted"
    for name, text in {"__init__.py": "", **files}.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text, encoding="utf-8")
    return package


def test_the_graph_sees_the_package() -> None:
    graph = import_graph()
    # the facade loads its public names on first use (importlib, by name): it imports little itself
    assert "shipagent.errors" in graph["shipagent"]
    assert (
        "shipagent.agent._agent" in graph["shipagent.hosts.serve._app"]
    )  # ``from ..agent`` in a sub-package
    assert "shipagent.agent._turn" in graph["shipagent.agent._agent"]
    assert "shipagent.config" in graph["shipagent.agent._lifecycle"]
    assert "shipagent.tools.handover._runtime" in graph["shipagent.agent._agent"]
    assert "shipagent.hosts.serve._state" in graph["shipagent.hosts.serve._routes"]  # under TYPE_CHECKING
    assert (
        "shipagent.tools.handover._tools" in graph["shipagent.tools.handover._runtime"]
    )  # inside a function


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert circles({"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"c"}, "e": {"a"}}) == [
        ["a", "b"],
        ["c", "d"],
    ]


def test_a_planted_cycle_is_caught_through_type_checking_and_local_imports(tmp_path: Path) -> None:
    """The whole path, source files to verdict: each kind of import closes a cycle on its own."""
    typed = _plant(
        tmp_path / "typed",
        {
            "low.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .high import High\n",
            "high.py": "from .low import *\n",
        },
    )
    assert circles(import_graph(typed)) == [["planted.high", "planted.low"]]
    local = _plant(
        tmp_path / "local",
        {
            "a.py": "import planted.b\n",
            "sub/__init__.py": "",
            "b.py": "from .sub import c\n",
            "sub/c.py": "def f():\n    from .. import a\n    return a\n",
        },
    )
    assert find_cycle(import_graph(local)) == ["planted.a", "planted.b", "planted.sub.c", "planted.a"]
    clean = _plant(tmp_path / "clean", {"a.py": "from . import b\n", "b.py": "import json\n"})
    assert circles(import_graph(clean)) == []


def test_the_package_has_no_import_cycles() -> None:
    graph = import_graph()
    groups = circles(graph)
    assert not groups, _describe(graph, groups)


def test_handover_never_imports_the_agent() -> None:
    graph = import_graph()
    for name, targets in graph.items():
        if name.startswith("shipagent.tools.handover"):
            assert "shipagent.agent._agent" not in targets, name
