"""``.ship/memory/agent-context/<key>.jsonl``: the per-run execution summaries.

Split from :mod:`shipagent.store.logs` (which re-exports it) because, unlike the other
append-only logs, this one is windowed: past ``windowEntries`` the file is rewritten on every
turn, and that rewrite is kept cheap by working on raw lines.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import jsonl
from .._cache import BoundedCache
from ..chatkeys import ShipPaths
from ._appends import cached_paths, now_iso

__all__ = ["AgentContextLog", "agent_context_entry", "agent_context_summary"]

log = logging.getLogger("shipagent.window")

_REMEMBERED_COUNTS = 4096  # entry counts of the most recently used chats' agent-context logs


def agent_context_entry(
    chat_key: str, request_id: str, user_text: str, output: str, tool_calls: list[dict[str, Any]]
) -> dict[str, Any]:
    """One agent-context log entry: previews capped, tool errors at 200 characters.

    The one definition of the entry's shape: every store implementation writes exactly this.
    """
    return {
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


def agent_context_summary(chat_key: str, older: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The one entry the oldest agent-context entries are merged into when the window overflows.

    ``older`` is oldest first and may begin with the previous summary: its ``runs`` count, while
    the tools of the runs inside it are not recounted (its ``toolCalls`` is empty). Any field may be
    damaged (a hand edit): a bad value falls back to a default, never fails the commit.
    The one definition of the summary: the file and Postgres stores both write exactly this.
    """
    runs = sum(_int(e.get("runs"), 1) for e in older)
    tools: dict[str, int] = {}
    for e in older:
        calls = e.get("toolCalls")
        for call in calls if isinstance(calls, list) else []:
            name = call.get("tool") if isinstance(call, dict) else None
            if isinstance(name, str):
                tools[name] = tools.get(name, 0) + 1
    tool_text = ", ".join(f"{name}×{n}" for name, n in sorted(tools.items())) or "none"
    first, last = str(older[0].get("ts")), str(older[-1].get("ts") or now_iso())
    return {
        "v": 1,
        "ts": last,
        "chatKey": chat_key,
        "requestId": str(older[-1].get("requestId") or ""),
        "summary": True,
        "runs": runs,
        "userPreview": f"Summary of {runs} earlier runs (from {first} to {last})",
        "outputPreview": f"Tools used in those runs: {tool_text}"[:2000],
        "toolCalls": [],
    }


