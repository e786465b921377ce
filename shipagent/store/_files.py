"""The default stores, ``.ship/`` files and SQLite, behind the store protocols.

Thin adapters: every write goes through the classes the runtime has always used
(``history.logs.MessageLog``/``Transcript``/``AgentContextLog``, ``files.ContextFiles``,
``handover.SqliteCardBoxStore``), so the bytes on disk are unchanged. A record's ``seq`` is its
line number among the readable lines (a torn last line is not counted). All file work runs in a
worker thread.
"""

from __future__ import annotations

import builtins
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio

from .. import jsonl
from ..chatkeys import ShipPaths, decode_chat_key
from ..errors import ChatKeyError
from ._files_chat import FileChatStore
from ._protocols import Committed, LogRecord
from ._records import AgentContextMixin, MessageLogMixin, RawLog, TranscriptMixin
from .cards import SqliteCardBoxStore
from .files import ContextFiles, ContextRef, Page, Tail
from .files._store import INDEX_NAME, _write_atomic, safe_child
from .logs import AgentContextLog, MessageLog, Transcript

__all__ = ["FileStores", "file_chat_keys"]

log = logging.getLogger("shipagent.store")
_T = TypeVar("_T")
CARD_FILE = "cardbox.sqlite3"


def _key_of_records(path: Path) -> str | None:
    for record in jsonl.read_all(path)[:1]:
        if isinstance(record, dict) and isinstance(record.get("chatKey"), str):
            return str(record["chatKey"])
    return None


def file_chat_keys(paths: ShipPaths) -> dict[str, str]:
    """``{chat key: encoded name}`` of every chat with a file under ``.ship/``.

    Names of keys longer than ~60 characters are hashed and cannot be decoded: their key is read
    from the ``chatKey`` field of the chat's transcript or agent-context records. A chat whose key
    is found nowhere is logged and left out (it cannot be addressed by key anyway).
    """
    ship = paths.ship_dir
    names: set[str] = set()
    for folder in (ship / "chats", ship / "context"):
        if folder.is_dir():
            names.update(p.name for p in folder.iterdir() if p.is_dir())
    contexts = ship / "memory" / "agent-context"
    if contexts.is_dir():
        names.update(p.name.removesuffix(".jsonl") for p in contexts.glob("*.jsonl"))
    found: dict[str, str] = {}
    for name in sorted(names):
        key = decode_chat_key(name) if "~" not in name else None
        if key is None:
            key = _key_of_records(ship / "chats" / name / "history.jsonl") or _key_of_records(
                contexts / f"{name}.jsonl"
            )
        if key is None:
            log.warning("%s: chat folder %r names no chat key that can be recovered; skipped", ship, name)
            continue
        found[key] = name
    return found


