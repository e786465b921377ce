"""SIGKILL at seeded random moments: no acknowledged turn is lost, the stores agree, the chat goes on.

A zygote process (``_workload.py``) imports shipagent once and forks an agent process per round;
the child runs turns over four chats at once (tool calls, spills into context files, compactions)
and prints ``ack KEY N`` only after ``run`` returned success. The test kills it with SIGKILL at a
seeded random moment, then opens the project with a fresh ``ShipAgent`` and checks, for every chat:

- every acknowledged turn is in the message log, the transcript and the agent-context log;
- the three stores hold the same turns, ``0..N`` in order, each once, with the same request ids
  (after the hydration's reconciliation, which is what a restarted process sees);
- the chat's context files are readable and every file the index names exists;
- the next round's child continues every chat from where the stores say it is.

``-m slow`` runs many more kills.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from shipagent.jsonl import read_all
from tests.reliability._workload import (
    KEYS,
    make_agent,
    next_turn,
    text_of,
)

WORKLOAD = str(Path(__file__).with_name("_workload.py"))


class Zygote:
    """The workload process and a thread that turns its stdout into a queue of lines."""

    def __init__(self, project: Path, log: Path) -> None:
        self.log = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, WORKLOAD, str(project)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put(raw.decode().rstrip("\n"))
        self.lines.put("eof")

    def next(self, timeout: float = 60) -> str:
        line = self.lines.get(timeout=timeout)
        assert line != "eof", "the workload zygote exited"
        return line

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((line + "\n").encode())
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.send("quit")
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def user_prompt(record: dict[str, Any]) -> str:
    for message in record.get("messages", []):
        for part in message.get("parts", []):
            if part.get("part_kind") == "user-prompt":
                return str(part["content"])
    raise AssertionError(f"turn record without a user prompt: {record}")


def check_project(project: Path, acked: dict[str, int]) -> int:
    """Assert the stores of every chat agree and hold every acknowledged turn; returns turns stored."""
    agent = make_agent(project)  # fresh, as a restarted process would be
    stored = 0
    for key in KEYS:
        agent.history(key)  # hydration: reconciles the transcript / agent-context log
        turns = [
            r for r in read_all(agent.chats.log.path(key)) if isinstance(r, dict) and r.get("t") == "turn"
        ]
        said = [user_prompt(r) for r in turns]
        ids = [r["requestId"] for r in turns]
        assert said == [text_of(key, n) for n in range(len(said))], f"{key}: message log out of order"
        transcript = [e for e in read_all(agent.transcript.path(key)) if e.get("role") == "user"]
        assert [e["text"] for e in transcript] == said, f"{key}: transcript disagrees with the message log"
        assert [e["requestId"] for e in transcript] == ids
        context = read_all(agent.agent_context.path(key))
        assert [e["userPreview"] for e in context] == said, f"{key}: agent-context log disagrees"
        assert [e["requestId"] for e in context] == ids
        assert acked.get(key, -1) < len(said), (
            f"{key}: acknowledged turn {acked[key]} lost ({len(said)} stored)"
        )
        for ref in agent.context_files.list(key, limit=10_000):
            if ref.path:
                assert (agent.context_files.folder(key) / ref.path).is_file(), f"{key}: {ref.id} missing"
        stored += len(said)
    return stored


def run_kills(tmp_path: Path, kills: int, seed: int) -> dict[str, int]:
    project = tmp_path / "proj"
    project.mkdir()
    rng = random.Random(seed)
    zygote = Zygote(project, tmp_path / "workload.log")
    acked: dict[str, int] = {}
    acks = killed = 0
    try:
        for _ in range(kills):
            zygote.send("go")
            line = zygote.next()
            assert line.startswith("child "), line
            pid = int(line.split()[1])
            # Half the kills are timed from "ready" (they land in hydration, reconciliation and the
            # first turns), half from the first acknowledged turn (they land amid steady work).
            from_ready = rng.random() < 0.5
            delay = rng.uniform(0.0, 0.6)
            deadline: float | None = None
            while True:
                timeout = 60.0 if deadline is None else max(deadline - time.monotonic(), 0.0)
                try:
                    line = zygote.lines.get(timeout=timeout)
                except queue.Empty:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                    break
                if line.startswith("ready"):
                    if from_ready:
                        deadline = time.monotonic() + delay
                elif line.startswith("ack "):
                    if deadline is None:
                        deadline = time.monotonic() + delay
                    _, key, n = line.split()
                    assert int(n) > acked.get(key, -1), f"acknowledged out of order: {line}"
                    acked[key] = int(n)
                    acks += 1
                else:
                    raise AssertionError(
                        f"workload: {line}\n{(tmp_path / 'workload.log').read_text()[-3000:]}"
                    )
            # every line the child wrote comes before the zygote's "dead" line
            while not (line := zygote.next()).startswith("dead "):
                if line.startswith("ack "):
                    _, key, n = line.split()
                    acked[key] = int(n)
                    acks += 1
                else:
                    raise AssertionError(f"workload: {line}")
            assert line.split()[1] == str(pid)
            check_project(project, acked)
    finally:
        zygote.close()
    stored = check_project(project, acked)

    # the chats go on: one more turn of each, in this process, after the newest stored turn
    async def one_more() -> None:
        async with make_agent(project) as agent:
            for key in KEYS:
                await agent.chats.aget(key)
                n = next_turn(agent, key)
                result = await agent.run(key, text_of(key, n))
                assert result.success, f"{key}: the turn after the kills failed: {result.output}"

    anyio.run(one_more)
    assert check_project(project, acked) == stored + len(KEYS)
    print(f"\nkill harness: {killed} kills, {acks} acknowledged turns checked, {stored} turns stored")
    return {"kills": killed, "acks": acks, "stored": stored}


def test_sigkill_at_random_moments_loses_no_acknowledged_turn(tmp_path: Path) -> None:
    stats = run_kills(tmp_path, kills=30, seed=11)
    assert stats["kills"] == 30
    assert stats["acks"] >= 15  # half the kills come after a first acknowledged turn, at least


@pytest.mark.slow
def test_sigkill_many_times(tmp_path: Path) -> None:
    stats = run_kills(tmp_path, kills=200, seed=1234)
    assert stats["kills"] == 200
