"""``ContextFiles``: the per-chat-key store of context files under ``.ship/context/<key>/``.

Layout of one chat's folder::

    .ship/context/<encoded chat key>/
      index.jsonl      one ContextRef per line, append-only; a later line with the same id wins
      a3f9c1e.txt      the files themselves, named after their ref id

The index is append-only so a crash can tear at most its last line (skipped on read). It is cached
per process and only the bytes appended since the last look are parsed, so resolving an id does
not cost O(index) on every tool call. Every file path is checked to stay inside the chat's folder
each time it is used: an index line or an import may have been tampered with.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import os
import secrets
import shutil
import threading
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import anyio

from ..._cache import BoundedCache
from ..._paths import resolve_inside
from ...chatkeys import ShipPaths, validate_chat_key
from ...errors import BadRequestError, NotFoundError
from ...jsonl import append_lines, remove_stale_tmp
from ._catalog_memo import forget_catalog
from ._grep import GrepEngine, GrepResult, grep_file
from ._paging import Page, Tail, read_page, read_tail
from ._ref import ContextKind, ContextRef, utc_now_iso
from ._render import render_catalog, render_history
from ._transfer import export_refs, plan_import

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

__all__ = ["CATALOG_ID", "INDEX_NAME", "ContextFiles"]

log = logging.getLogger("shipagent.tools.files")

INDEX_NAME = "index.jsonl"
CATALOG_ID = "catalog"
_EXTENSIONS = {"application/json": ".json", "text/markdown": ".md"}
_CACHE_SIZE = 256


@dataclass
class _IndexState:
    consumed: int = 0
    refs: dict[str, ContextRef] = field(default_factory=dict)


_cache: BoundedCache[Path, _IndexState] = BoundedCache(_CACHE_SIZE)
_cache_lock = threading.Lock()


def safe_child(folder: Path, relative: object, *, what: str) -> Path:
    """``folder / relative`` if that stays inside ``folder``; else :class:`BadRequestError`.

    Refused: non-strings, empty paths, absolute paths, ``..``/``.`` parts, backslashes, NUL,
    hidden names (temp files), the index itself, and anything a symlink would take elsewhere.
    """
    if not isinstance(relative, str) or not relative:
        raise BadRequestError(f"{what}: path must be a non-empty string, got {relative!r}")
    if "\x00" in relative or "\\" in relative:
        raise BadRequestError(f"{what}: path {relative!r} holds a NUL or backslash")
    pure = PurePosixPath(relative)
    if pure.is_absolute() or relative.startswith("/"):
        raise BadRequestError(f"{what}: path {relative!r} is absolute; only relative paths are allowed")
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise BadRequestError(f"{what}: path {relative!r} contains '..', '.' or an empty part")
    if any(part.startswith(".") for part in parts) or relative == INDEX_NAME:
        raise BadRequestError(f"{what}: path {relative!r} is reserved")
    target = folder.joinpath(*parts)
    root = folder.resolve()
    if not target.resolve().is_relative_to(root) or target.resolve() == root:
        raise BadRequestError(f"{what}: path {relative!r} would land outside the chat's context folder")
    return target


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:  # disk full: no temp file left behind
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class ContextFiles:
    """The context files of every chat key of one project.

    Cheap to create (it holds only paths); safe to use from several threads. The plain methods
    are blocking; code on an event loop awaits the ``a``-methods (:meth:`alist`, :meth:`aread`,
    :meth:`atail`, :meth:`agrep`, :meth:`aadd_artifact`) or runs its own file work in a thread
    inside :meth:`session`. In a durable cluster on Postgres the plain methods query the
    database, and on an event loop's own thread they refuse to (that would stop the loop).

    Args:
        paths: the project's ``.ship/`` layout.
        grep_engine: force ``"re2"`` or ``"ripgrep"`` for :meth:`grep`; ``None`` uses ripgrep
            when an ``rg`` binary is found and RE2 in-process otherwise.
    """

    def __init__(self, paths: ShipPaths, *, grep_engine: GrepEngine | None = None) -> None:
        self.paths = paths
        self.grep_engine = grep_engine

    # --- index --------------------------------------------------------------------------------

    def folder(self, chat_key: str) -> Path:
        """``.ship/context/<encoded chat key>/``."""
        return self.paths.context_dir(validate_chat_key(chat_key))

    def _refs(self, chat_key: str) -> dict[str, ContextRef]:
        index = self.folder(chat_key) / INDEX_NAME
        with _cache_lock:
            state = _cache.get(index)  # a use: this chat's folder is now the most recent
            if state is None:  # first look at this chat's folder in this process
                remove_stale_tmp(index.parent)  # temp files of writes a killed process never renamed
                state = _cache[index] = _IndexState()
            try:
                size = index.stat().st_size
            except FileNotFoundError:
                size = 0
            if size < state.consumed:  # replaced or truncated behind our back: start over
                state.consumed, state.refs = 0, {}
            if size > state.consumed:
                with open(index, "rb") as fh:
                    fh.seek(state.consumed)
                    data = fh.read(size - state.consumed)
                end = data.rfind(b"\n") + 1  # a line without "\n" is still being written (or torn)
                for raw in data[:end].split(b"\n"):
                    self._apply_index_line(state, raw, index)
                state.consumed += end
            return dict(state.refs)

    @staticmethod
    def _apply_index_line(state: _IndexState, raw: bytes, index: Path) -> None:
        if not raw.strip():
            return
        try:
            ref = ContextRef.from_json(json.loads(raw), where=str(index))
        except (ValueError, BadRequestError) as exc:
            log.warning("%s: skipping unreadable index line (%s)", index, exc)
            return
        state.refs.pop(ref.id, None)  # re-insert so dict order is "last written last"
        state.refs[ref.id] = ref

    def get(self, chat_key: str, ref_id: str) -> ContextRef:
        """The ref ``ref_id`` of ``chat_key``.

        Raises:
            NotFoundError: no such id for this chat key (another chat's ids are not visible).
        """
        ref = self._refs(chat_key).get(ref_id) if isinstance(ref_id, str) else None
        if ref is None:
            raise NotFoundError(
                f"context file {ref_id!r} not found for this chat; context_list shows the ids it has"
            )
        return ref

    def path_of(self, chat_key: str, ref: ContextRef) -> Path:
        """The file behind ``ref``, checked to be inside the chat's folder and present.

        Inside the project too: a chat folder (or ``.ship/``) that is a symlink out is refused.
        """
        what = f"context file {ref.id!r}"
        path = safe_child(self.folder(chat_key), ref.path, what=what)
        resolve_inside(self.paths.project_root, path, what)
        if not ref.eager and not path.exists():
            raise NotFoundError(f"context file {ref.id!r} is a lazy ref that has not been built yet")
        if not path.is_file():
            raise NotFoundError(f"context file {ref.id!r}: its file {ref.path!r} is missing")
        return path

    def list(
        self, chat_key: str, *, kind: ContextKind | None = None, limit: int = 50
    ) -> builtins.list[ContextRef]:
        """The chat's refs, newest first, optionally of one ``kind``, at most ``limit``."""
        refs = [r for r in reversed(self._refs(chat_key).values()) if kind is None or r.kind == kind]
        return refs[: max(0, limit)]

    # --- producers ----------------------------------------------------------------------------

    def _new_id(self, chat_key: str, kind: ContextKind) -> str:
        taken = self._refs(chat_key)
        while True:
            candidate = f"{kind[0]}{secrets.token_hex(3)}"
            if candidate not in taken:
                return candidate

    def _writing(self) -> contextlib.AbstractContextManager[object]:
        """Held around every write (a store shared between machines serialises them with its reads)."""
        return contextlib.nullcontext()

    def _added(self, chat_key: str, refs: Sequence[ContextRef]) -> None:
        """Called inside :meth:`_writing` with what a write added, once its files and index lines are."""

    def _put(
        self,
        chat_key: str,
        content: str,
        *,
        ref_id: str,
        kind: ContextKind,
        name: str,
        description: str,
        mime: str,
        source: str,
    ) -> ContextRef:
        if not isinstance(content, str):
            raise BadRequestError(f"context file content must be str, got {type(content).__name__}")
        data = content.encode("utf-8")
        folder = self.folder(chat_key)
        ref = ContextRef(
            id=ref_id,
            kind=kind,
            name=name,
            description=description,
            size_bytes=len(data),
            created_at=utc_now_iso(),
            mime=mime,
            eager=True,
            source=source,
            path=f"{ref_id}{_EXTENSIONS.get(mime, '.txt')}",
        )
        with self._writing():
            _write_atomic(safe_child(folder, ref.path, what="context file"), data)
            append_lines(folder / INDEX_NAME, [ref.to_json()])
            self._added(chat_key, [ref])
        return ref

    def add_artifact(
        self,
        chat_key: str,
        content: str,
        *,
        name: str,
        source: str,
        description: str = "",
        mime: str = "text/plain",
    ) -> ContextRef:
        """Keep ``content`` (a tool's output, an exported document) as an ``artifact`` file."""
        return self._put(
            chat_key,
            content,
            ref_id=self._new_id(chat_key, "artifact"),
            kind="artifact",
            name=name,
            description=description,
            mime=mime,
            source=source,
        )

    def add_artifact_file(
        self,
        chat_key: str,
        file: Path,
        *,
        name: str,
        source: str,
        description: str = "",
        mime: str = "text/plain",
        move: bool = False,
    ) -> ContextRef:
        """Keep an existing file (a command's full output) as an ``artifact``, without loading it.

        The file is copied in blocks (or renamed when ``move`` and on the same filesystem), so a
        2 GB log costs no memory. Bytes that are not UTF-8 are kept as they are: the readers
        replace them when decoding, and an export carries the file base64-encoded.
        """
        with self._writing():
            ref_id = self._new_id(chat_key, "artifact")
            folder = self.folder(chat_key)
            rel = f"{ref_id}{_EXTENSIONS.get(mime, '.txt')}"
            target = safe_child(folder, rel, what="context file")
            folder.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            if move:
                try:
                    os.replace(file, tmp)
                except OSError:  # another filesystem: copy, then remove the original
                    shutil.copyfile(file, tmp)
                    os.unlink(file)
            else:
                shutil.copyfile(file, tmp)
            os.replace(tmp, target)
            ref = ContextRef(
                id=ref_id,
                kind="artifact",
                name=name,
                description=description,
                size_bytes=target.stat().st_size,
                created_at=utc_now_iso(),
                mime=mime,
                eager=True,
                source=source,
                path=rel,
            )
            append_lines(folder / INDEX_NAME, [ref.to_json()])
            self._added(chat_key, [ref])
        return ref

    def add_history(
        self, chat_key: str, content: str, *, name: str, description: str = "", source: str = "compaction"
    ) -> ContextRef:
        """Keep already-rendered conversation text as a ``history`` file."""
        return self._put(
            chat_key,
            content,
            ref_id=self._new_id(chat_key, "history"),
            kind="history",
            name=name,
            description=description,
            mime="text/markdown",
            source=source,
        )

    def add_history_messages(
        self, chat_key: str, messages: Sequence[ModelMessage], *, source: str = "compaction"
    ) -> ContextRef:
        """Render pydantic-ai messages (role, time, text, tool calls and results) to a ``history`` file.

        Compaction calls this with the messages it is about to drop, so what leaves the model's
        window stays findable with ``context_grep``.
        """
        text, name, description = render_history(messages)
        return self.add_history(chat_key, text, name=name, description=description, source=source)

    def set_catalog(self, chat_key: str, content: str, *, description: str = "") -> ContextRef:
        """Write the chat's ``catalog`` file (id ``catalog``); a no-op when the text is unchanged."""
        current = self._refs(chat_key).get(CATALOG_ID)
        if current is not None:
            try:
                if self.path_of(chat_key, current).read_bytes() == content.encode("utf-8"):
                    return current
            except (NotFoundError, BadRequestError):
                pass
        return self._put(
            chat_key,
            content,
            ref_id=CATALOG_ID,
            kind="catalog",
            name="capability catalog",
            description=description or "the skills and tools available to this agent",
            mime="text/markdown",
            source="catalog",
        )

    def write_catalog(
        self, chat_key: str, *, skills: Sequence[tuple[str, str]], tools: Sequence[tuple[str, str]]
    ) -> ContextRef:
        """Render ``(name, description)`` pairs of skills and tools into the chat's catalog file."""
        return self.set_catalog(
            chat_key,
            render_catalog(skills=skills, tools=tools),
            description=f"{len(skills)} skills, {len(tools)} tools available to this agent",
        )

    # --- readers ------------------------------------------------------------------------------

    def read(self, chat_key: str, ref_id: str, offset: int = 0, limit: int = 8192) -> Page:
        """Bytes ``[offset, offset + limit)`` of a file on UTF-8 boundaries; O(limit)."""
        return read_page(self.path_of(chat_key, self.get(chat_key, ref_id)), offset, max(1, limit))

    def tail(self, chat_key: str, ref_id: str, lines: int = 200, *, max_bytes: int = 65536) -> Tail:
        """The last ``lines`` lines of a file, read backwards; at most ``max_bytes`` of text."""
        return read_tail(self.path_of(chat_key, self.get(chat_key, ref_id)), lines, max_bytes=max_bytes)

    def grep(
        self,
        chat_key: str,
        ref_id: str,
        pattern: str,
        *,
        max_results: int = 50,
        context_lines: int = 0,
        case_sensitive: bool = False,
    ) -> GrepResult:
        """Search a file line by line (see :func:`shipagent.tools.files.grep_file`)."""
        path = self.path_of(chat_key, self.get(chat_key, ref_id))
        return grep_file(
            path,
            pattern,
            max_results=max_results,
            context_lines=context_lines,
            case_sensitive=case_sensitive,
            engine=self.grep_engine,
        )

    # --- from an event loop ----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def session(self, chat_key: str, *, read: str | None = None) -> AsyncIterator[ContextFiles]:
        """The files to hand blocking work on ``chat_key`` in a worker thread.

        Here the folder is the whole store, so they are ``self``. A durable cluster's files bring
        the folder up to date from Postgres first (and ``read``'s bytes), awaited on the caller's
        loop, and store what the work wrote once it is done: the thread never waits on the database.
        """
        yield self

    async def alist(
        self, chat_key: str, *, kind: ContextKind | None = None, limit: int = 50
    ) -> builtins.list[ContextRef]:
        """:meth:`list` for code on an event loop."""
        async with self.session(chat_key) as files:
            return await anyio.to_thread.run_sync(partial(files.list, chat_key, kind=kind, limit=limit))

    async def aread(self, chat_key: str, ref_id: str, offset: int = 0, limit: int = 8192) -> Page:
        """:meth:`read` for code on an event loop."""
        async with self.session(chat_key, read=ref_id) as files:
            return await anyio.to_thread.run_sync(files.read, chat_key, ref_id, offset, limit)

    async def atail(self, chat_key: str, ref_id: str, lines: int = 200, *, max_bytes: int = 65536) -> Tail:
        """:meth:`tail` for code on an event loop."""
        async with self.session(chat_key, read=ref_id) as files:
            return await anyio.to_thread.run_sync(
                partial(files.tail, chat_key, ref_id, lines, max_bytes=max_bytes)
            )

    async def agrep(self, chat_key: str, ref_id: str, pattern: str, **options: Any) -> GrepResult:
        """:meth:`grep` for code on an event loop (the same keyword options)."""
        async with self.session(chat_key, read=ref_id) as files:
            return await anyio.to_thread.run_sync(partial(files.grep, chat_key, ref_id, pattern, **options))

    async def aadd_artifact(
        self, chat_key: str, content: str, *, name: str, source: str, **more: str
    ) -> ContextRef:
        """:meth:`add_artifact` for code on an event loop (``description``, ``mime`` as keywords)."""
        async with self.session(chat_key) as files:
            return await anyio.to_thread.run_sync(
                partial(files.add_artifact, chat_key, content, name=name, source=source, **more)
            )

    # --- export / import ----------------------------------------------------------------------

    def export(self, chat_key: str) -> dict[str, Any]:
        """``{conversationId, exportedAt, version: 1, items, files}`` with the chat's eager files."""
        refs = [r for r in self._refs(chat_key).values() if r.eager]
        return export_refs(chat_key, refs, lambda ref: self.path_of(chat_key, ref))

    def import_(self, chat_key: str, data: Any) -> builtins.list[ContextRef]:
        """Restore an export into ``chat_key``; lazy refs are skipped.

        Everything is checked before anything is written, so a hostile export (absolute paths,
        ``..``, a path out of the chat's folder) is refused whole and writes nothing at all.
        A ref whose id already exists in this chat replaces it.

        Raises:
            BadRequestError: naming the item or file at fault.
        """
        folder = self.folder(chat_key)
        plan = plan_import(data, lambda rel, what: safe_child(folder, rel, what=what))
        written: builtins.list[ContextRef] = []
        with self._writing():
            for ref, target, payload in plan:
                _write_atomic(target, payload)
                written.append(replace(ref, size_bytes=len(payload)))
            if written:
                append_lines(folder / INDEX_NAME, [ref.to_json() for ref in written])
            forget_catalog(str(self.folder(chat_key)))  # the import may have replaced the catalog
            self._added(chat_key, written)
        return written
