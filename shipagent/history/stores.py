"""The per-chat stores under ``.ship/``: transcript, model-message log, agent-context log.

All three are append-only JSONL (``shipagent.jsonl``), one file per chat key, so a turn costs a
few appends whatever the length of the chat. Only the agent-context log is ever rewritten (its
window), and then through a temp file and a rename.

The model-message log holds two kinds of records:

* ``{"t": "turn", "requestId", "messages": [...]}`` — the messages one committed turn added;
* ``{"t": "compaction", "requestId", "history": [...]}`` — the whole in-memory history right after
  a compaction (summary + kept tail), so a restarted process rebuilds ``[summary, …recent]`` by
  reading backwards to the last compaction record and replaying the turns after it, never the
  whole file. Messages compacted away stay in earlier turn records.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from .. import jsonl
from ..chatkeys import ShipPaths

_REMEMBERED_COUNTS = 4096  # entry counts of the most recently used chats' agent-context logs

__all__ = ["AgentContextLog", "MessageLog", "Transcript", "now_iso"]


def now_iso() -> str:
    """The current UTC time as ISO 8601 with milliseconds and a ``Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


_RAW = "\x00messages\x00"  # a placeholder no JSON string value can contain unescaped
_RAW_JSON = b'"\\u0000messages\\u0000"'


def dump_messages(messages: list[ModelMessage]) -> list[Any]:
    return ModelMessagesTypeAdapter.dump_python(messages, mode="json")  # type: ignore[no-any-return]


def load_messages(data: Any) -> list[ModelMessage]:
    return ModelMessagesTypeAdapter.validate_python(data)


class Transcript:
    """``.ship/chats/<key>/history.jsonl``: what the user and the assistant said, in order."""

    def __init__(self, paths: ShipPaths) -> None:
        self._paths = paths

    def path(self, chat_key: str) -> Path:
        return self._paths.transcript(chat_key)

    def append(self, chat_key: str, request_id: str, role: str, text: str, *, via: str | None = None) -> None:
        entry: dict[str, Any] = {
            "v": 1,
            "ts": now_iso(),
            "chatKey": chat_key,
            "requestId": request_id,
            "role": role,
            "text": text,
        }
        if via:
            entry["via"] = via
        jsonl.append_line(self.path(chat_key), entry)

    def append_turn(
        self,
        chat_key: str,
        request_id: str,
        user_text: str,
        output: str,
        *,
        sent: Sequence[str] = (),
    ) -> None:
        """One turn, in the order it was said: the user, ``chat_send`` texts, the answer.

        Written with a single append, so a crash never leaves half a turn.
        """
        ts = now_iso()
        base = {"v": 1, "ts": ts, "chatKey": chat_key, "requestId": request_id}
        lines = [{**base, "role": "user", "text": user_text}]
        lines.extend({**base, "role": "assistant", "text": t, "via": "tool"} for t in sent)
        if output:
            lines.append({**base, "role": "assistant", "text": output})
        jsonl.append_lines(self.path(chat_key), lines)

    def last(self, chat_key: str, count: int) -> list[dict[str, Any]]:
        return jsonl.read_last(self.path(chat_key), count)


