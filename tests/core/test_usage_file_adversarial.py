"""A chat's ``usage.json`` against real processes: writers killed mid-write, writers adding at once.

The processes are forked children running :meth:`UsageStore.add`; a kill is a real ``SIGKILL`` the
child sends itself at a chosen step of the write (opening ``.usage.json.new``, or writing to it).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path
from typing import Any

from shipagent.chatkeys import ShipPaths
from shipagent.store import usage
from shipagent.store.usage import Spend, UsageStore

KEY = "api:chat:usage"
DAY, MONTH = "2026-03-10", "2026-03"
SPEND = Spend(100, 0, 10, None)
_FORK = multiprocessing.get_context("fork")


def _requests(store: UsageStore) -> int:
    return store.read(KEY).day(DAY).requests


def _killed_writing(store: UsageStore, step: str) -> None:
    """A child: add one response, killed (SIGKILL) as it opens ``.usage.json.new`` (``step``
    ``"open"``) or once it has opened it, before its data (``"write"``)."""
    real_open = open

    class Dying:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if step == "open":
                os.kill(os.getpid(), signal.SIGKILL)
            self.file = real_open(*args, **kwargs)

        def __enter__(self) -> Dying:
            return self

        def __exit__(self, *exc: object) -> None:
            self.file.close()

        def write(self, data: bytes) -> int:
            os.kill(os.getpid(), signal.SIGKILL)
            return 0

    usage.open = Dying  # type: ignore[attr-defined]  # this child's module only
    store.add(KEY, SPEND, day=DAY, month=MONTH)


def _run(target: Any, *args: Any) -> int | None:
    child = _FORK.Process(target=target, args=args)
    child.start()
    child.join()
    return child.exitcode


def test_a_first_write_killed_before_its_data_and_the_next_killed_too_still_reads_back(
    tmp_path: Path,
) -> None:
    store = UsageStore(ShipPaths(tmp_path))
    assert _run(_killed_writing, store, "write") == -signal.SIGKILL  # the chat's first write
    assert store.path(KEY).with_name(".usage.json.new").read_bytes() == b""
    assert _requests(store) == 0
    assert _run(_killed_writing, store, "open") == -signal.SIGKILL  # the next one
    assert _requests(store) == 0  # nothing was ever counted: not an error about an empty file
    store.add(KEY, SPEND, day=DAY, month=MONTH)
    assert _requests(store) == 1


def _adds(store: UsageStore, times: int) -> None:
    for _ in range(times):
        store.add(KEY, SPEND, day=DAY, month=MONTH)


def test_processes_adding_at_once_lose_no_count_and_a_reader_never_sees_one_go_back(tmp_path: Path) -> None:
    store = UsageStore(ShipPaths(tmp_path))
    store.add(KEY, SPEND, day=DAY, month=MONTH)
    writers, adds = 3, 40
    children = [_FORK.Process(target=_adds, args=(store, adds)) for _ in range(writers)]
    for child in children:
        child.start()
    seen = []
    while any(child.is_alive() for child in children):
        seen.append(_requests(store))
    for child in children:
        child.join()
    assert [child.exitcode for child in children] == [0] * writers
    assert _requests(store) == 1 + writers * adds
    assert seen == sorted(seen) and min(seen, default=1) >= 1
