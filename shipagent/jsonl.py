"""Append-only JSONL files: whole-line appends, torn-line tolerant reads, backward reads.

Every store under ``.ship/`` is built on these few functions so the crash rules hold everywhere:
an append is one ``write`` of a whole line on an ``O_APPEND`` descriptor; a reader skips a last line
that has no newline or does not parse (a crash mid-write) with a warning; a rewrite goes to a temp
file that is renamed over the original.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "append_line",
    "append_lines",
    "append_raw",
    "dumps",
    "iter_lines_backward",
    "iter_lines_backward_at",
    "iter_objects_backward",
    "open_append",
    "read_all",
    "read_last",
    "remove_stale_tmp",
    "rewrite",
    "rewrite_raw",
    "write_on_fresh_line",
]

log = logging.getLogger("shipagent.jsonl")
_BLOCK = 64 * 1024

# json.dumps with options builds a new encoder on every call; a turn writes a handful of lines.
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _dumps(obj: Any) -> bytes:
    return (_ENCODE(obj) + "\n").encode("utf-8")


def dumps(obj: Any) -> bytes:
    """One JSONL line (UTF-8, compact, ending in ``\n``) as every store writes it."""
    return _dumps(obj)


def append_lines(path: Path, objs: Iterable[Any], *, sync: bool = False) -> None:
    """Append objects as lines with a single ``write`` (so a crash tears at most the last line)."""
    append_raw(path, b"".join(_dumps(o) for o in objs), sync=sync)


def append_raw(path: Path, data: bytes, *, sync: bool = False) -> None:
    """Append already-serialised whole lines (each ending in ``\n``) with a single ``write``.

    ``sync``: ``fsync`` before returning, for a record that must survive a power loss once the
    caller acts on it (a channel's accepted message, before the platform is told).
    """
    if not data:
        return
    fd = open_append(path)
    try:
        write_on_fresh_line(fd, os.fstat(fd).st_size, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def write_on_fresh_line(fd: int, size: int, data: bytes) -> int:
    """Write ``data`` at the end of the ``O_APPEND`` file ``fd`` of ``size`` bytes, on a line of its own.

    A previous crash may have left a torn last line without ``\n``: the file's last byte is read
    back (one ``pread`` on the same descriptor) and, when it is not a newline, one is written first,
    so the torn fragment stays one bad line instead of corrupting this record too. The read is
    never skipped on the strength of "this process left the file at this size": another process
    can rewrite the file in place, or rename a new one over it that reuses the inode number, to
    the same size ending in a torn line. Returns the bytes written.
    """
    if size and os.pread(fd, 1, size - 1) != b"\n":
        data = b"\n" + data
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    return len(data)


def open_append(path: Path) -> int:
    """Open ``path`` for appending, creating it and its folders when missing.

    The folder is created only when the open says it is missing: a turn appends to four or five
    files from one worker thread, and every system call there lets go of the GIL and must win it
    back from the event loop, so the usual ``mkdir`` + ``stat`` before each open cost more than
    the write itself while other chats' turns kept the loop busy.
    """
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT
    try:
        return os.open(path, flags, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, flags, 0o644)


def append_line(path: Path, obj: Any, *, sync: bool = False) -> None:
    append_lines(path, [obj], sync=sync)


def _parse(raw: bytes, path: Path, *, last: bool) -> Any | None:
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        where = "torn last line" if last else "unreadable line"
        log.warning("%s: skipping %s (%d bytes)", path, where, len(raw))
        return None


def read_all(path: Path) -> list[Any]:
    """Every parseable line, oldest first. A missing file is empty."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    out = []
    for index, raw in enumerate(lines):
        if not raw.strip():
            continue
        obj = _parse(raw, path, last=index == len(lines) - 1)
        if obj is not None:
            out.append(obj)
    return out


def iter_lines_backward(path: Path, *, block_size: int = _BLOCK) -> Iterator[bytes]:
    """Yield raw lines newest first, reading the file backwards in blocks.

    Cost is proportional to what the caller consumes, not to the file size, so asking for the
    last 20 entries of a 1 GB transcript reads a few blocks.
    """
    for _, raw in iter_lines_backward_at(path, block_size=block_size):
        yield raw


def iter_lines_backward_at(
    path: Path, *, end: int | None = None, block_size: int = _BLOCK
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(byte offset where the line starts, raw line)`` newest first, from byte ``end`` back.

    ``end`` (default: the end of the file) lets a reader page backwards: pass the offset of the
    oldest line it has shown. Blank lines are skipped.
    """
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed by the ``with`` below; a generator can't wrap the try
    except FileNotFoundError:
        return
    with fh:
        size = fh.seek(0, os.SEEK_END)
        pos = size if end is None else max(0, min(end, size))
        tail = b""
        while pos > 0:
            step = min(block_size, pos)
            pos -= step
            fh.seek(pos)
            chunk = fh.read(step) + tail
            parts = chunk.split(b"\n")
            tail = parts[0]
            stop = pos + len(chunk)  # where the last part ends; each earlier one ends before a newline
            for raw in reversed(parts[1:]):
                start = stop - len(raw)
                if raw.strip():
                    yield start, raw
                stop = start - 1
        if tail.strip():
            yield 0, tail


def iter_objects_backward(path: Path) -> Iterator[Any]:
    """Parsed lines newest first; a torn or unreadable line is skipped with a warning.

    Like :func:`iter_lines_backward`, the cost follows what the caller consumes.
    """
    first = True
    for raw in iter_lines_backward(path):
        obj = _parse(raw, path, last=first)
        first = False
        if obj is not None:
            yield obj


def read_last(path: Path, count: int, *, skip: int = 0) -> list[Any]:
    """The last ``count`` parseable lines after skipping the newest ``skip`` ones, oldest first."""
    out: list[Any] = []
    for obj in iter_objects_backward(path):
        if skip:
            skip -= 1
            continue
        out.append(obj)
        if len(out) >= count:
            break
    out.reverse()
    return out


def rewrite(path: Path, objs: Iterable[Any]) -> None:
    """Replace the file's content atomically: write a temp file, fsync, rename over."""
    rewrite_raw(path, b"".join(_dumps(obj) for obj in objs))


def rewrite_raw(path: Path, data: bytes) -> None:
    """:func:`rewrite` with already-serialised whole lines (each ending in ``\n``).

    Lets a caller that keeps most lines of a file copy them as bytes instead of parsing and
    re-encoding each one (the agent-context window on every turn of a long chat).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:  # disk full, a bad object: leave the original and no temp file
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def remove_stale_tmp(folder: Path) -> int:
    """Delete the temp files (``.NAME.PID[.TID].tmp``) of atomic rewrites a dead process left.

    A process killed between writing a temp file and renaming it leaves the temp file behind; the
    original is intact, so the temp file is garbage. Only files whose writer process is gone are
    removed (another live process may be mid-rewrite). Returns how many were removed.
    """
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    removed = 0
    for name in names:
        if not (name.startswith(".") and name.endswith(".tmp")):
            continue
        pid = next((int(p) for p in reversed(name[1:-4].split(".")) if p.isdigit() and len(p) < 8), None)
        if pid is None or pid == os.getpid() or _alive(pid):
            continue
        try:
            os.unlink(folder / name)
            removed += 1
        except OSError:
            continue
    if removed:
        log.info("%s: removed %d stale temp file(s) of interrupted rewrites", folder, removed)
    return removed
