"""The tree is laid out in layers, and imports only go down them.

From the bottom::

    base     the modules directly under shipagent/ (errors, config, chatkeys, events, results,
             jsonl, ...): what every layer shares
    window   shipagent/window: pure functions of what one model request carries
    store    shipagent/store: ChatStore and its backends, the logs, context files and cards as data
    tools    shipagent/tools: the tool execution context every tool reads (execution), builtins,
             context files, hand-over, MCP, context providers
    agent    shipagent/agent: ShipAgent, the turn, the commit, the models, the ledger
    hosts    shipagent/hosts: cli, serve, durable, channels

A module imports its own layer or lower ones, and that counts every import: at run time, inside a
function, or under ``if TYPE_CHECKING:`` (a module typed against a higher layer depends on it as
much as one that calls it). ``shipagent/__init__.py``, the public face, stands above all the
layers.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import ROOT

PACKAGE = ROOT / "shipagent"
LAYERS = ["base", "window", "store", "tools", "agent", "hosts"]


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in LAYERS else "base"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_only(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            ids.update(id(sub) for sub in ast.walk(node))
    return ids


def imports() -> list[tuple[str, str, bool]]:
    """``(importer, imported, type_only)`` for every import between modules of the package."""
    modules = _modules()
    found = []
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        type_only = _type_only(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                targets = [
                    f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target for a in node.names
                ]
            else:
                continue
            for target in targets:
                if target in modules and target != name:
                    found.append((name, target, id(node) in type_only))
    return found


def test_imports_go_down_the_layers() -> None:
    wrong = []
    for importer, imported, _type_only in imports():
        if importer == "shipagent":
            continue
        low, high = LAYERS.index(layer_of(importer)), LAYERS.index(layer_of(imported))
        if high <= low:
            continue
        wrong.append(f"{importer} ({layer_of(importer)}) imports {imported} ({layer_of(imported)})")
    assert wrong == []


def test_the_tree_shows_the_layers() -> None:
    folders = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert folders == ["agent", "hosts", "store", "tools", "window"]
    hosts = sorted(p.name for p in (PACKAGE / "hosts").iterdir() if (p / "__init__.py").exists())
    assert hosts == ["channels", "cli", "durable", "serve"]


def test_the_check_sees_a_wrong_import(tmp_path: Path) -> None:
    """The walk is not vacuous: it finds the imports this package really has, in every layer."""
    edges = imports()
    pairs = {(layer_of(a), layer_of(b)) for a, b, _ in edges}
    assert ("hosts", "agent") in pairs and ("agent", "tools") in pairs and ("tools", "store") in pairs
    assert ("store", "window") in pairs and ("window", "base") in pairs
    assert layer_of("shipagent.hosts.serve._app") == "hosts" and layer_of("shipagent.config") == "base"
