"""A turn's ONE record and what a store says back: plain data, importable from any layer.

:mod:`shipagent.store.chats` builds records and :mod:`shipagent.store` writes them; this module
imports neither (nor anything else of the package but the plain :class:`~shipagent.results.Sender`),
so both can name it.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic_ai.messages import ModelMessage

from ..results import Sender

__all__ = [
    "COMMIT_PARTS",
    "CachedChats",
    "CommitReport",
    "Committed",
    "LoadedChat",
    "LogRecord",
    "TurnRecord",
    "TurnWrite",
]

COMMIT_PARTS = ("messages", "history", "transcript", "agentContext", "cards", "ledger")
"""The parts of a turn's commit, in the order every backend writes them."""


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One record of a per-chat log: its ``seq`` (1-based, per chat key) and its JSON object."""

    seq: int
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Committed:
    """Where a chat's message log stands: its last ``seq`` and that record's request id.

    A worker compares this with what it saw last: a different value means another worker
    committed a turn of the chat since, and the in-memory history must be rebuilt.
    """

    seq: int
    request_id: str | None


@dataclass
class TurnRecord:
    """ONE record of a turn: everything its commit writes, decided before anything is written.

    The agent builds it after the tool loop (the compaction decision included: it is pure, see
    ``history.compaction``) and hands it to :meth:`ChatStore.commit`; a durable worker that
    resumes the turn builds the same record and commits it again, which writes only what is
    missing.

    Attributes:
        messages: the turn's new model messages (injections already stripped).
        base_compaction: when the run succeeded only on a compacted history, that history; it
            is written as a compaction record before the turn.
        compaction: the history right after a compaction this turn triggered, written after it.
        tool_calls: ``{"tool", "success", "error"}`` per call, for the agent-context log.
        sent: ``chat_send`` texts, in the order they were said (transcript lines ``via: tool``).
        said: the answer as the transcript records it (``None``: ``output``); ``output`` goes to
            the agent context and the output-box cards.
        seq: the seq of the first of ``messages`` when the chat's messages are numbered (what
            makes compaction summaries expandable); ``None`` writes no numbers.
        base_sources: with ``seq``, the source of each message of ``base_compaction``.
        compaction_sources: with ``seq``, the source of each message of ``compaction``.
        removed: the messages each compaction of the turn removed (the base compaction's first),
            each kept as a ``history`` context file so what left the window stays greppable.
        ledger: the writer of the ledger's records of the turn's requests (a blocking callable
            the ledger prepared; ``None``: nothing to record). Only the files backend keeps a
            ledger; the others ignore it.
        spoken: the turn was said by someone: it gets transcript lines, an agent-context entry
            and output-box cards (a delegate's inherited history is committed with ``False``:
            only its messages).
        fresh: the request id was minted for this turn, so no store can hold it yet: a commit
            need not ask each part first (a caller's or a durable workflow's id always asks).
        sender: who said ``user_text`` (a chat with many speakers); the transcript's user line
            records it. ``None``: the line has no ``sender`` field, as before senders existed.
    """

    chat_key: str
    request_id: str
    user_text: str
    output: str
    messages: builtins.list[ModelMessage]
    sent: builtins.list[str] = field(default_factory=list)
    tool_calls: builtins.list[dict[str, Any]] = field(default_factory=list)
    base_compaction: builtins.list[ModelMessage] | None = None
    compaction: builtins.list[ModelMessage] | None = None
    said: str | None = None
    seq: int | None = None
    base_sources: builtins.list[str] | None = None
    compaction_sources: builtins.list[str] | None = None
    removed: builtins.list[builtins.list[ModelMessage]] = field(default_factory=list)
    ledger: Callable[[], None] | None = None
    spoken: bool = True
    fresh: bool = False
    sender: Sender | None = None

    @property
    def transcript_answer(self) -> str:
        """What the transcript's answer line says."""
        return self.output if self.said is None else self.said

    @property
    def next_seq(self) -> int | None:
        """The seq after the turn's messages (what a compaction record after the turn counts from)."""
        return None if self.seq is None else self.seq + len(self.messages)


TurnWrite = TurnRecord
"""The name :meth:`Stores.commit_turn` took before the store had one record per turn."""


@dataclass
class CommitReport:
    """What :meth:`ChatStore.commit` did.

    Attributes:
        written: the parts (:data:`COMMIT_PARTS`) written now; a part the store already held
            for the request id (an earlier attempt, a replayed durable step) is not among them.
        failed: parts whose write failed after the message log held the turn. The turn is
            committed (the message log is the truth); the transcript and the agent-context log
            are rebuilt from it before the chat's next turn (``history.reconcile``), and a
            re-commit writes what is missing.
        card_ids: the output-box cards written now.
    """

    written: builtins.list[str] = field(default_factory=list)
    failed: dict[str, Exception] = field(default_factory=dict)
    card_ids: builtins.list[str] = field(default_factory=list)

    @property
    def replayed(self) -> bool:
        """The message log held the turn already: the store's history, not the caller's, is the truth."""
        return "messages" not in self.written


@dataclass
class LoadedChat:
    """A chat as :meth:`ChatStore.load` gives it: the history to run on and how it is numbered.

    Attributes:
        messages: the history after the last committed turn (the last compaction + the turns after).
        sources: ``history:<seq>`` / ``summary:<id>`` per message (what the ledger and
            ``context_expand`` name messages by).
        next_seq: the seq the turn's first new message gets.
    """

    messages: builtins.list[ModelMessage]
    sources: builtins.list[str]
    next_seq: int


class CachedChats(Protocol):
    """The agent's in-memory histories, as a store's ``history_sync`` may consult them."""

    def get(self, chat_key: str) -> builtins.list[ModelMessage]: ...

    async def aget(self, chat_key: str) -> builtins.list[ModelMessage]: ...
