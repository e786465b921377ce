"""Pairing: an unknown sender gets a one-time code; the owner approves it from the command line.

The store is one JSON file, ``.ship/channels/pairing.json``, shared by the running host and
``shipagent channels pair`` / ``pending`` (another process; the host holds the project lock, so the
commands must not need it). Every change is a read-modify-write under an ``flock`` on a side file
and an atomic replace, and the host reads the file again whenever it changed, so a pairing takes
effect on the sender's next message without a restart.

A code is 8 characters from an alphabet without look-alikes, valid for one hour, used once. A
sender who writes again while their code is pending gets the same code (no flood of codes).
"""

from __future__ import annotations

import fcntl
import json
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import jsonl
from ...errors import ShipAgentError

__all__ = ["CODE_TTL_SECONDS", "PairingError", "PairingStore", "PendingCode"]

CODE_TTL_SECONDS = 3600.0
_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


class PairingError(ShipAgentError):
    """A pairing code that is unknown, used or expired."""


@dataclass(frozen=True, slots=True)
class PendingCode:
    """A code waiting for the owner: who asked, where, and until when (Unix time)."""

    code: str
    channel: str
    sender_id: str
    sender_name: str
    expires_at: float


class PairingStore:
    """Pending codes and paired senders of every channel of one project."""

    def __init__(self, directory: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = directory / "pairing.json"
        self._lock_path = directory / "pairing.lock"
        self._clock = clock
        self._cache: tuple[float, dict[str, Any]] | None = None

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock_path.open("a") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"pending": {}, "paired": {}}
        except ValueError as exc:
            raise PairingError(f"{self.path} is not valid JSON ({exc}); fix or delete it") from exc
        data.setdefault("pending", {})
        data.setdefault("paired", {})
        return data  # type: ignore[no-any-return]

    def _write(self, data: dict[str, Any]) -> None:
        jsonl.rewrite_raw(self.path, json.dumps(data, indent=1).encode("utf-8"))  # fsync, then rename
        self._cache = None

    def _drop_expired(self, data: dict[str, Any]) -> None:
        now = self._clock()
        data["pending"] = {c: p for c, p in data["pending"].items() if p["expiresAt"] > now}

    def is_paired(self, channel: str, sender_id: str) -> bool:
        """Whether the owner approved this sender (re-reads the file when it changed)."""
        try:
            mtime = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            return False
        if self._cache is None or self._cache[0] != mtime:
            with self._locked():
                self._cache = (mtime, self._read())
        return sender_id in self._cache[1]["paired"].get(channel, [])

    def request(self, channel: str, sender_id: str, sender_name: str) -> PendingCode:
        """The sender's pending code, issuing a new one if there is none (or it expired)."""
        with self._locked():
            data = self._read()
            self._drop_expired(data)
            for code, entry in data["pending"].items():
                if entry["channel"] == channel and entry["senderId"] == sender_id:
                    return PendingCode(code, channel, sender_id, entry["senderName"], entry["expiresAt"])
            code = "".join(secrets.choice(_ALPHABET) for _ in range(8))
            expires = self._clock() + CODE_TTL_SECONDS
            data["pending"][code] = {
                "channel": channel,
                "senderId": sender_id,
                "senderName": sender_name,
                "expiresAt": expires,
            }
            self._write(data)
            return PendingCode(code, channel, sender_id, sender_name, expires)

    def pending(self) -> list[PendingCode]:
        """Codes waiting for the owner, oldest first (expired ones are dropped)."""
        with self._locked():
            data = self._read()
            self._drop_expired(data)
        rows = [
            PendingCode(code, e["channel"], e["senderId"], e["senderName"], e["expiresAt"])
            for code, e in data["pending"].items()
        ]
        return sorted(rows, key=lambda p: p.expires_at)

    def pair(self, code: str) -> PendingCode:
        """Approve the sender behind ``code``; the code is used up.

        Raises:
            PairingError: no such pending code (mistyped, already used, or expired).
        """
        wanted = code.strip().upper()
        with self._locked():
            data = self._read()
            self._drop_expired(data)
            entry = data["pending"].pop(wanted, None)
            if entry is None:
                raise PairingError(
                    f"no pending pairing code {wanted!r}: it was mistyped, already used, or expired "
                    "(codes last one hour; `shipagent channels pending` lists the valid ones)"
                )
            paired = data["paired"].setdefault(entry["channel"], [])
            if entry["senderId"] not in paired:
                paired.append(entry["senderId"])
            self._write(data)
        return PendingCode(
            wanted, entry["channel"], entry["senderId"], entry["senderName"], entry["expiresAt"]
        )
