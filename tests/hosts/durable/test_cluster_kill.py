"""A cluster on one host survives ``kill -9`` of the worker running a turn.

Two ``shipagent worker`` processes with default settings (no executor id, no recovery time given),
each started from its own copy of the project as the README's cluster section does, on one real
Postgres. A turn blocks inside the scripted model (``cluster_model``, loaded with
``--model-factory``); the worker running it is killed with SIGKILL; the other one must resume it:
the client gets the answer once, the chat's history holds the turn once, and the next turn of the
chat sees it once.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from shipagent import ShipAgent
from shipagent.events import Done, TextDelta
from tests.support.durable import SHIPAGENT
from tests.support.paths import TESTS

pytestmark = pytest.mark.anyio

HOST = socket.gethostname()
MODEL = TESTS / "support" / "cluster_model.py"


def project_copy(root: Path, database: str, **durable: Any) -> Path:
    """One machine's copy of the project: ship.json and the model module beside it."""
    root.mkdir(parents=True)
    ship = {"name": "cluster-test", "durable": {"enabled": True, "database": database, **durable}}
    (root / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    shutil.copy(MODEL, root / "cluster_model.py")
    return root


class ClusterWorker:
    """``shipagent worker -C DIR --model-factory cluster_model:model``: nothing else given."""

    def __init__(self, project: Path, signals: Path) -> None:
        env = dict(os.environ, CLUSTER_SIGNALS=str(signals))
        self.proc = subprocess.Popen(
            [SHIPAGENT, "worker", "-C", str(project), "--model-factory", "cluster_model:model"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            text=True,
        )
        self.lines: list[str] = []
        self.executor_id = ""
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("worker ") and " ready on " in line:
                self.executor_id = line.split()[1]
                self._ready.set()

    def wait_ready(self, timeout: float = 120) -> ClusterWorker:
        if not self._ready.wait(timeout):
            self.stop()
            raise AssertionError("worker did not start:\n" + "\n".join(self.lines[-40:]))
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    def turn_lines(self) -> list[str]:
        return [line for line in self.lines if "shipagent.hosts.durable.turns: turn " in line]

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def wait_for_file(path: Path, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text(encoding="utf-8"):
        if time.monotonic() > deadline:
            raise AssertionError(f"{path.name} did not appear within {timeout}s")
        time.sleep(0.05)
    return path.read_text(encoding="utf-8")


def until(check: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.05)


def read_requests(signals: Path) -> list[dict[str, Any]]:
    path = signals / "requests.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


async def test_kill9_of_the_worker_running_a_turn_on_one_host(tmp_path: Path, pg_database: str) -> None:
    signals = tmp_path / "signals"
    signals.mkdir()
    projects = [project_copy(tmp_path / f"machine-{n}", pg_database) for n in (1, 2)]
    workers: list[ClusterWorker] = []
    try:
        for project in projects:  # one after the other: the ids they claim are then known
            workers.append(await anyio.to_thread.run_sync(ClusterWorker(project, signals).wait_ready))
        assert [w.executor_id for w in workers] == [f"{HOST}:0", f"{HOST}:1"]

        client = ShipAgent.from_project(projects[0])
        client.turn_executor_options = {"worker": False}  # serve --no-worker's role: only enqueue
        async with client:
            first = await client.run("chat:k", "hello", request_id="k-1")
            assert (first.success, first.output) == (True, "echo: hello")

            events: list[Any] = []

            async def stream() -> None:
                async for event in client.run_stream("chat:k", "wait:t1", request_id="k-2"):
                    events.append(event)

            with anyio.fail_after(300):  # a hang guard, not a timing assertion
                async with anyio.create_task_group() as group:
                    group.start_soon(stream)
                    running = await anyio.to_thread.run_sync(wait_for_file, signals / "running-t1")
                    (doomed,) = [w for w in workers if w.pid == int(running)]
                    (survivor,) = [w for w in workers if w is not doomed]
                    await anyio.to_thread.run_sync(doomed.kill9)
                    (signals / "release-t1").touch()
            after = await client.run("chat:k", "after", request_id="k-3")

        # the client got the answer once
        texts = "".join(e.text for e in events if isinstance(e, TextDelta))
        done = [e for e in events if isinstance(e, Done)]
        assert texts == "answer t1"
        assert len(done) == 1 and events[-1] is done[0]
        assert (done[0].result.success, done[0].result.output) == (True, "answer t1")
        assert (after.success, after.output) == (True, "echo: after")

        # asked on the killed worker, asked again (not recorded yet) and answered on the survivor
        requests = read_requests(signals)
        assert [q["pid"] for q in requests if q["text"] == "wait:t1"] == [doomed.pid, survivor.pid]
        # the next turn carried the resumed one exactly once
        (next_turn,) = [q for q in requests if q["text"] == "after"]
        assert next_turn["said"] == [
            "user: hello",
            "assistant: echo: hello",
            "user: wait:t1",
            "assistant: answer t1",
            "user: after",
        ]

        # the history holds each turn once
        with psycopg.connect(pg_database) as conn:
            turns = conn.execute(
                "SELECT request_id FROM shipagent.messages WHERE chat_key = 'chat:k' AND kind = 'turn' "
                "ORDER BY seq"
            ).fetchall()
            said = conn.execute(
                "SELECT record->>'requestId', record->>'role' FROM shipagent.transcript "
                "WHERE chat_key = 'chat:k' ORDER BY seq"
            ).fetchall()
        assert [row[0] for row in turns] == ["k-1", "k-2", "k-3"]
        assert [(rid, role) for rid, role in said if role in ("user", "assistant")] == [
            (rid, role) for rid in ("k-1", "k-2", "k-3") for role in ("user", "assistant")
        ]

        # one log line per turn, on the worker that finished it, without any text
        until(lambda: len([ln for w in workers for ln in w.turn_lines()]) >= 3, "three turn log lines")
        lines = [line for w in workers for line in w.turn_lines()]
        for rid in ("k-1", "k-2", "k-3"):
            assert len([line for line in lines if f" request={rid} " in line]) == 1, lines
        (resumed,) = [line for line in survivor.turn_lines() if " request=k-2 " in line]
        assert " chat=chat:k " in resumed and " outcome=ok " in resumed
        assert f" executor={survivor.executor_id}" in resumed and " duration=" in resumed
        logged = "\n".join(w_line for w in workers for w_line in w.lines)
        for text in ("hello", "wait:t1", "answer t1", "after"):
            assert text not in logged
        assert f"resumed 1 turn(s) of dead executor {doomed.executor_id}" in "\n".join(survivor.lines)

        # the killed worker's replacement (its project copy, default settings) gets its id back
        replacement = ClusterWorker(projects[workers.index(doomed)], signals)
        workers.append(replacement)
        await anyio.to_thread.run_sync(replacement.wait_ready)
        assert replacement.executor_id == doomed.executor_id
    finally:
        for worker in workers:
            worker.stop()


def test_a_worker_found_dead_while_stopped_stops_when_it_wakes(tmp_path: Path, pg_database: str) -> None:
    """SIGSTOP past ``recoverAfterSeconds``: another worker takes the id over; woken, it stops."""
    signals = tmp_path / "signals"
    signals.mkdir()
    projects = [project_copy(tmp_path / f"machine-{n}", pg_database, recoverAfterSeconds=2) for n in (1, 2)]
    workers = [ClusterWorker(projects[0], signals).wait_ready()]
    try:
        workers.append(ClusterWorker(projects[1], signals).wait_ready())
        sleeper, _ = workers
        sleeper.proc.send_signal(signal.SIGSTOP)  # alive, but silent: as if cut off

        def taken_over() -> bool:
            with psycopg.connect(pg_database) as conn:
                row = conn.execute(
                    "SELECT pid FROM shipagent_executors WHERE executor_id = %s", (sleeper.executor_id,)
                ).fetchone()
            return row is None or row[0] != sleeper.pid

        until(taken_over, f"{sleeper.executor_id} taken over by the live worker")
        sleeper.proc.send_signal(signal.SIGCONT)
        sleeper.proc.wait(timeout=120)  # its next heartbeat finds the id gone: it stops itself
        until(lambda: "worker stopping" in sleeper.lines, "the stopped worker's last line")
        output = "\n".join(sleeper.lines)
        assert f"executor id {sleeper.executor_id} was taken over by another process" in output
    finally:
        for worker in workers:
            with contextlib.suppress(ProcessLookupError):
                worker.proc.send_signal(signal.SIGCONT)
            worker.stop()
