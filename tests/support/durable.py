"""Real worker processes for the durable tests (their Postgres is ``tests.support.postgres``).

Workers: ``shipagent worker`` processes using the scripted model of
``tests.support.durable_worker`` (through the ``--model-factory`` testing hook), with the
repository on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.support.paths import child_env

SHIPAGENT = str(Path(sys.executable).parent / "shipagent")


def durable_project(root: Path, database: str, *, recover_after: float = 30) -> Path:
    """A project whose turns are durable on ``database`` and whose tools include the test tools."""
    root.mkdir(parents=True, exist_ok=True)
    ship = {
        "name": "durable-test",
        "durable": {"enabled": True, "database": database, "recoverAfterSeconds": recover_after},
        "tools": {"modules": ["tests.support.durable_worker"]},
    }
    (root / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    (root / "signals").mkdir(exist_ok=True)
    return root


def worker_env(project: Path, **extra: str) -> dict[str, str]:
    env = child_env()
    env["SHIPAGENT_TEST_DIR"] = str(project / "signals")
    env.update(extra)
    return env


class Worker:
    """A ``shipagent worker`` subprocess; its output is collected by a reader thread."""

    def __init__(
        self, project: Path, executor_id: str, *, concurrency: int | None = None, **env: str
    ) -> None:
        args = [SHIPAGENT, "worker", "-C", str(project), "--executor-id", executor_id]
        args += ["--model-factory", "tests.support.durable_worker:scripted_model"]
        if concurrency is not None:
            args += ["--concurrency", str(concurrency)]
        self.executor_id = executor_id
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=worker_env(project, **env),
            text=True,
        )
        self.lines: list[str] = []
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if " ready on " in line:
                self._ready.set()

    def wait_ready(self, timeout: float = 90) -> Worker:
        if not self._ready.wait(timeout):
            self.stop()
            raise AssertionError(f"worker {self.executor_id} did not start:\n" + "\n".join(self.lines[-40:]))
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path.name} did not appear within {timeout}s")
        time.sleep(0.05)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
