"""A chat's pinned facts: short things the user said that every request carries, never compacted.

A compaction folds a chat's older messages into a summary, and a summary may lose a detail the
user gave on day one (their name, a preference, a decision). A pin keeps such a fact outside the
history, in ``.ship/chats/<key>/pins.json``, which no compaction reads or writes; the agent puts
the pins into every request's instructions (``shipagent.agent.instructions``).

The pins of a chat are bounded by ``context.pins.maxTokens``. Nothing is ever evicted to make
room: a pin that does not fit is refused with an error naming the oldest pins whose removal would
make room, and only the model (``context_unpin``) or the user (``/unpin``, ``agent.unpin``)
removes one. Ids (``p1``, ``p2``, …) are never reused in a chat, so "unpin p2" means one fact even
after p2 is gone and p3 arrived.

The file is rewritten whole, atomically (a temp file, fsync, ``os.replace``), under a lock per
chat (a thread lock and an ``flock`` on the chat's directory, so two processes on one project do
not lose each other's pins); a reader sees the old file or the new one, never half of either.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Literal, get_args

import anyio.to_thread

from .._context_config import PinsConfig
from ..chatkeys import ShipPaths, validate_chat_key
from ..errors import BadRequestError, ShipAgentError
from ..jsonl import rewrite_raw
from ..window.tokens import count_tokens

__all__ = [
    "PINS_FILE",
    "Pin",
    "PinAuthor",
    "PinError",
    "PinStore",
    "PinsFileError",
    "normalize_id",
    "pin_lines",
    "pins_tokens",
]

PINS_FILE = "pins.json"
"""The file, in the chat's directory (``ShipPaths.chat_dir``), that holds its pins."""

PinAuthor = Literal["model", "user", "api"]
"""Who pinned: the model (``context_pin``), the user (``/pin``) or a program (``agent.pin``)."""

_AUTHORS: frozenset[str] = frozenset(get_args(PinAuthor))
_VERSION = 1


@dataclass(frozen=True, slots=True)
class Pin:
    """One pinned fact of a chat.

    Attributes:
        id: ``p1``, ``p2``, … in the order pinned; never reused in the chat.
        text: the fact, on one line (whitespace runs became single spaces).
        created: when it was pinned (ISO 8601, UTC).
        by: who pinned it (``"model"``, ``"user"`` or ``"api"``).
    """

    id: str
    text: str
    created: str
    by: PinAuthor

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "text": self.text, "created": self.created, "by": self.by}


