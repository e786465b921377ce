"""``BoundedCache``: the one least-recently-used map shipagent keeps per-chat memos in.

Several components remember something per chat (the last ledger record written, a chat's
provider toolset, a toolset's tool listing) so the next turn can skip work. Each such memo must
stay bounded — an agent serving many chats must not grow without end — and each used to carry its
own ``OrderedDict`` with ``move_to_end`` / ``popitem(last=False)`` bookkeeping. This class is that
bookkeeping once: reading (``get``) or writing an entry makes it the most recent, and a write
beyond ``max_size`` drops the least recent; ``peek`` reads without touching the order, for memos
that drop the least recently *written* entry first. It is not thread-safe; callers that share one across threads
hold their own lock, as they did around the ``OrderedDict``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Generic, TypeVar, overload

__all__ = ["BoundedCache"]

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")


class BoundedCache(Generic[K, V]):
    """A map of at most ``max_size`` entries; the least recently read or written goes first."""

    __slots__ = ("_data", "max_size")

    def __init__(self, max_size: int) -> None:
        if max_size < 1:
            raise ValueError(f"a bounded cache holds at least one entry, not max_size={max_size}")
        self.max_size = max_size
        self._data: OrderedDict[K, V] = OrderedDict()

    @overload
    def get(self, key: K) -> V | None: ...
    @overload
    def get(self, key: K, default: D) -> V | D: ...
    def get(self, key: K, default: object = None) -> object:
        """The entry for ``key`` (now the most recent), or ``default``."""
        try:
            self._data.move_to_end(key)
        except KeyError:
            return default
        return self._data[key]

    @overload
    def peek(self, key: K) -> V | None: ...
    @overload
    def peek(self, key: K, default: D) -> V | D: ...
    def peek(self, key: K, default: object = None) -> object:
        """The entry for ``key``, or ``default``, leaving its recency alone.

        For memos whose order is the order of writes (a lookup must not keep an entry alive
        longer than its last write would).
        """
        return self._data.get(key, default)

    def __setitem__(self, key: K, value: V) -> None:
        """Store ``value`` as the most recent entry, dropping the least recent beyond the bound."""
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.max_size:
            self._data.popitem(last=False)

    @overload
    def pop(self, key: K) -> V | None: ...
    @overload
    def pop(self, key: K, default: D) -> V | D: ...
    def pop(self, key: K, default: object = None) -> object:
        """Remove and return the entry for ``key``, or ``default``."""
        return self._data.pop(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[K]:
        """The keys, least recent first (reading them does not make them recent)."""
        return iter(list(self._data))

    def clear(self) -> None:
        self._data.clear()
