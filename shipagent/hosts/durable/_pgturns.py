"""Durable turns whose chats live in Postgres: workers with separate ``.ship/`` share every chat.

With ``durable.database`` a ``postgresql://`` URL, a worker's turn reads and writes the chat in
:class:`~shipagent.store.PgStores` instead of the project's ``.ship/`` files:

* before the turn the worker asks the message log where the chat stands
  (:meth:`last_committed`); when its request id is not the one this worker last loaded or
  committed (another worker, on any machine, committed since) or the chat is not in memory, the
  history is rebuilt from Postgres and installed in :attr:`ShipAgent.chats`;
* the commit is the agent's, through :meth:`PgStores.commit`: history (with any compaction records), transcript,
  agent-context entry and output-box cards in ONE transaction, idempotent by request id, so a
  crash mid-commit leaves either all of the turn or none of it, and a resumed turn that runs the
  commit again writes nothing twice. It needs no DBOS step of its own (the file commit on SQLite
  has one, because files are written store by store).

The compaction decision is the agent's, made before the write whatever the store
(:meth:`ChatHistories.plan`), and the removed messages are kept as a ``history`` context file in
the database; the ledger's records of the turn's requests go to this machine's ``.ship/``, as in
plain mode. Messages are numbered (``history:<seq>``) from the records as the message log file
numbers them, so a summary's id resolves on every worker (``context_expand``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from pydantic_ai.messages import ModelMessage

from ...agent.turns import Commit, CommitOutcome, TurnCommit
from ...store import ChatStore, PgStores
from ...tools._deps import TurnStores
from ._hooks import DurableTurnHooks

if TYPE_CHECKING:
    from ...agent._agent import ShipAgent

__all__ = ["PgTurnHooks"]

_UNSEEN = object()


class PgTurnHooks(DurableTurnHooks):
    """The durable hooks of a worker whose chats are in Postgres (one per worker process)."""

    def __init__(self, stores: PgStores) -> None:
        super().__init__()
        self.stores = stores
        self._pg_seen: dict[str, object] = {}
        """Per chat: the last committed request id when this worker last loaded or committed it."""

    async def load(
        self, agent: ShipAgent, chat_key: str, load: Callable[[], Awaitable[list[ModelMessage]]]
    ) -> list[ModelMessage]:
        committed = await self.stores.messages.last_committed(chat_key)
        stale = self._pg_seen.get(chat_key, _UNSEEN) != committed.request_id
        if stale or chat_key not in agent.chats.resident():  # another worker committed, or evicted
            loaded = await self.stores.load(chat_key)
            agent.chats.install(chat_key, loaded.messages, loaded.sources, loaded.next_seq)
            self._pg_seen[chat_key] = committed.request_id
        return await load()

    def tool_stores(self, agent: ShipAgent) -> TurnStores:
        """The history tools read the chat's shared logs in Postgres, not this machine's files."""
        return TurnStores(
            transcript=self.stores.transcript,
            agent_context=self.stores.agent_context,
            message_log=agent.store.message_log_async,  # Postgres in a cluster, awaited on the turn's loop
        )

    def store(self, agent: ShipAgent) -> ChatStore:
        """The cluster's chats: Postgres, whichever worker runs the turn."""
        return self.stores

    async def commit(self, agent: ShipAgent, turn: TurnCommit, commit: Commit) -> CommitOutcome:
        # Not a DBOS step: the commit is one transaction, idempotent by request id, so a
        # replay runs it again, writes nothing and reloads the chat from Postgres — what a
        # recorded step would give back, without the step's two system-database transactions.
        # (A compaction's summary is not asked for again either: see ``TurnWiring.commit``.)
        outcome = await commit(turn, self.stores)
        if outcome[1] is None:  # memory holds the chat up to this turn, as the database does
            self._pg_seen[turn.chat_key] = turn.request_id
        else:  # failed: the next turn rebuilds from Postgres
            self._pg_seen.pop(turn.chat_key, None)
        return outcome
