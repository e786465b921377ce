"""What one run hands its tools: pydantic-ai's ``deps`` of a shipagent run.

A turn runs its pydantic-ai agent with ``deps=TurnDeps(...)``, so every tool, toolset wrapper and
capability that pydantic-ai gives a ``RunContext[TurnDeps]`` reads the run from ``ctx.deps`` — a
parameter, not ambient state. :func:`shipagent.current_tool_context` remains for tools written
without a ``ctx`` parameter (user tools, context providers); it reads the same
:class:`~shipagent.tools.execution.ToolExecutionContext`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pydantic_ai import RunContext

from .execution import ToolExecutionContext, current_tool_context, running_tool_context

if TYPE_CHECKING:
    from ..store.logs import MessageLog

__all__ = ["RecordTail", "TurnDeps", "TurnStores", "deps_of", "run_of"]


class RecordTail(Protocol):
    """What the history tools need of a store's per-chat log (``RecordLog.last``)."""

    async def last(self, chat_key: str, count: int, *, skip: int = 0) -> list[dict[str, Any]]: ...


@dataclass(frozen=True, slots=True)
class TurnStores:
    """Where the history tools read a chat's logs when they are not the ``.ship/`` files.

    ``None`` everywhere (the default) means the project's files; a durable worker whose chats
    live in Postgres sets all three (its turn hooks' :meth:`~shipagent.agent.turns.TurnHooks.tool_stores`).

    Attributes:
        transcript: the shared transcript ``chat_load_history`` reads.
        agent_context: the shared agent-context log ``agent_load_context`` reads.
        message_log: reads the chat's message log that ``context_expand`` pages (awaited on the run's loop).
    """

    transcript: RecordTail | None = None
    agent_context: RecordTail | None = None
    message_log: Callable[[str], Awaitable[MessageLog]] | None = None


FILE_STORES = TurnStores()
"""The default: every log is the project's ``.ship/`` file."""


@dataclass(frozen=True, slots=True)
class TurnDeps:
    """The ``deps`` of one shipagent run (``RunContext[TurnDeps]``).

    Attributes:
        tool: the run's :class:`~shipagent.tools.execution.ToolExecutionContext` (chat key, request id,
            project, injections, approvals) — the same object ``current_tool_context()`` returns.
        stores: where the history tools read this chat's logs.
    """

    tool: ToolExecutionContext
    stores: TurnStores = FILE_STORES

    @property
    def chat_key(self) -> str:
        """The conversation this run belongs to."""
        return self.tool.chat_key


def deps_of(ctx: RunContext[Any]) -> TurnDeps:
    """The run's :class:`TurnDeps`; for a builtin tool run by a plain pydantic-ai agent (no
    ``deps``) inside :func:`~shipagent.tools.execution.use_tool_context`, that context over the files.

    Raises:
        ToolContextError: neither (a tool called outside any run).
    """
    if isinstance(ctx.deps, TurnDeps):
        return ctx.deps
    return TurnDeps(current_tool_context())


def run_of(ctx: RunContext[Any]) -> ToolExecutionContext | None:
    """The run's :class:`~shipagent.tools.execution.ToolExecutionContext`, ``None`` outside any run.

    For toolset wrappers: ``ctx.deps`` in a shipagent run, else the context a plain pydantic-ai
    agent runs in (:func:`~shipagent.tools.execution.use_tool_context`), else ``None``.
    """
    return ctx.deps.tool if isinstance(ctx.deps, TurnDeps) else running_tool_context()
