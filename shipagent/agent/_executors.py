"""The durable seams' registries and the protocols they hand out, light enough for the facade.

``shipagent/__init__`` registers the durable room here on ``import shipagent`` without loading
pydantic-ai (the facade is lazy so that ``shipagent --help`` starts fast); :mod:`shipagent.agent.turns`
re-exports all of it, and the agent looks a factory up by name only when ship.json asks for it.

This module sits below the agent, so it never names the agent's class: an executor factory is
given the agent that starts it as ``Any``. The room that registers the factory (durable, above
the agent) knows what it is given; nothing here reads it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    from .._steps import StepCallback
    from ..results import AgentResult
    from ..tools.execution import ReplyChannel

__all__ = [
    "ExecutorFactory",
    "TurnExecutor",
    "executor_factories",
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
        channel: ReplyChannel | None,
        emit: Callable[[Any], Awaitable[None]] | None = None,
    ) -> AgentResult:
        """Run the turn; ``emit`` (from ``run_stream``) takes its run events, ``Done`` excepted."""
        ...


ExecutorFactory: TypeAlias = Callable[[Any], AbstractAsyncContextManager["TurnExecutor | None"]]
"""``(the started agent) -> the executor's lifetime``; the agent is ``Any`` (see the module doc)."""
executor_factories: dict[str, ExecutorFactory] = {}
"""Registered by the package facade (``"durable"`` → ``shipagent.hosts.durable``, imported lazily)."""