class MessageLog:
    """``.ship/chats/<key>/messages.jsonl``: every committed model message, plus compactions."""

    def __init__(self, paths: ShipPaths) -> None:
        self._paths = paths

    def path(self, chat_key: str) -> Path:
        return self._paths.message_log(chat_key)

    def append_turn(self, chat_key: str, request_id: str, messages: list[ModelMessage]) -> None:
        record = {"t": "turn", "ts": now_iso(), "requestId": request_id, "messages": _RAW}
        # The messages go straight from pydantic's serializer into the line: no Python-object
        # round trip (dump to dicts, then json.dumps) on every turn.
        head, _, tail = jsonl.dumps(record).rpartition(_RAW_JSON)  # "messages" is the last key
        jsonl.append_raw(self.path(chat_key), head + ModelMessagesTypeAdapter.dump_json(messages) + tail)

    def append_compaction(self, chat_key: str, request_id: str, history: list[ModelMessage]) -> None:
        record = {
            "t": "compaction",
            "ts": now_iso(),
            "requestId": request_id,
            "history": dump_messages(history),
        }
        jsonl.append_line(self.path(chat_key), record)

    def rebuild(self, chat_key: str) -> list[ModelMessage]:
        """The chat's in-memory history as it was after the last committed turn.

        Reads backwards to the newest compaction record, then replays the turns after it.
        """
        turns: list[dict[str, Any]] = []
        base: list[ModelMessage] = []
        for record in jsonl.iter_objects_backward(self.path(chat_key)):
            if not isinstance(record, dict):
                continue
            if record.get("t") == "compaction":
                base = load_messages(record["history"])
                break
            if record.get("t") == "turn":
                turns.append(record)
        history = list(base)
        for record in reversed(turns):
            history.extend(load_messages(record["messages"]))
        return history


class AgentContextLog:
    """``.ship/memory/agent-context/<key>.jsonl``: one execution summary per run (seed 002 §2.3).

    Past ``window`` entries the older ones are merged into one summary entry and the newest
    ``window - 1`` are kept, by rewriting to a temp file and renaming it into place.
    """

    def __init__(self, paths: ShipPaths, *, window: int = 200) -> None:
        self._paths = paths
        self.window = window
        self._counts: OrderedDict[str, int] = OrderedDict()  # recent chats only (a miss re-counts)

    def path(self, chat_key: str) -> Path:
        return self._paths.agent_context(chat_key)

    def append(
        self,
        chat_key: str,
        request_id: str,
        user_text: str,
        output: str,
        tool_calls: list[dict[str, Any]],
    ) -> None:
        entry = {
            "v": 1,
            "ts": now_iso(),
            "chatKey": chat_key,
            "requestId": request_id,
            "userPreview": user_text[:2000],
            "outputPreview": output[:2000],
            "toolCalls": [
                {
                    "tool": c["tool"],
                    "success": c["success"],
                    "error": (c.get("error") or None) and str(c["error"])[:200],
                }
                for c in tool_calls
            ],
        }
        path = self.path(chat_key)
        jsonl.append_line(path, entry)
        count = self._counts.get(chat_key)
        if count is None:
            count = len(jsonl.read_all(path))
        else:
            count += 1
        if count > self.window:
            count = self._compact(chat_key)
        self._counts[chat_key] = count
        self._counts.move_to_end(chat_key)
        while len(self._counts) > _REMEMBERED_COUNTS:
            self._counts.popitem(last=False)

    def _compact(self, chat_key: str) -> int:
        path = self.path(chat_key)
        entries = jsonl.read_all(path)
        keep = self.window - 1
        older, recent = entries[:-keep], entries[-keep:]
        runs = sum(int(e.get("runs", 1)) for e in older)
        tools: dict[str, int] = {}
        for e in older:
            for call in e.get("toolCalls", []):
                tools[call["tool"]] = tools.get(call["tool"], 0) + 1
        tool_text = ", ".join(f"{name}×{n}" for name, n in sorted(tools.items())) or "none"
        summary = {
            "v": 1,
            "ts": older[-1].get("ts", now_iso()),
            "chatKey": chat_key,
            "requestId": older[-1].get("requestId", ""),
            "summary": True,
            "runs": runs,
            "userPreview": f"Summary of {runs} earlier runs (from {older[0].get('ts')} to {older[-1].get('ts')})",
            "outputPreview": f"Tools used in those runs: {tool_text}"[:2000],
            "toolCalls": [],
        }
        jsonl.rewrite(path, [summary, *recent])
        return len(recent) + 1

    def last(self, chat_key: str, count: int, *, skip: int = 0) -> list[dict[str, Any]]:
        return jsonl.read_last(self.path(chat_key), count, skip=skip)
