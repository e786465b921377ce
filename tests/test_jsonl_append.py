"""``jsonl.append_raw`` reads the file's last byte back only when another writer may have ended it.

Its own whole appends are remembered by (device, inode) and size; anything else (a torn fragment
another process left, a file renamed into place, a fresh process) gets the torn-line check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shipagent import jsonl


@pytest.fixture
def preads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The offsets ``append_raw`` read a byte back at."""
    seen: list[int] = []
    real = os.pread

    def counting(fd: int, n: int, offset: int) -> bytes:
        seen.append(offset)
        return real(fd, n, offset)

    monkeypatch.setattr(os, "pread", counting)
    return seen


def test_own_appends_skip_the_read_back_and_a_foreign_fragment_still_gets_its_own_line(
    tmp_path: Path, preads: list[int]
) -> None:
    path = tmp_path / "log.jsonl"
    jsonl.append_line(path, {"n": 1})
    jsonl.append_line(path, {"n": 2})
    assert preads == []  # empty file, then the file as our own append left it
    with path.open("ab") as fh:  # another writer crashed mid-line
        fh.write(b'{"n": 3, "torn')
    jsonl.append_line(path, {"n": 4})
    assert len(preads) == 1
    assert path.read_bytes().split(b"\n") == [b'{"n":1}', b'{"n":2}', b'{"n": 3, "torn', b'{"n":4}', b""]
    jsonl.append_line(path, {"n": 5})
    assert len(preads) == 1 and [o["n"] for o in jsonl.read_all(path)] == [1, 2, 4, 5]


def test_a_file_renamed_into_place_is_checked(tmp_path: Path, preads: list[int]) -> None:
    path = tmp_path / "log.jsonl"
    jsonl.append_line(path, {"n": 1})
    tmp = tmp_path / "new.jsonl"
    tmp.write_bytes(b'{"n":1}\n{"n": "torn')  # same size class, other inode, no final newline
    os.replace(tmp, path)
    jsonl.append_line(path, {"n": 2})
    assert len(preads) == 1
    assert path.read_bytes().endswith(b'{"n": "torn\n{"n":2}\n')


def test_another_process_appending_whole_lines_in_between_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    code = "import sys; from pathlib import Path; from shipagent import jsonl; "
    code += "jsonl.append_raw(Path(sys.argv[1]), sys.argv[2].encode())"
    jsonl.append_line(path, {"by": "us", "n": 1})
    subprocess.run([sys.executable, "-c", code, str(path), '{"by":"them","n":2}'], check=True, timeout=60)
    subprocess.run([sys.executable, "-c", code, str(path), '{"by":"them","n":3'], check=True, timeout=60)
    jsonl.append_line(path, {"by": "us", "n": 4})
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and json.loads(lines[-2]) == {"by": "us", "n": 4}
    assert [o["n"] for o in jsonl.read_all(path)] == [1, 2, 4]  # their torn line alone on its line


def test_a_fragment_appended_in_this_process_is_not_taken_for_a_whole_line(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    jsonl.append_line(path, {"n": 1})
    jsonl.append_raw(path, b'{"n": 2, "half')  # what a failed write leaves
    jsonl.append_line(path, {"n": 3})
    assert [o["n"] for o in jsonl.read_all(path)] == [1, 3]