class _FileLog(RawLog):
    def __init__(self, paths: ShipPaths, path: Callable[[str], Path]) -> None:
        self._ship = paths
        self._path = path
        self._counts: dict[Path, tuple[int, int, int]] = {}  # path: (inode, bytes parsed, lines)

    def path(self, chat_key: str) -> Path:
        return self._path(chat_key)

    async def _run(self, fn: Callable[[], _T]) -> _T:
        return await anyio.to_thread.run_sync(fn)

    async def append_records(self, chat_key: str, records: Sequence[dict[str, Any]]) -> int:
        path = self.path(chat_key)

        def write() -> int:
            jsonl.append_lines(path, records)
            return self._count(path)

        return await self._run(write)

    async def records(
        self, chat_key: str, start: int = 1, stop: int | None = None
    ) -> builtins.list[LogRecord]:
        lines = await self._run(lambda: jsonl.read_all(self.path(chat_key)))
        end = len(lines) + 1 if stop is None else min(stop, len(lines) + 1)
        return [LogRecord(seq, lines[seq - 1]) for seq in range(max(1, start), end)]

    async def last(self, chat_key: str, count: int, *, skip: int = 0) -> builtins.list[dict[str, Any]]:
        return await self._run(lambda: jsonl.read_last(self.path(chat_key), count, skip=skip))

    async def count(self, chat_key: str) -> int:
        path = self.path(chat_key)
        return await self._run(lambda: self._count(path))

    def _count(self, path: Path) -> int:
        """Readable lines in ``path``, parsing only the bytes appended since the last count.

        Keyed by inode: the agent-context window replaces its file by a rename, which starts over.
        """
        try:
            stat = path.stat()
        except FileNotFoundError:
            self._counts.pop(path, None)
            return 0
        inode, consumed, count = self._counts.get(path, (stat.st_ino, 0, 0))
        if inode != stat.st_ino or stat.st_size < consumed:
            consumed, count = 0, 0
        if stat.st_size > consumed:
            with open(path, "rb") as fh:
                fh.seek(consumed)
                data = fh.read(stat.st_size - consumed)
            end = data.rfind(b"\n") + 1  # a line without "\n" is torn or still being written
            for raw in data[:end].split(b"\n"):
                if raw.strip():
                    try:
                        json.loads(raw)
                    except (json.JSONDecodeError, UnicodeDecodeError):
                        continue  # read_all skips it too: seqs stay the same
                    count += 1
            consumed += end
        self._counts[path] = (stat.st_ino, consumed, count)
        return count

    async def last_committed(self, chat_key: str) -> Committed:
        """The line count and the newest record's request id, without reading the whole log."""
        path = self.path(chat_key)

        def read() -> Committed:
            count = self._count(path)
            for record in jsonl.iter_objects_backward(path):
                request_id = record.get("requestId") if isinstance(record, dict) else None
                return Committed(count, request_id if isinstance(request_id, str) else None)
            return Committed(0, None)

        return await self._run(read)

    async def chat_keys(self) -> builtins.list[str]:
        def scan() -> builtins.list[str]:
            return sorted(k for k in file_chat_keys(self._ship) if self.path(k).exists())

        return await self._run(scan)

    async def replace_all(self, chat_key: str, records: Sequence[dict[str, Any]]) -> None:
        await self._run(lambda: jsonl.rewrite(self.path(chat_key), list(records)))


class FileMessageLog(MessageLogMixin, _FileLog):
    """``.ship/chats/<key>/messages.jsonl`` through :class:`~shipagent.store.logs.MessageLog`."""

    def __init__(self, paths: ShipPaths) -> None:
        self.log = MessageLog(paths)
        super().__init__(paths, self.log.path)

    async def append_turn(self, chat_key: str, request_id: str, messages: builtins.list[Any]) -> int:
        await self._run(lambda: self.log.append_turn(chat_key, request_id, messages))
        return await self.count(chat_key)

    async def rebuild(self, chat_key: str) -> builtins.list[Any]:
        return await self._run(lambda: self.log.rebuild(chat_key))  # reads backwards, never the whole file


class FileTranscript(TranscriptMixin, _FileLog):
    """``.ship/chats/<key>/history.jsonl``, the file :class:`~shipagent.store.logs.Transcript` writes (same records)."""

    def __init__(self, paths: ShipPaths) -> None:
        self.log = Transcript(paths)
        super().__init__(paths, self.log.path)


class FileAgentContext(AgentContextMixin, _FileLog):
    """``.ship/memory/agent-context/<key>.jsonl`` through :class:`~shipagent.store.logs.AgentContextLog`."""

    def __init__(self, paths: ShipPaths, *, window: int = 200) -> None:
        self.log = AgentContextLog(paths, window=window)
        self.window = window
        super().__init__(paths, self.log.path)

    async def append(
        self,
        chat_key: str,
        request_id: str,
        user_text: str,
        output: str,
        tool_calls: builtins.list[dict[str, Any]],
    ) -> None:
        await self._run(lambda: self.log.append(chat_key, request_id, user_text, output, tool_calls))


