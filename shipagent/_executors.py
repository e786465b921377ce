"""The durable seams' registries and the protocols they hand out, light enough for the facade.

``shipagent/__init__`` registers the durable room here on ``import shipagent`` without loading
pydantic-ai (the facade is lazy so that ``shipagent --help`` starts fast); :mod:`shipagent.turns`
re-exports all of it, and the agent looks a factory up by name only when ship.json asks for it.

This module sits below the agent, so it never names the agent's class: an executor factory is
given the agent that starts it as ``Any``. The room that registers the factory (durable, above
the agent) knows what it is given; nothing here reads it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    from pathlib import Path

    from pydantic_ai.messages import ModelMessage

    from ._steps import StepCallback
    from .config import ShipConfig
    from .files._store import ContextFiles
    from .handover._store import CardBoxStore
    from .history.stores import MessageLog
    from .results import AgentResult

__all__ = [
    "ExecutorFactory",
    "SharedChats",
    "SharedFactory",
    "TurnExecutor",
    "executor_factories",
    "shared_factories",
]


class TurnExecutor(Protocol):
    """Runs whole turns somewhere else (a queue of durable workflows) and returns their results."""

    async def submit(
        self,
        chat_key: str,
        text: str,
        *,
        request_id: str | None,
        on_step: StepCallback | None,
        channel: Any,
        emit: Callable[[Any], Awaitable[None]] | None = None,
    ) -> AgentResult:
        """Run the turn; ``emit`` (from ``run_stream``) takes its run events, ``Done`` excepted."""
        ...


class SharedChats(Protocol):
    """Where a durable cluster's chats live instead of this machine's ``.ship/`` (a database).

    The agent consults it (``ShipAgent.shared``) for what it does outside a worker's turn hooks:
    reading a chat it does not hold, clearing one, keeping a failed turn's ``chat_send`` lines,
    every context file, and handover's cards and boxes (``cards``: the store the workers'
    commits write output boxes to, so delegation on any machine reads and writes the same boxes).
    """

    context_files: ContextFiles
    cards: CardBoxStore

    def history(self, chat_key: str) -> list[ModelMessage]: ...

    def message_log(self, chat_key: str) -> MessageLog: ...

    async def clear(self, chat_key: str, request_id: str) -> None: ...

    async def keep_sent(self, chat_key: str, request_id: str, text: str, sent: Sequence[str]) -> None: ...


ExecutorFactory: TypeAlias = Callable[[Any], AbstractAsyncContextManager["TurnExecutor | None"]]
"""``(the started agent) -> the executor's lifetime``; the agent is ``Any`` (see the module doc)."""
executor_factories: dict[str, ExecutorFactory] = {}
"""Registered by the package facade (``"durable"`` → ``shipagent.durable``, imported lazily)."""

SharedFactory: TypeAlias = "Callable[[Path, ShipConfig], SharedChats | None]"
shared_factories: dict[str, SharedFactory] = {}
"""Registered by the package facade (``"durable"`` → ``shipagent.stores``): where a durable
cluster's chats live when not in ``.ship/`` (``None`` for a project whose chats are the files)."""
