"""The ChatStore: where a project's chats live, behind one async protocol the core owns.

:class:`ChatStore` is what a turn reads and writes: ``load`` (the history to run on, numbered),
``commit`` (ONE :class:`TurnRecord` per turn, idempotent by request id) and the read side. Each
backend below implements it with exactly one commit; :func:`open_stores` picks the project's
from ship.json (Postgres in a durable cluster, else the files).

Underneath, a project's state is five logs — the model-message log (turns and compactions), the
transcript, the agent-context log, the context files (index + contents) and the cards/boxes —
each a small async protocol in the shape of openai-agents' session protocol. :class:`Stores` is a
``ChatStore`` whose logs can also be read one by one (``shipagent migrate`` copies them record by
record); every backend is both:

* :class:`MemoryStores` — everything in memory (tests; the protocol's reference);
* :class:`FileStores` — today's ``.ship/`` JSONL files and ``cardbox.sqlite3``, the default,
  byte-for-byte what the runtime has always written (thin adapters over the existing classes);
* :class:`PgStores` — Postgres (psycopg 3), tables keyed by ``(chat_key, seq)``, context file
  contents in the database, and :meth:`PgStores.commit` writing a whole turn in one
  transaction.

``shipagent migrate --to postgresql://…`` / ``--from postgresql://…`` copies a project's stores
between the two, verifying the counts per chat and store.

    stores = PgStores("postgresql://…")
    await stores.commit(TurnRecord(chat_key, request_id, user_text, output, new_messages))
    history = await stores.messages.rebuild(chat_key)

Beside the backends live the records they keep, as data: the ``.ship/`` logs (:mod:`.logs`,
:mod:`.agent_context`, and :mod:`.reconcile`, which makes them agree after a crash), each chat's
in-memory history (:mod:`.chats`), context files (:mod:`shipagent.store.files`) and cards
(:mod:`shipagent.store.cards`). The tools that work on them are in :mod:`shipagent.tools`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._files import FileStores
    from ._memory import MemoryStores
    from ._migrate import MigrationRow, migrate
    from ._postgres import PgStores
    from ._protocols import COMMIT_PARTS as COMMIT_PARTS
    from ._protocols import (
        AgentContextStore,
        Committed,
        ContextFileStore,
        LogRecord,
        MessageLogStore,
        RecordLog,
        Stores,
        TranscriptStore,
        TurnWrite,
    )
    from ._protocols import ChatStore as ChatStore
    from ._protocols import CommitReport as CommitReport
    from ._protocols import LoadedChat as LoadedChat
    from ._protocols import TurnRecord as TurnRecord
    from ._select import open_stores

_HOME = {
    "AgentContextStore": "_protocols",
    "COMMIT_PARTS": "_protocols",
    "ChatStore": "_protocols",
    "CommitReport": "_protocols",
    "Committed": "_protocols",
    "ContextFileStore": "_protocols",
    "FileStores": "_files",
    "LoadedChat": "_protocols",
    "LogRecord": "_protocols",
    "MemoryStores": "_memory",
    "MessageLogStore": "_protocols",
    "MigrationRow": "_migrate",
    "PgStores": "_postgres",
    "RecordLog": "_protocols",
    "Stores": "_protocols",
    "TranscriptStore": "_protocols",
    "TurnRecord": "_protocols",
    "TurnWrite": "_protocols",
    "migrate": "_migrate",
    "open_stores": "_select",
}
"""Where each name lives: loaded on first use, so a module that needs only the plain records
(``stores._record``: the history layer builds :class:`TurnRecord` s) does not load the backends."""

__all__ = [
    "AgentContextStore",
    "Committed",
    "ContextFileStore",
    "FileStores",
    "LogRecord",
    "MemoryStores",
    "MessageLogStore",
    "MigrationRow",
    "PgStores",
    "RecordLog",
    "Stores",
    "TranscriptStore",
    "TurnWrite",
    "migrate",
    "open_stores",
]
"""The curated surface; :class:`ChatStore`, :class:`TurnRecord`, :class:`CommitReport`,
:class:`LoadedChat` and ``COMMIT_PARTS`` are importable from here too (the core's store protocol
and its records)."""


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value  # later lookups are plain module attributes
    return value
