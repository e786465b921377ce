"""A chat's ``usage.json`` stays readable through the ways a write can be cut.

Each model response writes the file anew: ``.usage.json.new`` first, then the current file
becomes ``.usage.json.old`` and the new one takes its name. These tests leave the folder as a
kill or a power cut would at each step and read it back; and they race writers against readers
in real threads, where a reader must never see the moment between the two renames.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from pathlib import Path

import pytest

from shipagent.chatkeys import ShipPaths
from shipagent.store.usage import Spend, UsageFileError, UsageStore

KEY = "api:chat:usage"
DAY, MONTH = "2026-03-10", "2026-03"
SPEND = Spend(100, 0, 10, None)


def _store(tmp_path: Path) -> UsageStore:
    return UsageStore(ShipPaths(tmp_path))


def _add(store: UsageStore, times: int = 1) -> None:
    for _ in range(times):
        store.add(KEY, SPEND, day=DAY, month=MONTH)


def _requests(store: UsageStore) -> int:
    return store.read(KEY).day(DAY).requests


def test_a_write_keeps_the_version_before_it_and_leaves_no_new_file(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _add(store, 3)
    path = store.path(KEY)
    old = path.with_name(".usage.json.old")
    assert json.loads(path.read_text())["days"][0]["requests"] == 3
    assert json.loads(old.read_text())["days"][0]["requests"] == 2
    assert not path.with_name(".usage.json.new").exists()


def test_a_write_killed_between_its_renames_is_read_from_the_new_file_and_finished_by_the_next(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    _add(store, 2)
    path = store.path(KEY)
    new = path.with_name(".usage.json.new")
    # What a kill after "usage.json -> .old" and before ".new -> usage.json" leaves.
    new.write_bytes(path.read_bytes().replace(b'"requests": 2', b'"requests": 3'))
    path.rename(path.with_name(".usage.json.old"))

    assert _requests(store) == 3
    _add(store)
    assert _requests(store) == 4 and json.loads(path.read_text())["days"][0]["requests"] == 4
    assert not new.exists()


def test_an_empty_file_after_a_power_cut_falls_back_to_the_version_before(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _add(store, 5)
    store.path(KEY).write_bytes(b"")  # the rename reached the disk, the data did not
    assert _requests(store) == 4  # the newest response's count is what the cut lost
    _add(store)
    assert _requests(store) == 5


def test_an_empty_file_with_nothing_to_fall_back_to_is_an_error_naming_it(tmp_path: Path) -> None:
    store = _store(tmp_path)
    path = store.path(KEY)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    with pytest.raises(UsageFileError, match="is empty") as caught:
        store.read(KEY)
    assert caught.value.path == path


def test_a_damaged_file_is_an_error_even_when_an_older_version_exists(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _add(store, 2)
    path = store.path(KEY)
    path.write_text('{"version": 1, "days": "many"}')
    with pytest.raises(UsageFileError, match="'days' must be a list"):
        store.read(KEY)
    with pytest.raises(UsageFileError):
        _add(store)
    assert path.read_text() == '{"version": 1, "days": "many"}'  # kept as found


def test_threads_writing_at_once_lose_nothing_and_readers_never_go_backwards(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _add(store)
    writers, adds = 3, 40
    seen: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def write() -> None:
        try:
            _add(store, adds)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def read() -> None:
        try:
            while not done.is_set():
                seen.append(_requests(store))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    threads = [threading.Thread(target=write) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    reader.join()

    assert errors == []
    assert _requests(store) == 1 + writers * adds
    assert seen and min(seen) >= 1 and seen == sorted(seen)  # never zero, never backwards


def test_a_reader_waits_for_a_write_that_holds_the_folder(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _add(store, 2)
    path = store.path(KEY)
    got: list[int] = []
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a writer between its renames: no usage.json at all
        path.rename(path.with_name(".usage.json.old"))
        reader = threading.Thread(target=lambda: got.append(_requests(store)))
        reader.start()
        reader.join(0.2)
        assert reader.is_alive() and got == []
        path.with_name(".usage.json.old").rename(path)  # the writer ends (here: as it began)
    finally:
        os.close(fd)
    reader.join()
    assert got == [2]
