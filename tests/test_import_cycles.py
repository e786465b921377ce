"""The package has no import cycles: the module graph built from the source is acyclic.

Every ``import`` counts, also those inside functions (a lazy import only hides a cycle from the
interpreter, not from a reader); imports under ``if TYPE_CHECKING:`` do not, since they never run.
An edge goes to the module named, not to its parent packages: importing ``shipagent.files._ref``
runs ``shipagent/__init__`` first, but that is Python's package machinery, not a dependency the
code chose.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "shipagent"


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, skipping the bodies of ``if TYPE_CHECKING:`` blocks."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def import_graph() -> dict[str, set[str]]:
    """``module -> modules of this package it imports``."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
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


def test_the_graph_sees_the_package() -> None:
    graph = import_graph()
    # the facade loads its public names on first use (importlib, by name): it imports little itself
    assert "shipagent.errors" in graph["shipagent"]
    assert "shipagent.agent" in graph["shipagent.serve._cli"]  # ``from ..agent`` in a sub-package
    assert "shipagent._agent_base" in graph["shipagent.agent"]
    assert "shipagent.config" in graph["shipagent._agent_base"]
    assert "shipagent.handover" in graph["shipagent._agent_base"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_package_has_no_import_cycles() -> None:
    assert find_cycle(import_graph()) is None


def test_handover_never_imports_the_agent() -> None:
    graph = import_graph()
    for name, targets in graph.items():
        if name.startswith("shipagent.handover"):
            assert "shipagent.agent" not in targets, name
