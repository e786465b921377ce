"""Import paths from before the tree was laid out in layers, kept working.

The packages once lay side by side under ``shipagent`` (``shipagent.serve``, ``shipagent.history``,
``shipagent.stores``, …). They now live in the layer they belong to (``shipagent.hosts.serve``,
``shipagent.window``, ``shipagent.store``, …; the "Words and layers" page of the docs draws them).
Code written against an old path keeps running: importing an old name gives the very module
object of its new home (one module, never a copy, so ``isinstance`` and monkeypatching still
agree), and an old package's submodules follow it. Type checkers do not see these aliases; new
code imports the new paths.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

MOVED = {
    "shipagent.channels": "shipagent.hosts.channels",
    "shipagent.cli": "shipagent.hosts.cli._app",
    "shipagent.context": "shipagent.tools.context",
    "shipagent.durable": "shipagent.hosts.durable",
    "shipagent.execution": "shipagent.tools.execution",
    "shipagent.files": "shipagent.tools.files",
    "shipagent.handover": "shipagent.tools.handover",
    "shipagent.history": "shipagent.window",
    "shipagent.history.agent_context": "shipagent.store.agent_context",
    "shipagent.history.chats": "shipagent.store.chats",
    "shipagent.history.logs": "shipagent.store.logs",
    "shipagent.history.reconcile": "shipagent.store.reconcile",
    "shipagent.instructions": "shipagent.agent.instructions",
    "shipagent.ledger": "shipagent.agent.ledger",
    "shipagent.mcp": "shipagent.tools.mcp",
    "shipagent.models": "shipagent.agent.models",
    "shipagent.serve": "shipagent.hosts.serve",
    "shipagent.skills": "shipagent.tools.skills",
    "shipagent.stores": "shipagent.store",
    "shipagent.turns": "shipagent.agent.turns",
}
"""Old path → new path. A package's old submodules follow it unless listed themselves."""


def new_name(old: str) -> str | None:
    """The new home of ``old``, or None when ``old`` never moved."""
    parts = old.split(".")
    for i in range(len(parts), 1, -1):
        new = MOVED.get(".".join(parts[:i]))
        if new is not None:
            return ".".join([new, *parts[i:]])
    return None


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was imported under its new name."""


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = new_name(fullname) if fullname.startswith("shipagent.") else None
        if new is None:
            return None
        if importlib.util.find_spec(new) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the finder first on ``sys.meta_path``, once.

    First, because the path finder would otherwise load an old package's submodule (say
    ``shipagent.serve._app``) a second time, as a copy, from the new package's folder.
    """
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
