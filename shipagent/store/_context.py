"""Context files on a store that is not the project's ``.ship/context/`` folder.

The bytes live in the store (Postgres, memory), so every worker of a cluster sees every file. To
page, tail and grep them with the same code as the file store (``read_page``, ``read_tail``,
ripgrep), a file is materialised once into a local cache named after its SHA-256: contents are
immutable per hash, so a cached copy is never stale and workers never need to coordinate it.
"""

from __future__ import annotations

import builtins
import hashlib
import os
import tempfile
import threading
from abc import ABC, abstractmethod
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from ..errors import BadRequestError, NotFoundError
from .files import ContextRef, Page, Tail
from .files._paging import read_page, read_tail

__all__ = ["ContextBase", "sha256"]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ContextBase(ABC):
    """:class:`~shipagent.store.ContextFileStore` on an index log plus a content table.

    Args:
        cache_dir: where files are materialised for reading; a private temp dir by default.
    """

    def __init__(self, cache_dir: Path | None = None) -> None:
        self._cache_dir = cache_dir
        self._lock = threading.Lock()

    @abstractmethod
    async def _append(self, chat_key: str, record: dict[str, Any], content: bytes | None) -> None:
        """Store the content (when given) and append the index record, together."""

    @abstractmethod
    async def index(self, chat_key: str) -> list[dict[str, Any]]: ...

    @abstractmethod
    async def _digest(self, chat_key: str, ref_id: str) -> str | None:
        """The SHA-256 of the stored content of ``ref_id`` (``None``: no content)."""

    @abstractmethod
    async def _bytes(self, chat_key: str, ref_id: str) -> bytes: ...

    @abstractmethod
    async def chat_keys(self) -> list[str]: ...

    async def put(self, chat_key: str, ref: ContextRef, content: bytes) -> ContextRef:
        if not isinstance(content, bytes):
            raise BadRequestError(f"context file content must be bytes, got {type(content).__name__}")
        ref = replace(ref, size_bytes=len(content))
        ContextRef.from_json(ref.to_json(), where=f"context file {ref.id!r}")  # refuse a bad id or path
        await self._append(chat_key, ref.to_json(), content)
        return ref

    async def put_raw(self, chat_key: str, record: dict[str, Any], content: bytes | None) -> None:
        ContextRef.from_json(record, where=f"context index record of {chat_key!r}")
        await self._append(chat_key, dict(record), content)

    async def _refs(self, chat_key: str) -> dict[str, ContextRef]:
        refs: dict[str, ContextRef] = {}
        for record in await self.index(chat_key):
            ref = ContextRef.from_json(record, where=f"context index of {chat_key!r}")
            refs.pop(ref.id, None)  # "last written last", as the file index reads
            refs[ref.id] = ref
        return refs

    async def list(self, chat_key: str) -> builtins.list[ContextRef]:
        return builtins.list((await self._refs(chat_key)).values())

    async def get(self, chat_key: str, ref_id: str) -> ContextRef:
        ref = (await self._refs(chat_key)).get(ref_id)
        if ref is None:
            raise NotFoundError(
                f"context file {ref_id!r} not found for this chat; context_list shows the ids it has"
            )
        return ref

    async def content(self, chat_key: str, ref_id: str) -> bytes:
        await self.get(chat_key, ref_id)
        return await self._bytes(chat_key, ref_id)

    def _cache_root(self) -> Path:
        with self._lock:
            if self._cache_dir is None:
                self._cache_dir = Path(tempfile.mkdtemp(prefix="shipagent-context-"))
            return self._cache_dir

    async def local_path(self, chat_key: str, ref_id: str) -> Path:
        """A local file with the content of ``ref_id`` (fetched once per content hash)."""
        await self.get(chat_key, ref_id)
        digest = await self._digest(chat_key, ref_id)
        if digest is None:
            raise NotFoundError(f"context file {ref_id!r}: its content is missing")
        path = self._cache_root() / digest
        if not path.exists():
            data = await self._bytes(chat_key, ref_id)

            def write() -> None:
                tmp = path.with_name(f".{digest}.{os.getpid()}.{threading.get_ident()}.tmp")
                tmp.write_bytes(data)
                os.replace(tmp, path)

            await anyio.to_thread.run_sync(write)
        return path

    async def read(self, chat_key: str, ref_id: str, offset: int = 0, limit: int = 8192) -> Page:
        path = await self.local_path(chat_key, ref_id)
        return await anyio.to_thread.run_sync(read_page, path, offset, max(1, limit))

    async def tail(self, chat_key: str, ref_id: str, lines: int = 200, *, max_bytes: int = 65536) -> Tail:
        path = await self.local_path(chat_key, ref_id)
        return await anyio.to_thread.run_sync(lambda: read_tail(path, lines, max_bytes=max_bytes))

    async def text(self, chat_key: str, ref_id: str) -> str:
        return (await self.content(chat_key, ref_id)).decode("utf-8", errors="replace")
