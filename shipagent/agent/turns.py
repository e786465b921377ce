"""Seams where a turn's effects run: inline by default, as recorded steps in durable mode.

The core (``agent.py``) reads top to bottom the same way in both modes. It asks its
:class:`TurnHooks` to wrap the model and the toolsets, to load the chat's history and to commit the
turn; the default hooks do exactly what the plain runtime always did. Durable mode
(``shipagent.hosts.durable``) plugs in hooks that record the model requests, the tools with effects and
the commit as DBOS steps, and a :class:`TurnExecutor` that queues whole turns. The core never
imports the durable room: the package facade registers it in :data:`executor_factories`, and the
agent looks it up by name only when ship.json turns durable mode on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model
from pydantic_ai.toolsets import AbstractToolset

from ..tools._deps import FILE_STORES, TurnStores
from ._executors import TurnExecutor, executor_factories

if TYPE_CHECKING:
    from ..store import ChatStore
    from ..window.compaction import CompactionResult

__all__ = [
    "Commit",
    "CommitOutcome",
    "TurnCommit",
    "TurnExecutor",
    "TurnHooks",
    "executor_factories",
]


@dataclass
class TurnCommit:
    """Everything a successful turn writes, so the write can be recorded, checked and replayed."""

    chat_key: str
    request_id: str
    text: str
    said: str
    output: str
    records: list[Any]
    sent: list[str]
    base: list[ModelMessage]
    new: list[ModelMessage]
    base_compaction: CompactionResult | None


CommitOutcome = tuple["CompactionResult | None", "Exception | None"]
"""What a commit did: the compaction it triggered, or the exception that kept the turn from sticking."""

Commit = Callable[[TurnCommit, "ChatStore"], Awaitable[CommitOutcome]]
"""The agent's commit: builds the turn's one record and hands it to the store it is given."""


AgentT = TypeVar("AgentT")
"""The agent the hooks are handed: the durable room's hooks take a ``ShipAgent``. This module sits
below the agent and never names its class; the default hooks do not look at it."""


class TurnHooks(Generic[AgentT]):
    """The default: every effect runs inline, exactly as in a plain (non-durable) agent."""

    def request_id(self, given: str | None, fresh: Callable[[], str]) -> str:
        """The turn's request id: the caller's, else a fresh one."""
        return given or fresh()

    def model(self, model: Model) -> Model:
        """The model the tool loop calls (durable mode records each request)."""
        return model

    def toolsets(self, toolsets: Sequence[AbstractToolset[Any]]) -> list[AbstractToolset[Any]]:
        """The toolsets the tool loop offers (durable mode runs tools with effects as steps)."""
        return list(toolsets)

    async def load(
        self, agent: AgentT, chat_key: str, load: Callable[[], Awaitable[list[ModelMessage]]]
    ) -> list[ModelMessage]:
        """The chat's history at the start of the turn."""
        return await load()

    def tool_stores(self, agent: AgentT) -> TurnStores:
        """Where the turn's history tools read the chat's logs (the run's ``deps.stores``)."""
        return FILE_STORES

    def store(self, agent: AgentT) -> ChatStore:
        """Where the turn's chat lives: the agent's store (a Postgres worker: the cluster's)."""
        found: ChatStore = getattr(agent, "store")  # noqa: B009 - the agent's type is not named here
        return found

    async def commit(self, agent: AgentT, turn: TurnCommit, commit: Commit) -> CommitOutcome:
        """Write the turn's record to the store (idempotent by request id: durable mode replays it)."""
        return await commit(turn, self.store(agent))
