"""UUIDv7 identifiers for cards and boxes (RFC 9562 §5.7).

Python 3.11 has no ``uuid.uuid7``. Version 7 ids start with a 48-bit millisecond timestamp, so card
ids sort by creation time: a box listing, a ``SELECT ... ORDER BY card_id`` and a human reading two
ids all agree on which came first. Within one millisecond the 12-bit ``rand_a`` field is used as a
counter (RFC 9562 §6.2, method 1) so ids made in a burst stay strictly increasing too.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

__all__ = ["Uuid7Generator", "new_id", "uuid7"]

_SEQ_MAX = 0xFFF


class Uuid7Generator:
    """A source of version-7 UUIDs, each strictly greater than the previous one it made.

    Layout (128 bits, most significant first): ``unix_ts_ms`` 48 | ``ver`` 4 = 0b0111 |
    ``rand_a`` 12 (counter within a millisecond) | ``var`` 2 = 0b10 | ``rand_b`` 62 (random).
    Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_seq = 0

    def __call__(self, *, now_ms: int | None = None) -> uuid.UUID:
        """A new id.

        Args:
            now_ms: the Unix time in milliseconds to use instead of the clock (tests pin it).
        """
        ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        with self._lock:
            if ms > self._last_ms:
                # Seed the counter in its lower half: a burst gets >= 2048 increments before overflow.
                seq = int.from_bytes(os.urandom(2), "big") & 0x7FF
            else:
                # Same millisecond, or the clock stepped back: keep counting from the last id.
                ms = self._last_ms
                seq = self._last_seq + 1
                if seq > _SEQ_MAX:
                    ms += 1  # borrow the next millisecond rather than lose ordering
                    seq = 0
            self._last_ms, self._last_seq = ms, seq
        rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
        value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | seq << 64 | 0b10 << 62 | rand_b
        return uuid.UUID(int=value)


uuid7 = Uuid7Generator()
"""The process-wide generator: ``uuid7()`` returns a new :class:`uuid.UUID` of version 7."""


def new_id() -> str:
    """A card or box id: the 32-character hex form of :func:`uuid7`."""
    return uuid7().hex
