"""shipagent uses pydantic-ai through its public API only.

A private name (``pydantic_ai._utils``, ``pydantic_ai.toolsets._dynamic``, ``_CombinedToolsetTool``)
or an override of a private method (``Agent._build_toolset_list``) can change or vanish in any
pydantic-ai release without a deprecation, and the breakage would be silent: the override simply
stops being called. These checks read every module under ``shipagent/`` — imports with ``ast``
(``TYPE_CHECKING`` blocks included), overrides on the imported classes — so a new use fails here.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import shipagent

PACKAGE = Path(shipagent.__file__).parent


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_method(member: object) -> bool:
    return inspect.isfunction(member) or isinstance(member, (classmethod, staticmethod, property))


def private_imports(source: str) -> list[str]:
    """``pydantic_ai`` imports in ``source`` with a dotted component or imported name starting with ``_``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "pydantic_ai" and any(p.startswith("_") for p in parts):
                    found.append(f"line {node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] != "pydantic_ai":
                continue
            names = [a.name for a in node.names]
            if any(p.startswith("_") for p in parts) or any(n.startswith("_") for n in names):
                found.append(f"line {node.lineno}: from {node.module} import {', '.join(names)}")
    return found


def private_overrides(module_name: str) -> list[str]:
    """Methods of classes defined in ``module_name`` that override a private method of a pydantic-ai base."""
    module = importlib.import_module(module_name)
    found: list[str] = []
    for cls_name, cls in vars(module).items():
        if not inspect.isclass(cls) or cls.__module__ != module_name:
            continue
        for name, member in vars(cls).items():
            if not _is_private(name) or name.startswith("__") or not _is_method(member):
                continue
            for base in cls.__mro__[1:]:
                if base.__module__.split(".")[0] == "pydantic_ai" and name in vars(base):
                    found.append(f"{cls_name}.{name} overrides {base.__module__}.{base.__qualname__}.{name}")
                    break
    return found


def _modules() -> list[tuple[str, Path]]:
    out = []
    for info in pkgutil.walk_packages([str(PACKAGE)], prefix="shipagent."):
        rel = info.name.split(".")[1:]
        path = PACKAGE.joinpath(*rel)
        path = path / "__init__.py" if info.ispkg else path.with_suffix(".py")
        out.append((info.name, path))
    return out


def test_the_walk_sees_the_package() -> None:
    names = {name for name, _ in _modules()}
    assert "shipagent.agent._agent" in names and "shipagent.agent.ledger._store" in names


def test_no_module_imports_a_private_pydantic_ai_name() -> None:
    problems = [
        f"{path.relative_to(PACKAGE.parent)} {hit}"
        for _, path in _modules()
        for hit in private_imports(path.read_text(encoding="utf-8"))
    ]
    assert problems == [], "private pydantic-ai imports:\n" + "\n".join(problems)


def test_no_class_overrides_a_private_pydantic_ai_method() -> None:
    problems = [hit for name, _ in _modules() for hit in private_overrides(name)]
    assert problems == [], "overrides of private pydantic-ai methods:\n" + "\n".join(problems)


def test_the_import_check_catches_each_form() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import pydantic_ai._utils\n"
        "from pydantic_ai.toolsets._dynamic import DynamicToolset\n"
        "from pydantic_ai.toolsets.combined import _CombinedToolsetTool\n"
        "from pydantic_ai.toolsets import FunctionToolset\n"
        "if TYPE_CHECKING:\n"
        "    from pydantic_ai._run_context import RunContext\n"
    )
    hits = private_imports(source)
    assert [h.split(":")[0] for h in hits] == ["line 2", "line 3", "line 4", "line 7"]


def test_the_override_check_catches_a_private_override(tmp_path: Path, monkeypatch: object) -> None:
    import sys

    (tmp_path / "purity_probe.py").write_text(
        "from pydantic_ai import Agent\n"
        "class Probe(Agent[None, str]):\n"
        "    def _build_toolset_list(self, *a, **k):\n"
        "        return super()._build_toolset_list(*a, **k)\n"
        "    def _own_helper(self):\n"
        "        return 1\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        hits = private_overrides("purity_probe")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("purity_probe", None)
    assert hits == ["Probe._build_toolset_list overrides pydantic_ai.agent.Agent._build_toolset_list"]
