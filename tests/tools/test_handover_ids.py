"""uuid7 ids: RFC 9562 layout, and strictly increasing so card ids sort by creation time."""

from __future__ import annotations

import time
import uuid

from shipagent.store.cards._ids import Uuid7Generator, uuid7


def test_layout_follows_rfc_9562() -> None:
    before = time.time_ns() // 1_000_000
    value = uuid7()
    after = time.time_ns() // 1_000_000
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    bits = value.int
    assert (bits >> 76) & 0xF == 0x7  # version nibble
    assert (bits >> 62) & 0b11 == 0b10  # variant bits
    assert before <= bits >> 80 <= after  # 48-bit millisecond timestamp
    assert len(value.hex) == 32


def test_pinned_timestamp_is_the_top_48_bits() -> None:
    ms = 0x0189_A1B2_C3D4
    assert Uuid7Generator()(now_ms=ms).int >> 80 == ms


def test_ids_in_one_millisecond_strictly_increase() -> None:
    gen = Uuid7Generator()
    ms = 0x0200_0000_0000
    ids = [gen(now_ms=ms) for _ in range(5000)]  # more than the 12-bit counter holds
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 for i in ids)
    # the counter overflowed and borrowed the next millisecond instead of wrapping around
    assert ids[-1].int >> 80 > ms


def test_clock_stepping_back_keeps_order() -> None:
    gen = Uuid7Generator()
    first = gen(now_ms=0x0300_0000_0000)
    second = gen(now_ms=0x0300_0000_0000 - 5000)
    assert second > first
    assert second.hex > first.hex  # hex order (what SQLite compares) agrees


def test_random_bits_differ_between_generators() -> None:
    ms = 0x0400_0000_0000
    assert Uuid7Generator()(now_ms=ms) != Uuid7Generator()(now_ms=ms)
