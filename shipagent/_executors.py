"""The registry of turn executors, in a module light enough for the package facade to import.

``shipagent/__init__`` registers the durable room here on ``import shipagent`` without loading
pydantic-ai (the facade is lazy so that ``shipagent --help`` starts fast); :mod:`shipagent.turns`
re-exports the registry, and the agent looks a factory up by name only when ship.json asks for it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from pathlib import Path

    from .agent import ShipAgent
    from .config import ShipConfig
    from .turns import SharedChats, TurnExecutor

__all__ = ["ExecutorFactory", "SharedFactory", "executor_factories", "shared_factories"]

ExecutorFactory: TypeAlias = "Callable[[ShipAgent], AbstractAsyncContextManager[TurnExecutor | None]]"
executor_factories: dict[str, ExecutorFactory] = {}
"""Registered by the package facade (``"durable"`` → ``shipagent.durable``, imported lazily)."""

SharedFactory: TypeAlias = "Callable[[Path, ShipConfig], SharedChats | None]"
shared_factories: dict[str, SharedFactory] = {}
"""Registered by the package facade (``"durable"`` → ``shipagent.stores``): where a durable
cluster's chats live when not in ``.ship/`` (``None`` for a project whose chats are the files)."""
