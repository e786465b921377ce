"""``jsonl.append_raw`` reads the file's last byte back before every append to a non-empty file.

A torn fragment another process left, a file renamed into place or rewritten in place to the
same size: whatever ended the file, the next record starts on a line of its own.
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


def test_every_append_checks_the_last_byte_and_a_foreign_fragment_gets_its_own_line(
    tmp_path: Path, preads: list[int]
) -> None:
    path = tmp_path / "log.jsonl"
    jsonl.append_line(path, {"n": 1})
    jsonl.append_line(path, {"n": 2})
    assert preads == [len(b'{"n":1}\n') - 1]  # an empty file has no last byte to read
    with path.open("ab") as fh:  # another writer crashed mid-line
        fh.write(b'{"n": 3, "torn')
    jsonl.append_line(path, {"n": 4})
    assert path.read_bytes().split(b"\n") == [b'{"n":1}', b'{"n":2}', b'{"n": 3, "torn', b'{"n":4}', b""]
    jsonl.append_line(path, {"n": 5})
    assert [o["n"] for o in jsonl.read_all(path)] == [1, 2, 4, 5]


_REFILL_SAME_SIZE = """
import sys
path, size = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as fh:  # cut in place and refilled to the same size, ending mid-line
    fh.truncate(0)
    fh.write(b'{"torn":"' + b"x" * (size - 9))
"""


def test_a_file_rewritten_in_place_to_the_same_size_does_not_swallow_the_next_record(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    jsonl.append_line(path, {"n": 1, "pad": "p" * 40})
    size, inode = path.stat().st_size, path.stat().st_ino
    subprocess.run([sys.executable, "-c", _REFILL_SAME_SIZE, str(path), str(size)], check=True, timeout=60)
    assert path.stat().st_size == size and path.stat().st_ino == inode
    jsonl.append_line(path, {"n": 2})
    assert jsonl.read_all(path) == [{"n": 2}]  # the torn fragment is its own bad line
    assert path.read_bytes().endswith(b'\n{"n":2}\n')


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
