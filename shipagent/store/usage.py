"""``.ship/chats/<chat>/usage.json``: what one chat used, per UTC day and per UTC month.

A budget per chat (ship.json ``context.budgets``) needs the chat's use so far, and that must
survive a restart, so it is kept beside the chat's logs in one small file: the current day and
month with a few past ones (:data:`KEEP_DAYS`, :data:`KEEP_MONTHS`), never a log that grows.
Each model response adds its tokens (and its cost, when the model's price is known) through
:meth:`UsageStore.add`, which writes the whole file anew while holding an ``flock`` on the chat's
directory, so two processes or two threads adding at once never lose one another's tokens (how
the new file takes the old one's place, and why not by ``os.replace``: :func:`_swap`).

A file that cannot be read as usage data is an error naming it (:class:`UsageFileError`), never
silently a chat that used nothing: that would lift every budget of the chat. The chat's
history is not touched by any of this.

Blocking; async callers go through ``anyio.to_thread`` (:meth:`UsageStore.aread`,
:meth:`UsageStore.aadd`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio

from ..chatkeys import ShipPaths
from ..errors import ShipAgentError

__all__ = [
    "KEEP_DAYS",
    "KEEP_MONTHS",
    "USAGE_NAME",
    "ChatUsage",
    "Spend",
    "UsageBucket",
    "UsageFileError",
    "UsageStore",
]

USAGE_NAME = "usage.json"
_NEW = f".{USAGE_NAME}.new"
"""The next version, written before it takes ``usage.json``'s place."""
_OLD = f".{USAGE_NAME}.old"
"""The version before, kept until the next write: what a power cut mid-swap falls back to."""
KEEP_DAYS = 7
"""Days kept in the file: today and the six before (``GET .../usage`` shows them)."""
KEEP_MONTHS = 3
KEEP_TURNS = 32
"""Request ids whose responses were counted, remembered so a durable replay counts nothing twice."""
_VERSION = 1


class UsageFileError(ShipAgentError):
    """A chat's ``usage.json`` is not usage data; ``path`` names the file."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(
            f"{path} is not a readable usage file ({why}); fix it, or delete it to count this "
            "chat's use from zero again"
        )
        self.path = path


@dataclass(frozen=True, slots=True)
class Spend:
    """What one model response used. ``cost`` is ``None`` when the model's price is unknown."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None


