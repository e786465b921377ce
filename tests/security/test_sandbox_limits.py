"""A command cannot exhaust the server's disk or process table.

``permissions.execShell.maxOutputBytes`` bounds what one stream stores (head and tail kept, the
drop said), ``maxProcesses`` how many processes run at once, ``maxFileBytes`` the size of a file
it writes. Against the real server of ``conftest.hostile`` (1 MiB, 400 processes, 4 MiB).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from shipagent.tools._output import Store

from .conftest import Hostile

MiB = 1024 * 1024


def test_fifty_megabytes_of_output_store_one(hostile: Hostile) -> None:
    output = hostile.shell("head -c 50000000 /dev/zero | tr '\\0' y; echo; echo last-line")
    assert output["droppedBytes"]["stdout"] == 50_000_000 + len("\nlast-line\n") - MiB
    assert "maxOutputBytes" in output["note"] and "dropped" in output["note"]
    stored = hostile.root / output["outputFiles"]["stdout"]
    size = stored.stat().st_size
    assert MiB <= size < MiB + 500  # head and tail, plus the line that says what was dropped
    data = stored.read_bytes()
    assert data.startswith(b"y" * 1000) and data.endswith(b"y\nlast-line\n")
    assert b"bytes dropped here" in data
    assert output["stdout"].endswith("last-line\n")  # the model still sees the tail


def test_a_burst_of_1500_processes_is_stopped(hostile: Hostile) -> None:
    """Fork until refused; each child sleeps, so every one counts while the loop runs."""
    script = (
        "import os, time\n"
        "n = 0\n"
        "for _ in range(1500):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    n += 1\n"
        "print('started', n)\n"
    )
    (hostile.root / "burst.py").write_text(script, encoding="utf-8")
    output = hostile.shell(f"{sys.executable} burst.py")
    started = int(output["stdout"].split()[-1])
    assert 50 < started < 400, output  # children ran, and the limit held well below 1500


def test_a_file_past_max_file_bytes_cannot_be_written(hostile: Hostile) -> None:
    output = hostile.shell("head -c 10000000 /dev/zero > big.bin; echo rc=$?; stat -c %s big.bin")
    assert "rc=0" not in output["stdout"]
    assert (hostile.root / "big.bin").stat().st_size <= 4 * MiB
    (hostile.root / "big.bin").unlink()


@pytest.mark.anyio
@pytest.mark.parametrize("total", [0, 10, 512, 1024, 1500, 4096, 10_000, 123_457])
async def test_the_store_keeps_exactly_the_head_and_the_tail(tmp_path: Path, total: int) -> None:
    data = bytes((i * 7 + i // 251) % 256 for i in range(total))
    store = Store(tmp_path / "out", 1024)
    for start in range(0, total, 97):  # chunks that straddle every boundary
        await store.write(data[start : start + 97])
    await store.close()
    assert not (tmp_path / "out.tail").exists()
    kept = (tmp_path / "out").read_bytes() if total else b""
    if total <= 1024:
        assert kept == data and store.dropped == 0
    else:
        assert store.dropped == total - 1024
        assert kept.startswith(data[:512]) and kept.endswith(data[-512:])
        assert f"{total - 1024} bytes dropped here".encode() in kept


def test_an_older_kernel_never_gets_the_hosts_pid_max_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before Linux 6.14 ``kernel.pid_max`` is the machine's: the sandbox must not touch it."""
    from shipagent.config import ExecShellPermission
    from shipagent.tools import _sandbox

    real = os.uname()
    old = os.uname_result((real.sysname, real.nodename, "6.8.0-45-generic", real.version, real.machine))
    monkeypatch.setattr(_sandbox.os, "uname", lambda: old)
    limits = _sandbox._limits(ExecShellPermission())
    assert not limits.pid_namespace
    argv = _sandbox.bwrap_argv("bwrap", _sandbox.SandboxLayout(Path("/p"), Path("/p/.ship"), limits=limits))
    assert "pid_max" not in " ".join(argv) and "--cap-drop" in argv
    if os.geteuid() == 0:
        problem = _sandbox.process_limit_problem()
        assert problem is not None and "6.8.0-45-generic" in problem
