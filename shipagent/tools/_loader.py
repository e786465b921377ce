"""``tools.modules`` in ship.json: user toolsets imported by module name."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from pydantic_ai.toolsets import AbstractToolset

from ..config import ShipConfig
from ..errors import ConfigError

__all__ = ["load_tool_module", "load_tool_modules"]


def load_tool_modules(config: ShipConfig, *, project_root: Path | None = None) -> list[AbstractToolset[Any]]:
    """Import each module of ship.json ``tools.modules`` and return its ``toolset``, in order.

    A module is any importable name; with ``project_root`` given, modules beside ship.json
    (``mytools.py``) are importable too, without the user editing ``PYTHONPATH``. The project root
    is on ``sys.path`` only while importing, so it does not shadow other imports for the process,
    and it goes at the end: a file a command dropped beside ship.json (``csv.py``) never shadows a
    module of the standard library or an installed package that the tools import for the first time.

    Raises:
        ConfigError: naming ``tools.modules[i]`` when a module cannot be imported, has no
            ``toolset``, or its ``toolset`` is not a pydantic-ai toolset.
    """
    added = False
    if project_root is not None:
        entry = str(project_root.resolve())
        if entry not in sys.path:
            sys.path.append(entry)  # last: see the docstring
            added = True
    try:
        return [load_tool_module(name, index) for index, name in enumerate(config.tools.modules)]
    finally:
        if added:
            sys.path.remove(str(project_root.resolve()))  # type: ignore[union-attr]


def load_tool_module(name: str, index: int) -> AbstractToolset[Any]:
    """Import ``tools.modules[index]`` (``name``) and return its ``toolset``.

    Raises:
        ConfigError: naming ``tools.modules[index]``: the import failed, there is no ``toolset``, or
            it is not a pydantic-ai toolset.
    """
    key = f"tools.modules[{index}]"
    try:
        module = importlib.import_module(name)
    except Exception as exc:
        raise ConfigError(f"{key}: cannot import '{name}': {type(exc).__name__}: {exc}", path=key) from exc
    toolset = getattr(module, "toolset", None)
    if toolset is None:
        raise ConfigError(
            f"{key}: module '{name}' has no 'toolset' attribute (define toolset = FunctionToolset([...]) in it)",
            path=key,
        )
    if not isinstance(toolset, AbstractToolset):
        raise ConfigError(
            f"{key}: '{name}.toolset' is a {type(toolset).__name__}, not a pydantic-ai toolset", path=key
        )
    return toolset