class PinError(BadRequestError):
    """A pin was refused (empty, or over ``context.pins.maxTokens``).

    Attributes:
        unpin: the ids of the oldest pins whose removal would make room (empty when no removal
            would: the pin alone is over the budget).
    """

    def __init__(self, message: str, *, unpin: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.unpin = tuple(unpin)


class PinsFileError(ShipAgentError):
    """A chat's ``pins.json`` is not what shipagent writes (edited by hand, or another program's)."""


def pin_lines(pins: Sequence[Pin]) -> str:
    """The pins as the model reads them, one ``- [p1] text`` line each (what the budget counts)."""
    return "\n".join(f"- [{pin.id}] {pin.text}" for pin in pins)


def pins_tokens(pins: Sequence[Pin]) -> int:
    """The tokens the pins' lines cost (the fixed heading around them is not counted)."""
    return count_tokens(pin_lines(pins))


@dataclass(frozen=True, slots=True)
class _Board:
    """A ``pins.json``: the pins, oldest first, and the number the next pin's id takes."""

    pins: tuple[Pin, ...] = ()
    next: int = 1

    def to_bytes(self) -> bytes:
        data = {"version": _VERSION, "next": self.next, "pins": [p.to_json() for p in self.pins]}
        return (json.dumps(data, ensure_ascii=False, indent=1) + "\n").encode("utf-8")


_LOCKS = tuple(threading.Lock() for _ in range(64))
"""Striped per-chat locks for this process (a chat's path picks one; no table that grows)."""


def _parse(path: Path, raw: bytes) -> _Board:
    """The board in ``raw`` (the content of ``path``), or :class:`PinsFileError` saying what is wrong."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PinsFileError(f"{path} is not valid JSON ({exc}): fix it or delete it") from None
    if not isinstance(data, dict) or not isinstance(data.get("pins"), list):
        raise PinsFileError(f"{path}: expected an object with a 'pins' list: fix it or delete it")
    pins: list[Pin] = []
    highest = 0
    for n, item in enumerate(data["pins"]):
        fields: dict[str, Any] = item if isinstance(item, dict) else {}
        pin_id, text, created, by = (fields.get(k) for k in ("id", "text", "created", "by"))
        number = _number(pin_id)
        if not (number and isinstance(text, str) and isinstance(created, str) and by in _AUTHORS):
            raise PinsFileError(
                f"{path}: pins[{n}] needs string fields id (p<number>), text, created and by "
                f"(one of {', '.join(sorted(_AUTHORS))}): fix it or delete it"
            )
        pins.append(Pin(f"p{number}", text, created, by))
        highest = max(highest, number)
    after = data.get("next")
    following = after if isinstance(after, int) and after > highest else highest + 1
    return _Board(tuple(pins), following)


def _number(pin_id: object) -> int:
    """The number of a pin id ``p<number>``, or 0 when it is not one."""
    if isinstance(pin_id, str) and pin_id[:1] == "p" and pin_id[1:].isdigit() and pin_id[1:2] != "0":
        return int(pin_id[1:])
    return 0


def normalize_id(pin_id: str) -> str:
    """``p3`` for ``"p3"``, ``"P3"``, ``" 3 "`` and ``"[p3]"`` (how people and models write it)."""
    cleaned = pin_id.strip().strip("[]").strip().lower()
    return f"p{cleaned}" if cleaned.isdigit() else cleaned


class PinStore:
    """The pins of a project's chats, in ``.ship/chats/<key>/pins.json``.

    The ``async`` methods do their file work in a worker thread; the ``*_sync`` ones are for
    callers that are not on an event loop (the ``inspect`` command).
    """

    def __init__(
        self, paths: ShipPaths, config: PinsConfig, *, clock: Callable[[], datetime] | None = None
    ) -> None:
        self.paths = paths
        self.config = config
        self.clock = clock or partial(datetime.now, UTC)

    def path(self, chat_key: str) -> Path:
        """Where the chat's pins live (the chat key is encoded: it cannot leave ``.ship/chats``)."""
        return self.paths.chat_dir(validate_chat_key(chat_key)) / PINS_FILE

    # -- reading ----------------------------------------------------------------------------------

    def load_sync(self, chat_key: str) -> list[Pin]:
        """The chat's pins, oldest first (none when it has no ``pins.json``).

        Raises:
            PinsFileError: the file exists but is not a pins file.
        """
        return list(self._read(self.path(chat_key)).pins)

    async def load(self, chat_key: str) -> list[Pin]:
        """:meth:`load_sync` in a worker thread."""
        return await anyio.to_thread.run_sync(self.load_sync, chat_key)

    @staticmethod
    def _read(path: Path) -> _Board:
        try:
            raw = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return _Board()
        return _parse(path, raw)

    # -- writing ----------------------------------------------------------------------------------

    def add_sync(self, chat_key: str, text: str, *, by: PinAuthor) -> Pin:
        """Pin ``text`` (whitespace runs become single spaces) and return the new pin.

        Raises:
            PinError: ``text`` is empty, or the pins would pass ``context.pins.maxTokens``; the
                message names the pins to unpin first.
            PinsFileError: the chat's ``pins.json`` is damaged (it is left as it is).
        """
        if by not in _AUTHORS:
            raise BadRequestError(f"a pin's author must be one of {sorted(_AUTHORS)}, got {by!r}")
        if not isinstance(text, str):
            raise PinError(f"a pin's text must be a string, got {type(text).__name__}")
        fact = " ".join(text.split())
        if not fact:
            raise PinError("a pin needs text: the text given is empty")
        path = self.path(chat_key)
        with self._locked(path):
            board = self._read(path)
            pin = Pin(f"p{board.next}", fact, self.clock().astimezone(UTC).isoformat(), by)
            self._check_room(board.pins, pin)
            rewrite_raw(path, _Board((*board.pins, pin), board.next + 1).to_bytes())
        return pin

    async def add(self, chat_key: str, text: str, *, by: PinAuthor) -> Pin:
        """:meth:`add_sync` in a worker thread."""
        return await anyio.to_thread.run_sync(partial(self.add_sync, chat_key, text, by=by))

    def remove_sync(self, chat_key: str, pin_id: str) -> bool:
        """Unpin ``pin_id`` (``p3``; ``3`` and ``P3`` work too); ``False`` if the chat has no such pin.

        Raises:
            PinsFileError: the chat's ``pins.json`` is damaged (it is left as it is).
        """
        wanted = normalize_id(pin_id) if isinstance(pin_id, str) else ""
        path = self.path(chat_key)
        if not path.exists():
            return False
        with self._locked(path):
            board = self._read(path)
            kept = tuple(p for p in board.pins if p.id != wanted)
            if len(kept) == len(board.pins):
                return False
            rewrite_raw(path, _Board(kept, board.next).to_bytes())
        return True

    async def remove(self, chat_key: str, pin_id: str) -> bool:
        """:meth:`remove_sync` in a worker thread."""
        return await anyio.to_thread.run_sync(self.remove_sync, chat_key, pin_id)

    def _check_room(self, pins: Sequence[Pin], pin: Pin) -> None:
        """Refuse ``pin`` when the pins with it would cost more than ``context.pins.maxTokens``."""
        limit = self.config.max_tokens
        alone = pins_tokens([pin])
        if alone > limit:
            raise PinError(
                f"this pin is {alone} tokens, more than context.pins.maxTokens ({limit}, ship.json) "
                "allows for all pins together: shorten it"
            )
        total = pins_tokens([*pins, pin])
        if total <= limit:
            return
        room = list(pins)
        unpin: list[Pin] = []
        while room and pins_tokens([*room, pin]) > limit:  # the oldest go first
            unpin.append(room.pop(0))
        names = ", ".join(f"{p.id} ({_quote(p.text)})" for p in unpin)
        raise PinError(
            f"the pins would be {total} tokens with this one, over context.pins.maxTokens ({limit}, "
            f"ship.json): unpin {names} first, or a pin of your choice that frees as much",
            unpin=[p.id for p in unpin],
        )

    @staticmethod
    @contextlib.contextmanager
    def _locked(path: Path) -> Iterator[None]:
        """The chat's pins to this caller alone: a thread lock, then an ``flock`` on its directory."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with _LOCKS[zlib.crc32(str(path).encode()) % len(_LOCKS)]:
            fd = os.open(path.parent, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # (closing drops the flock)


def _quote(text: str, width: int = 40) -> str:
    return json.dumps(text if len(text) <= width else text[: width - 1] + "…", ensure_ascii=False)
