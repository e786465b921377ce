"""The per-chat logs under ``.ship/``: transcript, model-message log, agent-context log.

:class:`~shipagent.store.FileStores`, the default store, writes a turn through them.

All three are append-only JSONL (``shipagent.jsonl``), one file per chat key, so a turn costs a
few appends whatever the length of the chat. Only the agent-context log is ever rewritten (its
window, see :mod:`shipagent.store.agent_context`), and then through a temp file and a rename.

The model-message log holds two kinds of records:

* ``{"t": "turn", "requestId", "messages": [...]}`` — the messages one committed turn added;
* ``{"t": "compaction", "requestId", "history": [...]}`` — the whole in-memory history right after
  a compaction (summary + kept tail), so a restarted process rebuilds ``[summary, …recent]`` by
  reading backwards to the last compaction record and replaying the turns after it, never the
  whole file. Messages compacted away stay in earlier turn records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from .. import jsonl
from ..chatkeys import ShipPaths
from ..results import Sender
from ._appends import cached_paths, now_iso
from .agent_context import AgentContextLog, agent_context_entry, agent_context_summary

__all__ = [
    "AgentContextLog",
    "MessageLog",
    "Transcript",
    "agent_context_entry",
    "agent_context_summary",
    "compaction_record",
    "now_iso",
    "transcript_records",
    "undelivered_record",
]

log = logging.getLogger("shipagent.window")


_RAW = "\x00messages\x00"  # a placeholder no JSON string value can contain unescaped
_RAW_JSON = b'"\\u0000messages\\u0000"'


def dump_messages(messages: list[ModelMessage]) -> list[Any]:
    return ModelMessagesTypeAdapter.dump_python(messages, mode="json")  # type: ignore[no-any-return]


def load_messages(data: Any) -> list[ModelMessage]:
    return ModelMessagesTypeAdapter.validate_python(data)


def record_messages(record: Any, field: str, path: Path) -> list[ModelMessage] | None:
    """The messages a message-log record holds under ``field``, or ``None`` if it is not a valid record.

    A line that parses as JSON but is not a record (``{"t": "turn"}``, ``"messages": "oops"``, a
    message of a kind this version does not know) is skipped with a warning, exactly like a torn
    line: one damaged record must not make a whole chat unreadable.
    """
    try:
        return load_messages(record[field])
    except (KeyError, TypeError, ValueError, ValidationError) as exc:
        rid = record.get("requestId") if isinstance(record, dict) else None
        log.warning(
            "%s: skipping a %r record that is not valid (request %s): %s",
            path,
            record.get("t") if isinstance(record, dict) else None,
            rid,
            str(exc).splitlines()[0][:200],
        )
        return None


def compaction_record(
    request_id: str,
    history: list[ModelMessage],
    sources: Sequence[str] | None = None,
    next_seq: int | None = None,
) -> dict[str, Any]:
    """A ``compaction`` record; with each message's source and the seq counter when numbered."""
    record: dict[str, Any] = {"t": "compaction", "ts": now_iso(), "requestId": request_id}
    record["history"] = dump_messages(history)
    if sources is not None and next_seq is not None:
        record["sources"], record["nextSeq"] = list(sources), next_seq
    return record


def transcript_records(
    chat_key: str,
    request_id: str,
    user_text: str,
    output: str,
    sent: Sequence[str],
    *,
    recovered: bool = False,
    sender: Sender | None = None,
) -> list[dict[str, Any]]:
    """A turn's transcript lines, in the order it was said: the user, ``chat_send`` texts, the answer.

    ``sender`` (a chat with many speakers) is recorded on the user line as ``"sender": {"id",
    "name"}``, after the text; without one the line is exactly what it always was.
    """
    base: dict[str, Any] = {"v": 1, "ts": now_iso(), "chatKey": chat_key, "requestId": request_id}
    if recovered:
        base["recovered"] = True
    user: dict[str, Any] = {**base, "role": "user", "text": user_text}
    if sender is not None:
        user["sender"] = sender.to_json()
    lines = [user]
    lines.extend({**base, "role": "assistant", "text": t, "via": "tool"} for t in sent)
    if output:
        lines.append({**base, "role": "assistant", "text": output})
    return lines


def undelivered_record(chat_key: str, request_id: str, reason: str) -> dict[str, Any]:
    """The transcript line saying turn ``request_id``'s answer never reached the chat.

    A line of its own (the transcript is append-only: the answer's line is already written), with
    ``role: "system"`` and ``event: "undelivered"``, so history tools that read only the user and
    assistant lines pass over it and a channel's ``/status`` can count it after a restart.
    """
    return {
        "v": 1,
        "ts": now_iso(),
        "chatKey": chat_key,
        "requestId": request_id,
        "role": "system",
        "event": "undelivered",
        "text": reason,
    }


