"""Durable turns whose chats live in Postgres: workers with separate ``.ship/`` share every chat.

With ``durable.database`` a ``postgresql://`` URL, a worker's turn reads and writes the chat in
:class:`~shipagent.stores.PgStores` instead of the project's ``.ship/`` files:

* before the turn the worker asks the message log where the chat stands
  (:meth:`last_committed`); when its request id is not the one this worker last loaded or
  committed (another worker, on any machine, committed since) or the chat is not in memory, the
  history is rebuilt from Postgres and installed in :attr:`ShipAgent.chats`;
* the commit is :meth:`PgStores.commit_turn`: history (with any compaction records), transcript,
  agent-context entry and output-box cards in ONE transaction, idempotent by request id, so a
  crash mid-commit leaves either all of the turn or none of it, and a resumed turn that runs the
  commit again writes nothing twice. It needs no DBOS step of its own (the file commit on SQLite
  has one, because files are written store by store).

The compaction decision is the file commit's (:class:`ChatHistories` thresholds, the model
summarizer, the compaction hooks that keep the removed messages as a context file); the ledger's
records of the turn's requests are flushed after the commit, as in plain mode. Messages are
numbered (``history:<seq>``) from the records as the message log file numbers them, so a
summary's id resolves on every worker (``context_expand``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anyio
from pydantic_ai.messages import ModelMessage

from .._deps import TurnStores
from .._steps import call_outcomes
from ..history.compaction import CompactionResult
from ..history.injections import strip_injections
from ..stores import PgStores, TurnWrite
from ..stores._shared import load_numbered
from ..turns import CommitOutcome, TurnCommit
from ._hooks import DurableTurnHooks

if TYPE_CHECKING:
    from ..agent import ShipAgent

__all__ = ["PgTurnHooks", "commit_to_postgres"]

_UNSEEN = object()


async def commit_to_postgres(agent: ShipAgent, stores: PgStores, turn: TurnCommit) -> CommitOutcome:
    """Write ``turn`` to Postgres in one transaction; returns the compaction it triggered or the failure.

    Decides compaction exactly like :meth:`ChatHistories.commit` (same thresholds, same
    summarizer), so a chat compacts at the same point whichever store holds it.
    """
    chats = agent.chats
    key = turn.chat_key
    new = strip_injections(turn.new)  # injections live for one run
    replayed = False
    history = [*turn.base, *new]
    # message seqs exactly as ChatHistories.commit numbers them, so summaries get expandable ids
    before, sources, first_seq = chats.turn_numbering(key, turn.base, len(new), turn.base_compaction)
    done: CompactionResult | None = None
    if len(history) > chats.config.in_memory_max_messages:
        # a replay of a turn that committed (per-chat order: nothing of the chat after it) does not
        # ask the summarizer again for a compaction already written; it reloads, as below
        replayed = (await stores.messages.last_committed(key)).request_id == turn.request_id
        body = None if replayed else await chats._model_summary(key, history)
        done = chats.compaction_of(history, sources, body)
    final_sources = done.sources(sources) if done is not None else sources
    write = TurnWrite(
        chat_key=key,
        request_id=turn.request_id,
        user_text=turn.text,
        output=turn.output,
        messages=new,
        sent=list(turn.sent),
        tool_calls=call_outcomes(turn.records),
        base_compaction=turn.base if turn.base_compaction is not None else None,
        compaction=done.history if done is not None else None,
        said=turn.said,
        seq=first_seq,
        base_sources=before if turn.base_compaction is not None else None,
        compaction_sources=final_sources if done is not None else None,
    )
    try:
        cards = [] if replayed else await stores.commit_turn(write)
    except Exception as exc:  # the database refused: nothing of the turn is visible (one transaction)
        return None, exc
    if not cards:  # an earlier attempt of this turn already committed it (a replay): reload
        chats.install(key, *await load_numbered(stores, agent.paths, key))
        return None, None
    for result in (turn.base_compaction, done):
        if result is not None:  # the removed messages become a local context file
            await anyio.to_thread.run_sync(chats._run_hooks, key, result)
    flush = agent._ledger.flush(key, turn.request_id, turn.new)
    if flush is not None:
        await anyio.to_thread.run_sync(flush)
    chats.install(key, done.history if done is not None else history, final_sources, first_seq + len(new))
    return done, None


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
            agent.chats.install(chat_key, *await load_numbered(self.stores, agent.paths, chat_key))
            self._pg_seen[chat_key] = committed.request_id
        return await load()

    def tool_stores(self, agent: ShipAgent) -> TurnStores:
        """The history tools read the chat's shared logs in Postgres, not this machine's files."""
        return TurnStores(
            transcript=self.stores.transcript,
            agent_context=self.stores.agent_context,
            message_log=agent.shared.message_log if agent.shared is not None else None,
        )

    async def commit(
        self, agent: ShipAgent, turn: TurnCommit, commit: Callable[[TurnCommit], Awaitable[CommitOutcome]]
    ) -> CommitOutcome:
        # Not a DBOS step: ``commit_turn`` is one transaction, idempotent by request id, so a
        # replay runs it again, writes nothing and reloads the chat from Postgres — what a
        # recorded step would give back, without the step's two system-database transactions.
        # (A compaction's summary is not asked for again either: see ``commit_to_postgres``.)
        outcome = await commit_to_postgres(agent, self.stores, turn)
        if outcome[1] is None:  # memory holds the chat up to this turn, as the database does
            self._pg_seen[turn.chat_key] = turn.request_id
        else:  # failed: the next turn rebuilds from Postgres
            self._pg_seen.pop(turn.chat_key, None)
        return outcome
