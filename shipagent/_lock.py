"""``.ship/lock``: one process at a time writes a project's chats.

Two processes appending to the same chat's logs would each compact their own view of it and the
other's turns would vanish from the model's context. A started agent (``async with agent``) and
every CLI command that writes hold an exclusive ``fcntl.flock`` on ``.ship/lock`` for as long as
they run; the holder writes its pid and command into the file so a refused process can say who
has the project. The kernel drops the lock when the holder dies, even by SIGKILL, so a crash never
leaves a project locked.

Within one process the lock is shared and counted: nested ``async with agent``, several agents on
one project, and handover sub-agents all use the one ``flock``. Durable mode (several processes
coordinated through DBOS) turns it off with ``ShipAgent(..., project_lock=False)``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from .errors import ProjectLockedError

__all__ = ["LOCK_NAME", "ProjectLock"]

log = logging.getLogger("shipagent.lock")
LOCK_NAME = "lock"
_WORD = re.compile(r"[A-Za-z][\w.-]{0,40}")


@dataclass
class _Held:
    fd: int
    count: int


_held: dict[Path, _Held] = {}
_guard = threading.Lock()


def _command() -> str:
    """The program and its subcommand words (never free text: argv may hold what a user typed)."""
    argv = sys.argv or ["python"]
    words = [os.path.basename(argv[0]) or "python"]
    words += [a for a in argv[1:] if _WORD.fullmatch(a)][:2]
    return " ".join(words)


def _holder(fd: int) -> dict[str, Any]:
    try:
        raw = os.pread(fd, 4096, 0)
        info = json.loads(raw) if raw.strip() else {}
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


class ProjectLock:
    """The exclusive lock on one project's ``.ship/lock``, counted within this process.

    Args:
        project_root: the project directory.
        enabled: ``False`` makes :meth:`acquire` and :meth:`release` no-ops (durable mode, where
            several processes share a project through a database).
    """

    def __init__(self, project_root: Path, *, enabled: bool = True) -> None:
        self.path = Path(project_root).resolve() / ".ship" / LOCK_NAME
        self.enabled = enabled
        self._mine = 0

    @property
    def held(self) -> bool:
        """Whether this handle currently holds (a share of) the lock."""
        return self._mine > 0

    def acquire(self) -> None:
        """Take the lock (or another share of it, if this process has it already).

        Raises:
            ProjectLockedError: another process holds it; the message names its pid and command.
        """
        if not self.enabled:
            return
        with _guard:
            held = _held.get(self.path)
            if held is None:
                held = _Held(self._lock_file(), 0)
                _held[self.path] = held
            held.count += 1
            self._mine += 1

    def _lock_file(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            info = _holder(fd)
            os.close(fd)
            pid = info.get("pid") if isinstance(info.get("pid"), int) else None
            command = str(info["command"])[:200] if info.get("command") else None
            who = f"pid {pid}" if pid is not None else "an unknown pid"
            if command:
                who += f", `{command}`"
            since = f" since {info['since']}" if info.get("since") else ""
            raise ProjectLockedError(
                f"project {self.path.parent.parent} is in use by another process ({who}{since}); "
                f"stop it first, or wait for it to finish (lock file: {self.path})",
                pid=pid,
                command=command,
            ) from None
        except BaseException:
            os.close(fd)
            raise
        since = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        data = json.dumps({"pid": os.getpid(), "command": _command(), "since": since}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data + b"\n", 0)
        return fd

    def release(self) -> None:
        """Give back this handle's share; the last share in the process unlocks the file."""
        if self._mine == 0:
            return
        with _guard:
            self._mine -= 1
            held = _held.get(self.path)
            if held is None:
                return
            held.count -= 1
            if held.count > 0:
                return
            del _held[self.path]
            with contextlib.suppress(OSError):
                os.ftruncate(held.fd, 0)  # no stale holder shown to the next process
            os.close(held.fd)  # closing the descriptor drops the flock

    async def aacquire(self) -> None:
        """:meth:`acquire` off the event loop (it touches the disk)."""
        if self.enabled:
            await anyio.to_thread.run_sync(self.acquire)

    async def arelease(self) -> None:
        """:meth:`release` off the event loop."""
        if self._mine:
            await anyio.to_thread.run_sync(self.release)

    @contextlib.contextmanager
    def hold(self) -> Iterator[ProjectLock]:
        """``with lock.hold():`` for CLI commands that write without starting an agent."""
        self.acquire()
        try:
            yield self
        finally:
            self.release()