class Transcript:
    """``.ship/chats/<key>/history.jsonl``: what the user and the assistant said, in order."""

    def __init__(self, paths: ShipPaths) -> None:
        self.path: Callable[[str], Path] = cached_paths(paths.transcript)

    def append_turn(
        self,
        chat_key: str,
        request_id: str,
        user_text: str,
        output: str,
        *,
        sent: Sequence[str] = (),
        recovered: bool = False,
        sender: Sender | None = None,
    ) -> None:
        """One turn, in the order it was said: the user, ``chat_send`` texts, the answer.

        Written with a single append, so a crash never leaves half a turn. ``recovered`` marks
        entries rebuilt from the message log after a crash (see ``history.reconcile``).
        """
        lines = transcript_records(
            chat_key, request_id, user_text, output, sent, recovered=recovered, sender=sender
        )
        jsonl.append_lines(self.path(chat_key), lines)

    def append_undelivered(self, chat_key: str, request_id: str, reason: str) -> None:
        """Record that turn ``request_id``'s answer could not be delivered (see :func:`undelivered_record`)."""
        jsonl.append_line(self.path(chat_key), undelivered_record(chat_key, request_id, reason))

    def last(self, chat_key: str, count: int) -> list[dict[str, Any]]:
        """The newest ``count`` entries, oldest first; a line that is not an entry is skipped."""
        out: list[dict[str, Any]] = []
        for entry in jsonl.iter_objects_backward(self.path(chat_key)):
            if (
                isinstance(entry, dict)
                and isinstance(entry.get("role"), str)
                and isinstance(entry.get("text"), str)
            ):
                out.append(entry)
                if len(out) >= count:
                    break
        out.reverse()
        return out