class FileContextFiles:
    """``.ship/context/<key>/`` through :class:`~shipagent.tools.files.ContextFiles`."""

    def __init__(self, paths: ShipPaths) -> None:
        self.files = ContextFiles(paths)
        self._paths = paths

    async def put(self, chat_key: str, ref: ContextRef, content: bytes) -> ContextRef:
        from dataclasses import replace

        ref = replace(ref, size_bytes=len(content))
        folder = self.files.folder(chat_key)

        def write() -> None:
            _write_atomic(safe_child(folder, ref.path, what=f"context file {ref.id!r}"), content)
            jsonl.append_lines(folder / INDEX_NAME, [ref.to_json()])

        await anyio.to_thread.run_sync(write)
        return ref

    async def put_raw(self, chat_key: str, record: dict[str, Any], content: bytes | None) -> None:
        ref = ContextRef.from_json(record, where=f"context index record of {chat_key!r}")
        folder = self.files.folder(chat_key)

        def write() -> None:
            if content is not None:
                _write_atomic(safe_child(folder, ref.path, what=f"context file {ref.id!r}"), content)
            jsonl.append_lines(folder / INDEX_NAME, [record])

        await anyio.to_thread.run_sync(write)

    async def list(self, chat_key: str) -> builtins.list[ContextRef]:
        refs = await anyio.to_thread.run_sync(lambda: self.files.list(chat_key, limit=1 << 30))
        return refs[::-1]

    async def index(self, chat_key: str) -> builtins.list[dict[str, Any]]:
        return await anyio.to_thread.run_sync(
            lambda: jsonl.read_all(self.files.folder(chat_key) / INDEX_NAME)
        )

    async def get(self, chat_key: str, ref_id: str) -> ContextRef:
        return await anyio.to_thread.run_sync(self.files.get, chat_key, ref_id)

    async def content(self, chat_key: str, ref_id: str) -> bytes:
        def read() -> bytes:
            return self.files.path_of(chat_key, self.files.get(chat_key, ref_id)).read_bytes()

        return await anyio.to_thread.run_sync(read)

    async def read(self, chat_key: str, ref_id: str, offset: int = 0, limit: int = 8192) -> Page:
        return await anyio.to_thread.run_sync(self.files.read, chat_key, ref_id, offset, limit)

    async def tail(self, chat_key: str, ref_id: str, lines: int = 200, *, max_bytes: int = 65536) -> Tail:
        return await anyio.to_thread.run_sync(
            lambda: self.files.tail(chat_key, ref_id, lines, max_bytes=max_bytes)
        )

    async def text(self, chat_key: str, ref_id: str) -> str:
        return (await self.content(chat_key, ref_id)).decode("utf-8", errors="replace")

    async def chat_keys(self) -> builtins.list[str]:
        def scan() -> builtins.list[str]:
            keys = []
            for key in file_chat_keys(self._paths):
                try:
                    if (self.files.folder(key) / INDEX_NAME).exists():
                        keys.append(key)
                except ChatKeyError:
                    continue
            return sorted(keys)

        return await anyio.to_thread.run_sync(scan)


class FileStores(FileChatStore):
    """Today's stores of a project: JSONL files under ``.ship/`` and ``.ship/cardbox.sqlite3``.

    The :class:`~shipagent.store.ChatStore` of a project on one machine (the default): its
    commit is :meth:`~FileChatStore.commit_sync` in one worker-thread hop.

    Args:
        project_root: the project directory (the one with ``ship.json``).
        window: the agent-context window (ship.json ``context.agentContext.windowEntries``).
        project_id: the card store's project id (the agent uses ship.json ``name``).
    """

    def __init__(self, project_root: Path, *, window: int = 200, project_id: str = "default") -> None:
        self.paths = ShipPaths(Path(project_root))
        self.messages = FileMessageLog(self.paths)
        self.transcript = FileTranscript(self.paths)
        self.agent_context = FileAgentContext(self.paths, window=window)
        self.context_files = FileContextFiles(self.paths)
        self.cards = SqliteCardBoxStore(self.paths.ship_dir / CARD_FILE, project_id=project_id)
        self.message_log = self.messages.log
        self.transcript_log = self.transcript.log
        self.agent_context_log = self.agent_context.log
        self.files = self.context_files.files
        self._init_chat_store()