@dataclass(frozen=True, slots=True)
class UsageBucket:
    """One period's use: ``period`` is ``2026-11-27`` (a UTC day) or ``2026-11`` (a UTC month).

    ``cost`` sums the responses whose price was known; ``unpriced`` counts the others, so a reader
    knows whether ``cost`` is the whole cost, a lower bound, or nothing at all.
    """

    period: str
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    cost: float = 0.0
    unpriced: int = 0

    @property
    def tokens(self) -> int:
        """Input plus output tokens (cached input tokens are part of the input)."""
        return self.input_tokens + self.output_tokens

    @property
    def priced(self) -> bool:
        """Whether any response of the period had a known price (else the cost is unknown)."""
        return self.requests > self.unpriced

    def plus(self, spend: Spend) -> UsageBucket:
        return replace(
            self,
            input_tokens=self.input_tokens + spend.input_tokens,
            cached_input_tokens=self.cached_input_tokens + spend.cached_input_tokens,
            output_tokens=self.output_tokens + spend.output_tokens,
            requests=self.requests + 1,
            cost=self.cost + (spend.cost or 0.0),
            unpriced=self.unpriced + (spend.cost is None),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "period": self.period,
            "inputTokens": self.input_tokens,
            "cachedInputTokens": self.cached_input_tokens,
            "outputTokens": self.output_tokens,
            "requests": self.requests,
            "cost": self.cost,
            "unpricedRequests": self.unpriced,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> UsageBucket:
        if not isinstance(data, dict) or not isinstance(data.get("period"), str):
            raise ValueError(f"{where} must be an object with a 'period' string")
        counts: dict[str, int] = {}
        for name, key in (
            ("input_tokens", "inputTokens"),
            ("cached_input_tokens", "cachedInputTokens"),
            ("output_tokens", "outputTokens"),
            ("requests", "requests"),
            ("unpriced", "unpricedRequests"),
        ):
            value = data.get(key, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{where}.{key} must be a whole number >= 0")
            counts[name] = value
        cost = data.get("cost", 0.0)
        if not isinstance(cost, int | float) or isinstance(cost, bool) or cost < 0:
            raise ValueError(f"{where}.cost must be a number >= 0")
        return cls(data["period"], cost=float(cost), **counts)


@dataclass(frozen=True, slots=True)
class ChatUsage:
    """A chat's ``usage.json``: recent days and months (oldest first) and the turns counted."""

    days: tuple[UsageBucket, ...] = ()
    months: tuple[UsageBucket, ...] = ()
    turns: dict[str, int] = field(default_factory=dict)
    """Request id → how many of its model responses are counted (a durable replay's are not)."""

    def day(self, period: str) -> UsageBucket:
        """The use of UTC day ``period`` (``YYYY-MM-DD``); zero when nothing was used that day."""
        return next((b for b in self.days if b.period == period), UsageBucket(period))

    def month(self, period: str) -> UsageBucket:
        """The use of UTC month ``period`` (``YYYY-MM``); zero when nothing was used that month."""
        return next((b for b in self.months if b.period == period), UsageBucket(period))

    def plus(self, spend: Spend, *, day: str, month: str) -> ChatUsage:
        return replace(
            self,
            days=_bump(self.days, self.day(day).plus(spend), KEEP_DAYS),
            months=_bump(self.months, self.month(month).plus(spend), KEEP_MONTHS),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": _VERSION,
            "days": [b.to_json() for b in self.days],
            "months": [b.to_json() for b in self.months],
            "turns": self.turns,
        }

    @classmethod
    def from_json(cls, data: Any) -> ChatUsage:
        if not isinstance(data, dict):
            raise ValueError("the file must hold a JSON object")
        if data.get("version") != _VERSION:
            raise ValueError(f"'version' must be {_VERSION}")
        lists: dict[str, tuple[UsageBucket, ...]] = {}
        for name in ("days", "months"):
            items = data.get(name, [])
            if not isinstance(items, list):
                raise ValueError(f"'{name}' must be a list")
            lists[name] = tuple(UsageBucket.from_json(b, f"{name}[{i}]") for i, b in enumerate(items))
        turns = data.get("turns", {})
        if not isinstance(turns, dict) or not all(
            isinstance(n, int) and not isinstance(n, bool) for n in turns.values()
        ):
            raise ValueError("'turns' must map request ids to whole numbers")
        return cls(lists["days"], lists["months"], dict(turns))


def _bump(buckets: tuple[UsageBucket, ...], bucket: UsageBucket, keep: int) -> tuple[UsageBucket, ...]:
    """``buckets`` with ``bucket`` in place of its period's (or added), sorted, the newest ``keep``."""
    merged = {b.period: b for b in buckets}
    merged[bucket.period] = bucket
    return tuple(merged[p] for p in sorted(merged))[-keep:]


class UsageStore:
    """Every chat's ``usage.json`` of one project (cheap to create: it holds only paths)."""

    def __init__(self, paths: ShipPaths) -> None:
        self.paths = paths

    def path(self, chat_key: str) -> Path:
        """``.ship/chats/<encoded chat key>/usage.json``."""
        return self.paths.chat_dir(chat_key) / USAGE_NAME

    def read(self, chat_key: str) -> ChatUsage:
        """The chat's use so far (empty when it never used anything).

        Raises:
            UsageFileError: the file exists but is not usage data.
        """
        path = self.path(chat_key)
        if not path.parent.is_dir():
            return ChatUsage()
        with _locked(path.parent, shared=True):  # never between the two renames of a write
            return self._read(path)

    def add(
        self, chat_key: str, spend: Spend, *, day: str, month: str, turn: tuple[str, int] | None = None
    ) -> ChatUsage:
        """Add ``spend`` to the chat's ``day`` and ``month``; the chat's use afterwards.

        ``turn``: ``(request id, number of this response within its turn)``. A response whose
        number the file already counted for that request id is not added again (a durable worker
        replaying a recorded turn sees the same responses a second time).

        Raises:
            UsageFileError: the file exists but is not usage data (it is left as it is).
        """
        path = self.path(chat_key)
        with _locked(path.parent):
            usage = self._read(path)
            if turn is not None:
                request_id, number = turn
                if usage.turns.get(request_id, 0) >= number:
                    return usage
                turns = {k: v for k, v in usage.turns.items() if k != request_id}
                turns[request_id] = number
                usage = replace(usage, turns=dict(list(turns.items())[-KEEP_TURNS:]))
            usage = usage.plus(spend, day=day, month=month)
            _swap(path, json.dumps(usage.to_json(), indent=1).encode())
            return usage

    async def aread(self, chat_key: str) -> ChatUsage:
        """:meth:`read` in a worker thread."""
        return await anyio.to_thread.run_sync(self.read, chat_key)

    async def aadd(
        self, chat_key: str, spend: Spend, *, day: str, month: str, turn: tuple[str, int] | None = None
    ) -> ChatUsage:
        """:meth:`add` in a worker thread."""
        return await anyio.to_thread.run_sync(
            lambda: self.add(chat_key, spend, day=day, month=month, turn=turn)
        )

    @staticmethod
    def _read(path: Path) -> ChatUsage:
        """The chat's usage, under the folder's lock; what :func:`_swap` left if it was cut.

        ``usage.json`` missing while ``.usage.json.new`` exists: a write was killed between its
        two renames, and the new version is whole. ``usage.json`` empty: a power cut lost the
        data of a write (the rename reached the disk, the bytes did not): the version before
        it, without the newest response, is the chat's use, as the docstring of :func:`_swap`
        allows. A file with anything else in it that is not usage data is an error naming it.
        """
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raw = None
        if raw:
            return _parse(path, raw)
        for fallback in (path.with_name(_NEW), path.with_name(_OLD)):
            with contextlib.suppress(OSError, UsageFileError):
                return _parse(fallback, fallback.read_bytes())
        if raw is None:
            return ChatUsage()
        raise UsageFileError(path, "it is empty")


def _whole(path: Path) -> bool:
    """Whether ``path`` holds usage data (a write killed before its data left it empty)."""
    try:
        _parse(path, path.read_bytes())
    except (OSError, UsageFileError):
        return False
    return True


def _parse(path: Path, raw: bytes) -> ChatUsage:
    try:
        return ChatUsage.from_json(json.loads(raw))
    except UnicodeDecodeError:
        raise UsageFileError(path, "it is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise UsageFileError(path, f"not JSON: {exc.msg} at line {exc.lineno}") from None
    except ValueError as exc:
        raise UsageFileError(path, str(exc)) from None


@contextlib.contextmanager
def _locked(folder: Path, *, shared: bool = False) -> Iterator[None]:
    """An ``flock`` on ``folder`` (made if missing): one writer of its usage file at a time, and
    readers (``shared``) only between writes."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor drops the lock


def _swap(path: Path, data: bytes) -> None:
    """Make ``data`` the content of ``path`` (the caller holds the folder's lock).

    ``data`` goes to ``.usage.json.new``; the current file becomes ``.usage.json.old`` (the one
    before that is removed) and the new one takes its name. Readers take the lock, so none sees
    the moment between the renames; a process killed there leaves ``.new`` whole, which
    :meth:`UsageStore._read` then reads.

    Why not ``os.replace`` over the file: on ext4 (``auto_da_alloc``) a rename over an existing
    file writes the new file's data to the disk first, ~1-1.5 ms on every model response; these
    renames replace nothing and cost ~0.1 ms. The price is that a power cut soon after a write
    may leave ``usage.json`` empty (the rename reached the disk, the data did not); the reader
    then takes ``.old``, losing the newest response's count. No ``fsync`` either way: it would
    cost every response ~5-10 ms, and what it guards against costs a budget a few responses.
    """
    new, old = path.with_name(_NEW), path.with_name(_OLD)
    if new.exists() and not path.exists() and _whole(new):  # finish the swap a kill cut, before
        os.rename(new, path)  # writing over ``.new`` (one killed before its data is not a version)
    try:
        with open(new, "wb") as fh:
            fh.write(data)
    except BaseException:  # disk full: no half-written file left behind
        with contextlib.suppress(OSError):
            os.unlink(new)
        raise
    with contextlib.suppress(FileNotFoundError):
        os.unlink(old)
    with contextlib.suppress(FileNotFoundError):  # missing after a write killed between renames
        os.rename(path, old)
    os.rename(new, path)