class MessageLog:
    """``.ship/chats/<key>/messages.jsonl``: every committed model message, plus compactions."""

    def __init__(self, paths: ShipPaths) -> None:
        self.path: Callable[[str], Path] = cached_paths(paths.message_log)

    def append_turn(
        self, chat_key: str, request_id: str, messages: list[ModelMessage], *, seq: int | None = None
    ) -> None:
        """Append a committed turn; ``seq`` is its first message's sequence number."""
        record: dict[str, Any] = {"t": "turn", "ts": now_iso(), "requestId": request_id}
        if seq is not None:
            record["seq"] = seq
        record["messages"] = _RAW  # must stay the last key: the line is split at it below
        # The messages go straight from pydantic's serializer into the line: no Python-object
        # round trip (dump to dicts, then json.dumps) on every turn.
        head, _, tail = jsonl.dumps(record).rpartition(_RAW_JSON)
        jsonl.append_raw(self.path(chat_key), head + ModelMessagesTypeAdapter.dump_json(messages) + tail)

    def append_compaction(
        self,
        chat_key: str,
        request_id: str,
        history: list[ModelMessage],
        *,
        sources: Sequence[str] | None = None,
        next_seq: int | None = None,
    ) -> None:
        """Append the history right after a compaction, with each message's source and the counter."""
        jsonl.append_line(self.path(chat_key), compaction_record(request_id, history, sources, next_seq))

    def rebuild(self, chat_key: str) -> list[ModelMessage]:
        """The chat's in-memory history as it was after the last committed turn.

        Reads backwards to the newest compaction record, then replays the turns after it.
        """
        path = self.path(chat_key)
        turns: list[list[ModelMessage]] = []
        base: list[ModelMessage] = []
        for record in jsonl.iter_objects_backward(path):
            if not isinstance(record, dict):
                continue
            if record.get("t") == "compaction":
                found = record_messages(record, "history", path)
                if found is None:  # a damaged compaction: keep reading back to the one before
                    continue
                base = found
                break
            if record.get("t") == "turn" and (messages := record_messages(record, "messages", path)):
                turns.append(messages)
        history = list(base)
        for messages in reversed(turns):
            history.extend(messages)
        return history

    # -- message seqs; kept apart from rebuild on purpose ---------------------------

    def sources(self, chat_key: str) -> tuple[list[str], int]:
        """``(source of each message of the rebuilt history, next seq)``.

        A source is ``history:<seq>`` (the message's stable sequence number in this chat) or
        ``summary:<id>``. Reads backwards to the newest compaction like :meth:`rebuild`, looking
        only at the seq fields. Files written before seqs existed get implicit ones: every turn
        message numbered in file order (one forward read, only for such files).
        """
        counts: list[tuple[int | None, int]] = []
        base: list[str] = []
        next_seq: int | None = 0
        for record in self.records_backward(chat_key):
            if not isinstance(record, dict):
                continue
            if record.get("t") == "compaction":
                got, nxt = record.get("sources"), record.get("nextSeq")
                if isinstance(got, list) and isinstance(nxt, int):
                    base, next_seq = [str(x) for x in got], nxt
                else:  # written before seqs (or a /clear of that time): number from the start
                    return self._implicit_sources(chat_key)
                break
            if record.get("t") == "turn":
                seq = record.get("seq")
                messages = record.get("messages")
                counts.append(
                    (
                        seq if isinstance(seq, int) else None,
                        len(messages) if isinstance(messages, list) else 0,
                    )
                )
        out = list(base)
        for seq, count in reversed(counts):
            if seq is None:
                return self._implicit_sources(chat_key)
            out.extend(f"history:{seq + i}" for i in range(count))
            next_seq = seq + count
        return out, next_seq or 0

    def _implicit_sources(self, chat_key: str) -> tuple[list[str], int]:
        """Seqs for a log with records from before seqs: turn messages numbered in file order."""
        current: list[str] = []
        counter = 0
        for record in self.records_forward(chat_key):
            if not isinstance(record, dict):
                continue
            if record.get("t") == "turn":
                seq = record.get("seq")
                start = seq if isinstance(seq, int) else counter
                count = len(record.get("messages") or [])
                current.extend(f"history:{start + i}" for i in range(count))
                counter = start + count
            elif record.get("t") == "compaction":
                got = record.get("sources")
                history = record.get("history") or []
                if isinstance(got, list):
                    current = [str(x) for x in got]
                else:  # the kept tail is the newest messages; a leading summary has no seq
                    tail = current[-(len(history) - 1) :] if len(history) > 1 else []
                    current = (["summary:legacy"] if history else []) + tail
                    if len(current) != len(history):
                        current = [f"history:@{n}" for n in range(len(history))]
                if isinstance(record.get("nextSeq"), int):
                    counter = record["nextSeq"]
        return current, counter

    def records_backward(self, chat_key: str) -> Iterator[Any]:
        """The chat's records, newest first (what :meth:`sources`, :meth:`expand` and :meth:`find` read).

        A durable cluster's stores subclass this to read the same records from Postgres.
        """
        return jsonl.iter_objects_backward(self.path(chat_key))

    def records_forward(self, chat_key: str) -> list[Any]:
        """The chat's records, oldest first (only logs written before message seqs need them)."""
        return jsonl.read_all(self.path(chat_key))

    def expand(self, chat_key: str, summary_id: str) -> list[ModelMessage]:
        """The messages a compaction summary replaced, verbatim as they were committed.

        Reads the summary's seq range from its metadata (any compaction record holding it), then
        the turn records holding those seqs. Raises ``KeyError`` for an unknown summary id.
        """
        span: tuple[int, int] | None = None
        found: dict[int, Any] = {}
        for record in self.records_backward(chat_key):
            if not isinstance(record, dict):
                continue
            if span is None and record.get("t") == "compaction":
                span = _summary_span(record.get("history"), summary_id)
            elif record.get("t") == "turn" and isinstance(record.get("seq"), int):
                for i, message in enumerate(record.get("messages") or []):
                    found[record["seq"] + i] = message
                if span is not None and found and min(found) <= span[0]:
                    break
        if span is None:
            raise KeyError(summary_id)
        return load_messages([found[n] for n in range(span[0], span[1] + 1) if n in found])

    def find(
        self, chat_key: str, sources: Sequence[str], request_id: str
    ) -> tuple[list[ModelMessage], list[ModelMessage]]:
        """``(messages named by sources, messages of turn request_id)``, read backwards (for the ledger).

        Raises ``KeyError`` naming the first source or the turn that is not in the log.
        """
        wanted_seqs = {
            int(v) for k, _, v in (x.partition(":") for x in sources) if k == "history" and v.isdigit()
        }
        wanted_ids = {v for k, _, v in (x.partition(":") for x in sources) if k == "summary"}
        by_source: dict[str, Any] = {}
        turn: list[Any] | None = None
        for record in self.records_backward(chat_key):
            if not isinstance(record, dict):
                continue
            if record.get("t") == "turn":
                if turn is None and record.get("requestId") == request_id:
                    turn = record.get("messages") or []
                seq = record.get("seq")
                if isinstance(seq, int):
                    for i, message in enumerate(record.get("messages") or []):
                        if seq + i in wanted_seqs:
                            by_source[f"history:{seq + i}"] = message
            elif record.get("t") == "compaction" and record.get("history"):
                head = record["history"][0]
                info = (head.get("metadata") or {}).get("shipagent") if isinstance(head, dict) else None
                if isinstance(info, dict) and info.get("id") in wanted_ids:
                    by_source.setdefault(f"summary:{info['id']}", head)
            if turn is not None and len(by_source) == len(set(sources)):
                break
        if turn is None:
            raise KeyError(f"turn {request_id}")
        missing = [x for x in sources if x not in by_source]
        if missing:
            raise KeyError(missing[0])
        return load_messages([by_source[x] for x in sources]), load_messages(turn)


def _summary_span(history: Any, summary_id: str) -> tuple[int, int] | None:
    if not isinstance(history, list) or not history or not isinstance(history[0], dict):
        return None
    info = (history[0].get("metadata") or {}).get("shipagent") or {}
    if isinstance(info, dict) and info.get("id") == summary_id:
        lo, hi = info.get("fromSeq"), info.get("toSeq")
        if isinstance(lo, int) and isinstance(hi, int):
            return lo, hi
    return None
