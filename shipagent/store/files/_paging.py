"""Reading a slice of a big UTF-8 file without reading the rest of it.

``read_page`` seeks to a byte offset and reads at most ``limit`` bytes; ``read_tail`` reads
backwards from the end in blocks. Both cost O(page), never O(file), so paging through a 200 MB
log costs the same per call as paging through a 2 MB one. Neither ever cuts a multi-byte UTF-8
character in half: a start inside a character moves back to its first byte, an end inside one
moves back before it, and the offsets returned say where the page really starts and stops.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Page", "Tail", "read_page", "read_tail"]

_BLOCK = 64 * 1024


def _is_continuation(byte: int) -> bool:
    return 0x80 <= byte <= 0xBF


def _char_length(lead: int) -> int:
    """How many bytes the UTF-8 character starting with ``lead`` has (1 for invalid leads)."""
    if lead >= 0xF0:
        return 4
    if lead >= 0xE0:
        return 3
    if lead >= 0xC0:
        return 2
    return 1


def _complete_prefix(data: bytes) -> int:
    """The length of the longest prefix of ``data`` that does not end inside a character."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if not _is_continuation(byte):
            return len(data) if _char_length(byte) <= back else len(data) - back
    return len(data)  # only continuation bytes: invalid UTF-8, nothing to protect


@dataclass(frozen=True, slots=True)
class Page:
    """A slice of a file.

    Attributes:
        offset: where the slice really starts (the requested offset, moved back to a character
            boundary, or the file size when the request was past the end).
        next_offset: the offset to ask for next; equals ``size`` when the file is exhausted.
        size: the file's size in bytes.
        content: the decoded text.
    """

    offset: int
    next_offset: int
    size: int
    content: str

    @property
    def done(self) -> bool:
        return self.next_offset >= self.size


def read_page(path: Path, offset: int, limit: int) -> Page:
    """Read at most ``limit`` bytes of ``path`` from ``offset``, on UTF-8 character boundaries.

    A page always makes progress: when ``limit`` is smaller than the character at ``offset``,
    that one whole character is returned.
    """
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if offset >= size:
            return Page(size, size, size, "")
        start = max(0, offset)
        if start:
            fh.seek(max(0, start - 3))
            before = fh.read(start - max(0, start - 3) + 1)
            # ``before`` ends with the byte at ``start``: walk back while it is a continuation byte.
            index = len(before) - 1
            while index > 0 and _is_continuation(before[index]):
                index -= 1
            start -= len(before) - 1 - index
        fh.seek(start)
        data = fh.read(limit)
        if start + len(data) < size:
            data = data[: _complete_prefix(data)]
            if not data:  # the character at ``start`` is longer than ``limit``
                fh.seek(start)
                lead = fh.read(1)
                data = lead + fh.read(_char_length(lead[0]) - 1)
    return Page(start, start + len(data), size, data.decode("utf-8", errors="replace"))


@dataclass(frozen=True, slots=True)
class Tail:
    """The last lines of a file.

    Attributes:
        content: the text of the last lines (ending with the file's final newline, if any).
        lines: how many lines ``content`` holds (a partial first line counts).
        start_offset: the byte offset ``content`` starts at (for ``context_read`` from there).
        truncated: ``True`` when the lines asked for were longer than ``max_bytes``: then only the
            whole lines that fit are returned, or, for one enormous line, its last ``max_bytes``
            on a character boundary.
        size: the file's size in bytes.
    """

    content: str
    lines: int
    start_offset: int
    truncated: bool
    size: int


def read_tail(path: Path, lines: int, *, max_bytes: int, block_size: int = _BLOCK) -> Tail:
    """The last ``lines`` lines of ``path``, reading backwards; at most ``max_bytes`` of text.

    A final newline ends the last line rather than starting an empty one, as ``tail`` counts.
    """
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if lines <= 0 or size == 0:
            return Tail("", 0, size, False, size)
        buf = b""
        pos = size
        found = -1
        # ``buf`` is always a suffix of the file; its final newline ends the last line.
        while True:
            body = buf[:-1] if buf.endswith(b"\n") else buf
            found = _nth_newline_from_end(body, lines)
            if found != -1 or pos == 0 or len(buf) > max_bytes:
                break
            step = min(block_size, pos)
            pos -= step
            fh.seek(pos)
            buf = fh.read(step) + buf
    # Not found: either the whole file has fewer lines, or we stopped past ``max_bytes`` and the
    # cut below marks the result truncated.
    start = found + 1 if found != -1 else 0
    data = buf[start:]
    truncated = False
    if len(data) > max_bytes:
        cut = len(data) - max_bytes
        newline = data.find(b"\n", cut, len(data) - 1)
        if newline != -1:
            cut = newline + 1  # start on a whole line when there is one to start on
        while cut < len(data) and _is_continuation(data[cut]):
            cut += 1
        data = data[cut:]
        start += cut
        truncated = True
    count = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    return Tail(data.decode("utf-8", errors="replace"), count, pos + start, truncated, size)


def _nth_newline_from_end(body: bytes, n: int) -> int:
    """Index of the ``n``-th newline counting back from the end of ``body``, or -1."""
    index = len(body)
    for _ in range(n):
        index = body.rfind(b"\n", 0, index)
        if index == -1:
            return -1
    return index
