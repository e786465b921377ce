"""exec_shell's output: what the model reads (:class:`Capture`) and what is stored (:class:`Store`).

Both are bounded whatever a command prints: the model gets the first and last 4 KB of a stream,
the disk at most ``permissions.execShell.maxOutputBytes`` (its first and last halves, with a line
saying how much was dropped between), in O(1) memory either way.
"""

from __future__ import annotations

import codecs
import shutil
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

__all__ = ["OUTPUT_CAP_BYTES", "Capture", "Store"]

OUTPUT_CAP_BYTES = 8 * 1024
"""stdout and stderr are each cut to this many bytes in the result (half head, half tail)."""


class Capture:
    """Keeps the first and last ``cap/2`` bytes of a stream and counts the rest, in O(cap) memory."""

    def __init__(self, cap: int = OUTPUT_CAP_BYTES) -> None:
        self.half = cap // 2
        self.cap = cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if len(self.head) < self.half:
            room = self.half - len(self.head)
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            del self.tail[: max(0, len(self.tail) - self.half)]

    @property
    def truncated(self) -> bool:
        return self.total > self.cap

    def text(self, location: str | None) -> str:
        head = codecs.getincrementaldecoder("utf-8")("replace").decode(bytes(self.head), final=False)
        tail_bytes = bytes(self.tail)
        if not self.truncated:
            return (bytes(self.head) + tail_bytes).decode("utf-8", "replace")
        # The tail may start inside a multi-byte character: skip its continuation bytes.
        start = 0
        while start < min(4, len(tail_bytes)) and 0x80 <= tail_bytes[start] <= 0xBF:
            start += 1
        omitted = self.total - len(self.head) - len(tail_bytes)
        where = f"; full output: {location}" if location else ""
        marker = f"\n[… {omitted} bytes omitted{where} …]\n"
        return head + marker + tail_bytes[start:].decode("utf-8", "replace")


class Store:
    """The stored copy of one stream, at most ``limit`` bytes, in O(1) memory.

    The first half goes to ``path``; after that, the latest bytes go round a ring file of the other
    half beside it. :meth:`close` appends the ring's bytes in order, after a line saying how many
    bytes were dropped between, and removes the ring.
    """

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self.ring_path = path.with_name(path.name + ".tail")
        self.head_room = limit // 2
        self.ring_size = limit - self.head_room
        self.head_len = 0
        self.ring_written = 0
        self._head: Any = None
        self._ring: Any = None
        self._ring_at = 0

    @property
    def dropped(self) -> int:
        return max(0, self.ring_written - self.ring_size)

    async def write(self, chunk: bytes) -> None:
        if self._head is None:
            self._head = await anyio.open_file(self.path, "wb")
        if self.head_len < self.head_room:
            part = chunk[: self.head_room - self.head_len]
            await self._head.write(part)
            self.head_len += len(part)
            chunk = chunk[len(part) :]
        while chunk:
            if self._ring is None:
                self._ring = await anyio.open_file(self.ring_path, "w+b")
            offset = self.ring_written % self.ring_size
            if offset != self._ring_at:
                await self._ring.seek(offset)
            part = chunk[: self.ring_size - offset]
            await self._ring.write(part)
            self.ring_written += len(part)
            self._ring_at = (offset + len(part)) % self.ring_size
            if self._ring_at == 0:
                await self._ring.seek(0)
            chunk = chunk[len(part) :]

    async def close(self) -> None:
        head, ring, self._head, self._ring = self._head, self._ring, None, None
        if head is not None:
            await head.aclose()
        if ring is not None:
            await ring.aclose()
            await anyio.to_thread.run_sync(self._join)

    def _join(self) -> None:
        with open(self.path, "ab") as out, open(self.ring_path, "rb") as ring:
            if self.dropped:
                out.write(
                    f"\n[… {self.dropped} bytes dropped here: permissions.execShell.maxOutputBytes keeps "
                    f"the first {self.head_room} and the last {self.ring_size} bytes …]\n".encode()
                )
                start = self.ring_written % self.ring_size
                ring.seek(start)
                shutil.copyfileobj(ring, out)
                ring.seek(0)
                out.write(ring.read(start))
            else:
                shutil.copyfileobj(ring, out)
        self.ring_path.unlink(missing_ok=True)