class AgentContextLog:
    """``.ship/memory/agent-context/<key>.jsonl``: one execution summary per run.

    The file holds at most ``window`` entries: an append that would make it ``window + 1``
    rewrites it instead (temp file + rename) as one summary entry of the older ones and the newest
    ``window - 1``. In a chat past its window that is every turn, so the rewrite works on raw
    bytes: only the few lines merged into the summary are parsed; the kept ones (and the new
    entry) are copied unchanged. A line that is clearly not an entry (blank, torn by a crash) is
    not counted and is dropped by the next rewrite, so a full file this process has counted or
    rewritten is clean and is cut at its first newlines without looking at the rest.
    """

    def __init__(self, paths: ShipPaths, *, window: int = 200) -> None:
        self._paths = paths
        self.path: Callable[[str], Path] = cached_paths(paths.agent_context)
        self.window = window
        # chat -> (entry count, whether its file holds a line that is not an entry): recent chats
        # only (a miss re-counts), the least recently appended to going first.
        self._counts: BoundedCache[str, tuple[int, bool]] = BoundedCache(_REMEMBERED_COUNTS)
        self._swept = False

    def append(
        self,
        chat_key: str,
        request_id: str,
        user_text: str,
        output: str,
        tool_calls: list[dict[str, Any]],
        *,
        recovered: bool = False,
    ) -> None:
        entry = agent_context_entry(chat_key, request_id, user_text, output, tool_calls)
        if recovered:
            entry["recovered"] = True
        line = jsonl.dumps(entry)
        path = self.path(chat_key)
        known = self._counts.peek(chat_key)
        data: bytes | None = None
        if known is not None:
            count, dirty = known
        else:  # first append in this process (or after forget): look at the file
            self._sweep_once()
            data = _read(path)
            dirty = not _clean(data)
            # a torn or damaged line: count the others; the next rewrite drops it
            count = len(_entry_lines(data)) if dirty else data.count(b"\n")
        try:
            if count < self.window:
                jsonl.append_raw(path, line)
                count += 1
            else:
                data = _read(path) if data is None else data
                if dirty:
                    dirty = False
                    count = self._rewrite_lines(chat_key, [*_entry_lines(data), line.rstrip(b"\n")])
                else:
                    count = self._rewrite_full(chat_key, data, count, line)
        except BaseException:  # disk full mid-write: the file may hold a torn line now
            self.forget(chat_key)
            raise
        self._counts[chat_key] = count, dirty

    def _sweep_once(self) -> None:
        """Remove temp files that an interrupted window rewrite left behind (once per process)."""
        if not self._swept:
            self._swept = True
            jsonl.remove_stale_tmp(self._paths.ship_dir / "memory" / "agent-context")

    def forget(self, chat_key: str) -> None:
        """Drop the cached entry count (another process appended: the next append recounts)."""
        self._counts.pop(chat_key, None)

    def _rewrite_full(self, chat_key: str, data: bytes, count: int, line: bytes) -> int:
        """The window rewrite of a full, clean file of ``count`` entries: the per-turn case.

        The file was clean when this process counted it or last rewrote it (a write of ours that
        failed and may have left a torn line makes the caller :meth:`forget` the count). If it
        still holds ``count`` lines, the lines merged into the summary are its first few: found
        with a few ``index`` calls, parsed, and the rest of the file is copied in one piece,
        unread. Otherwise another writer appended to it or cut it: it goes line by line.
        """
        if data.count(b"\n") != count:
            return self._rewrite_lines(chat_key, [*_entry_lines(data), line.rstrip(b"\n")])
        older: list[bytes] = []
        start = 0
        for _ in range(count + 1 - (self.window - 1)):  # a window of 2 or more: at most ``count``
            end = data.index(b"\n", start)
            older.append(data[start:end])
            start = end + 1
        return self._write(chat_key, older, [memoryview(data)[start:], line], count + 1 - len(older))

    def _rewrite_lines(self, chat_key: str, lines: list[bytes]) -> int:
        """The window rewrite of the lines that may be entries (newest last), one by one."""
        cut = len(lines) - (self.window - 1) if len(lines) > self.window else 0
        return self._write(chat_key, lines[:cut], [b"\n".join(lines[cut:]), b"\n"], len(lines) - cut)

    def _write(self, chat_key: str, older: list[bytes], kept: list[bytes | memoryview], count: int) -> int:
        """Replace the file with the summary of ``older`` + the ``kept`` bytes; its entry count.

        A crash before the rename leaves the old file (without this turn's entry, which the
        reconciliation after a restart re-adds from the message log).
        """
        path = self.path(chat_key)
        # Any line may be damaged (a hand edit, a disk error): one merged into the summary that
        # does not parse is dropped rather than allowed to fail the commit that triggered this.
        entries = [e for e in (_loads(raw, path) for raw in older) if isinstance(e, dict)]
        head = [jsonl.dumps(agent_context_summary(chat_key, entries))] if entries else []
        jsonl.rewrite_raw(path, b"".join([*head, *kept]))
        return len(head) + count

    def last(self, chat_key: str, count: int, *, skip: int = 0) -> list[dict[str, Any]]:
        """The newest ``count`` entries after ``skip``, oldest first; non-entries are skipped."""
        out: list[dict[str, Any]] = []
        for entry in jsonl.iter_objects_backward(self.path(chat_key)):
            if not isinstance(entry, dict):
                continue
            if skip:
                skip -= 1
                continue
            out.append(entry)
            if len(out) >= count:
                break
        out.reverse()
        return out


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _clean(data: bytes) -> bool:
    """Whether every line of ``data`` looks like an entry: the usual case, checked in C.

    True when the file starts with ``{``, ends with ``}\n`` and every other newline sits between
    ``}`` and ``{`` (three substring counts, no per-line Python work); an empty file is clean.
    """
    return not data or (
        data[:1] == b"{" and data[-2:] == b"}\n" and data.count(b"\n") == data.count(b"}\n{") + 1
    )


def _entry_lines(data: bytes) -> list[bytes]:
    """The lines of ``data`` that may be entries, as raw bytes (a file that is not :func:`_clean`).

    Blank and torn lines (a crash mid-append leaves one without its closing brace) are left out
    by looking at their first and last byte; nothing is parsed.
    """
    return [raw for raw in (r.strip() for r in data.split(b"\n")) if raw[:1] == b"{" and raw[-1:] == b"}"]


def _loads(raw: bytes, path: Path) -> Any:
    try:
        return json.loads(raw)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError both are
        log.warning("%s: dropping an unreadable line (%d bytes) from the window", path, len(raw))
        return None


def _int(value: Any, default: int) -> int:
    """``value`` as a positive int, else ``default`` (a damaged entry's ``runs``)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default
