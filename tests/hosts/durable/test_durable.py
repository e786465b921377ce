"""Durable turns with real worker processes, real SQLite and real Postgres.

Every worker is a ``shipagent worker`` subprocess running the scripted model and tools of
``tests.support.durable_worker``; the test process submits turns as a client (``agent.run`` with the durable
executor in client mode, or a ``DBOSClient``), kills workers with SIGKILL at chosen moments and
reads the project's stores afterwards.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from shipagent import AgentResult, ShipAgent
from shipagent.chatkeys import ShipPaths
from shipagent.config import load_config
from shipagent.store import open_stores
from tests.support.durable import (
    SHIPAGENT,
    Worker,
    durable_project,
    read_jsonl,
    wait_for,
    worker_env,
)

pytestmark = pytest.mark.anyio


def client_agent(project: Path) -> ShipAgent:
    """An agent that only submits turns (``serve --no-worker``'s role); workers run them."""
    agent = ShipAgent.from_project(project)
    agent.turn_executor_options = {"worker": False}
    return agent


async def started(worker: Worker) -> Worker:
    return await anyio.to_thread.run_sync(worker.wait_ready)


@dataclass
class Crash:
    """A turn whose worker was killed mid-turn and resumed by a worker with the same executor id."""

    agent: ShipAgent
    result: AgentResult
    first_pid: int
    second_pid: int


@asynccontextmanager
async def killed_mid_turn(
    project: Path, executor_id: str, chat_key: str, text: str, request_id: str, tag: str
) -> AsyncIterator[Crash]:
    """Submit ``text``; at the signal ``running-<tag>`` kill -9 the worker, release the turn and
    start a worker with the same executor id, which resumes it. The second worker and the client
    agent stay up inside the block (the chat can go on), and are stopped after it."""
    signals = project / "signals"
    first = await started(Worker(project, executor_id))
    result: dict[str, AgentResult] = {}
    async with client_agent(project) as agent:

        async def submit() -> None:
            result["r"] = await agent.run(chat_key, text, request_id=request_id)

        async with anyio.create_task_group() as group:
            group.start_soon(submit)
            await anyio.to_thread.run_sync(wait_for, signals / f"running-{tag}")
            first.kill9()
            (signals / f"release-{tag}").touch()
            second = await started(Worker(project, executor_id))  # same executor id
        try:
            yield Crash(agent, result["r"], first.pid, second.pid)
        finally:
            second.stop()


async def committed(project: Path, chat_key: str) -> dict[str, list[str]]:
    """The request ids each store holds for ``chat_key``, in store order (user entries only).

    Read through the project's stores: the ``.ship/`` files on SQLite, the database on Postgres
    (where a cluster's workers commit turns).
    """
    stores = open_stores(project, load_config(project))
    try:
        messages = [
            r.data["requestId"] for r in await stores.messages.records(chat_key) if r.data["t"] == "turn"
        ]
        said = await stores.transcript.records(chat_key)
        transcript = [r.data["requestId"] for r in said if r.data["role"] == "user"]
        agent_context = [r.data["requestId"] for r in await stores.agent_context.records(chat_key)]
        box = await stores.cards.get_box(await stores.cards.named_box(f"output:{chat_key}"))
        cards = await stores.cards.get_cards(box.card_ids)
    finally:
        await stores.close()
    user_cards = [c.metadata["request_id"] for c in cards if c.metadata.get("role") == "user"]
    return {
        "messages": messages,
        "transcript": transcript,
        "agentContext": agent_context,
        "cards": user_cards,
    }


async def assert_committed_once(project: Path, chat_key: str, request_id: str) -> None:
    for store, ids in (await committed(project, chat_key)).items():
        assert ids.count(request_id) == 1, f"{store}: {ids}"


# -- kill -9 and restart with the same executor id ------------------------------------------------


async def test_kill9_mid_tool_call_then_restart_same_executor(tmp_path: Path, database: str) -> None:
    project = durable_project(tmp_path / "p", database)
    signals = project / "signals"
    # the signal comes from the tool, while it runs
    async with killed_mid_turn(project, "worker-a", "chat:kill", "block:t1", "turn-kill-1", "t1") as crash:
        nxt = await crash.agent.run("chat:kill", "after the crash")  # the chat goes on
    r = crash.result
    assert (r.success, r.output, r.request_id) == (True, "finished t1", "turn-kill-1")
    assert nxt.output == "echo: after the crash"
    requests = read_jsonl(signals / "requests.jsonl")
    # the first model request is recorded: the restarted worker did not send it again
    assert [(q["text"], q["phase"], q["pid"]) for q in requests] == [
        ("block:t1", "first", crash.first_pid),
        ("block:t1", "after-tool", crash.second_pid),
        ("after the crash", "first", crash.second_pid),
    ]
    # the tool was killed before it finished, so its step reran once, in the new worker
    assert read_jsonl(signals / "effects.jsonl") == [{"tag": "t1", "pid": crash.second_pid}]
    await assert_committed_once(project, "chat:kill", "turn-kill-1")
    assert (await committed(project, "chat:kill"))["messages"] == ["turn-kill-1", nxt.request_id]


async def test_injection_survives_replay(tmp_path: Path) -> None:
    """Killed after the injecting tool's step: the resumed turn's next request carries the injection."""
    project = durable_project(tmp_path / "p", "sqlite")
    signals = project / "signals"
    # the signal comes from the 2nd model request
    async with killed_mid_turn(project, "worker-i", "chat:inject", "inject:t2", "turn-inject", "t2") as crash:
        pass
    assert crash.result.output == "saw RULE-t2: yes"
    requests = read_jsonl(signals / "requests.jsonl")
    assert [(q["phase"], q["pid"], q["systems"]) for q in requests] == [
        ("first", crash.first_pid, []),
        ("after-tool", crash.first_pid, ["RULE-t2"]),
        ("after-tool", crash.second_pid, ["RULE-t2"]),  # replayed tool step, injection laid back
    ]
    # the tool ran once: its step was recorded before the kill
    assert [e["tag"] for e in read_jsonl(signals / "effects.jsonl")] == ["inject-t2"]
    await assert_committed_once(project, "chat:inject", "turn-inject")


async def test_chat_send_text_survives_replay(tmp_path: Path) -> None:
    """Killed after chat_send's step: the resumed turn still reports and records the sent text."""
    project = durable_project(tmp_path / "p", "sqlite")
    # the signal comes from the 2nd model request
    async with killed_mid_turn(project, "worker-s", "chat:send", "send:t5", "turn-send", "t5") as crash:
        pass
    assert crash.result.output == "sent t5\n\nfinished t5"
    transcript = read_jsonl(ShipPaths(project).transcript("chat:send"))
    assert [(e["role"], e["text"], e.get("via")) for e in transcript] == [
        ("user", "send:t5", None),
        ("assistant", "sent t5", "tool"),
        ("assistant", "finished t5", None),
    ]
    await assert_committed_once(project, "chat:send", "turn-send")


async def test_sigterm_lets_the_running_turn_finish(tmp_path: Path) -> None:
    project = durable_project(tmp_path / "p", "sqlite")
    signals = project / "signals"
    worker = await started(Worker(project, "worker-t"))
    result: dict[str, AgentResult] = {}
    async with client_agent(project) as agent:

        async def submit() -> None:
            result["r"] = await agent.run("chat:term", "block:t6")

        async with anyio.create_task_group() as group:
            group.start_soon(submit)
            await anyio.to_thread.run_sync(wait_for, signals / "running-t6")
            worker.proc.send_signal(signal.SIGTERM)  # a deploy stops the worker mid-turn
            await anyio.sleep(0.5)
            (signals / "release-t6").touch()
    assert result["r"].output == "finished t6"
    assert await anyio.to_thread.run_sync(lambda: worker.proc.wait(timeout=60)) == 0
    assert [q["pid"] for q in read_jsonl(signals / "requests.jsonl")] == [worker.pid, worker.pid]


# -- many workers -----------------------------------------------------------------------------------


def test_two_workers_ten_chats_five_turns_postgres(tmp_path: Path, pg_database: str) -> None:
    from dbos import DBOSClient

    project = durable_project(tmp_path / "p", pg_database)
    signals = project / "signals"
    workers = [Worker(project, f"worker-{n}", concurrency=3, SHIPAGENT_TEST_DELAY="0.05") for n in (1, 2)]
    try:
        for w in workers:
            w.wait_ready()
        time.sleep(1.5)  # each worker's queue thread notices the registered queue within a second
        client = DBOSClient(system_database_url=pg_database, application_name="shipagent")
        try:
            handles = []
            for turn in range(5):  # enqueued in turn order; all 50 before any result is awaited
                for chat in range(10):
                    options: Any = {
                        "workflow_name": "shipagent.turn",
                        "queue_name": "shipagent_turns",
                        "workflow_id": f"c{chat}-t{turn}",
                        "queue_partition_key": f"chat:{chat}",
                        "app_version": "shipagent-durable-1",
                    }
                    handles.append(client.enqueue(options, f"chat:{chat}", f"c{chat}-t{turn}"))
            results = [h.get_result(polling_interval_sec=0.05) for h in handles]
        finally:
            client.destroy()
    finally:
        for w in workers:
            w.stop()
    assert all(r.success for r in results)
    assert [r.output for r in results] == [f"echo: c{c}-t{t}" for t in range(5) for c in range(10)]
    for chat in range(10):
        stores = anyio.run(committed, project, f"chat:{chat}")
        expected = [f"c{chat}-t{t}" for t in range(5)]
        assert stores == {name: expected for name in stores}, chat  # once each, in order
    requests = read_jsonl(signals / "requests.jsonl")
    assert sorted(q["text"] for q in requests) == sorted(f"c{c}-t{t}" for c in range(10) for t in range(5))
    assert {q["pid"] for q in requests} == {w.pid for w in workers}  # both workers did work
    # per chat, turn i+1's request started only after turn i's answer was committed
    for chat in range(10):
        times = [
            q["t"] for q in sorted(requests, key=lambda q: q["text"]) if q["text"].startswith(f"c{chat}-")
        ]
        assert times == sorted(times)


async def test_dead_worker_turn_resumed_by_another_within_deadline(tmp_path: Path, pg_database: str) -> None:
    recover_after = 3.0
    project = durable_project(tmp_path / "p", pg_database, recover_after=recover_after)
    signals = project / "signals"
    doomed = await started(Worker(project, "worker-doomed"))
    result: dict[str, AgentResult] = {}
    async with client_agent(project) as agent:

        async def submit() -> None:
            result["r"] = await agent.run("chat:orphan", "block:t3", request_id="turn-orphan")
            result["at"] = time.monotonic()  # type: ignore[assignment]

        async with anyio.create_task_group() as group:
            group.start_soon(submit)
            await anyio.to_thread.run_sync(wait_for, signals / "running-t3")
            survivor = await started(Worker(project, "worker-survivor"))
            (signals / "release-t3").touch()
            doomed.kill9()  # for good: nobody restarts "worker-doomed"
            killed_at = time.monotonic()
        survivor.stop()
    took = float(result["at"]) - killed_at  # type: ignore[arg-type]
    assert took <= recover_after + 10, took
    assert result["r"].output == "finished t3"
    requests = read_jsonl(signals / "requests.jsonl")
    assert [(q["phase"], q["pid"]) for q in requests] == [("first", doomed.pid), ("after-tool", survivor.pid)]
    await assert_committed_once(project, "chat:orphan", "turn-orphan")


async def test_recover_by_hand(tmp_path: Path) -> None:
    project = durable_project(tmp_path / "p", "sqlite", recover_after=600)
    signals = project / "signals"
    doomed = await started(Worker(project, "worker-gone"))
    result: dict[str, AgentResult] = {}
    async with client_agent(project) as agent:

        async def submit() -> None:
            result["r"] = await agent.run("chat:hand", "block:t4", request_id="turn-hand")

        async with anyio.create_task_group() as group:
            group.start_soon(submit)
            await anyio.to_thread.run_sync(wait_for, signals / "running-t4")
            (signals / "release-t4").touch()
            doomed.kill9()
            # by hand, before any other worker runs (a live worker on this machine would find
            # the killed one's process gone and resume its turn itself within seconds)
            out = await anyio.to_thread.run_sync(
                lambda: subprocess.run(
                    [SHIPAGENT, "recover", "-C", str(project), "--executor", "worker-gone"],
                    capture_output=True,
                    text=True,
                    env=worker_env(project),
                    timeout=120,
                )
            )
            assert out.returncode == 0, out.stderr
            assert "resumed 1 pending turn(s)" in out.stdout
            other = await started(Worker(project, "worker-other"))  # runs the re-enqueued turn
        other.stop()
    assert result["r"].output == "finished t4"
    await assert_committed_once(project, "chat:hand", "turn-hand")


# -- in process: same request id twice --------------------------------------------------------------


async def test_same_request_id_twice_runs_one_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.durable_worker import scripted_model

    project = durable_project(tmp_path / "p", "sqlite")
    monkeypatch.setenv("SHIPAGENT_TEST_DIR", str(project / "signals"))
    agent = ShipAgent.from_project(project, model=scripted_model())  # this process is the worker
    steps: list[str] = []
    async with agent:
        first = await agent.run(
            "chat:idem", "hello", request_id="same-id", on_step=lambda e: steps.append(e.type)
        )
        again = await agent.run("chat:idem", "something else", request_id="same-id")
        other = await agent.run("chat:idem", "next")
    assert (first.output, again.output, again.request_id) == ("echo: hello", "echo: hello", "same-id")
    assert other.output == "echo: next"
    assert steps == ["assistant", "done"]  # the worker's steps, read live from its stream
    assert [q["text"] for q in read_jsonl(project / "signals" / "requests.jsonl")] == ["hello", "next"]
    stores = await committed(project, "chat:idem")
    assert stores == {name: ["same-id", other.request_id] for name in stores}
    assert agent.turn_executor is None  # stopped with the agent


async def test_durable_needs_a_started_agent(tmp_path: Path) -> None:
    project = durable_project(tmp_path / "p", "sqlite")
    agent = ShipAgent.from_project(project)
    with pytest.raises(Exception, match="async with agent"):
        await agent.run("chat:x", "hi")


# -- through shipagent serve ------------------------------------------------------------------------


def test_serve_no_worker_enqueues_and_idempotency_key_runs_one_turn(tmp_path: Path) -> None:
    """``serve --no-worker`` only enqueues; a worker runs the turns; one Idempotency-Key → one turn."""
    import json

    import httpx

    from tests.support.net import free_port

    project = durable_project(tmp_path / "p", "sqlite")
    signals = project / "signals"
    worker = Worker(project, "worker-srv")
    port = free_port()
    args = [SHIPAGENT, "serve", "-C", str(project), "--port", str(port), "--no-worker"]
    serve = subprocess.Popen(
        [*args, "--model-factory", "tests.support.durable_worker:scripted_model"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=worker_env(project),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        worker.wait_ready()
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and serve.poll() is None, "serve did not start"
            time.sleep(0.2)
        url = f"{base}/v1/chats/web:alice/messages"
        first = httpx.post(url, json={"text": "hello"}, headers={"Idempotency-Key": "k-1"}, timeout=60)
        again = httpx.post(url, json={"text": "changed"}, headers={"Idempotency-Key": "k-1"}, timeout=60)
        assert first.status_code == again.status_code == 200, first.text
        assert first.json()["requestId"] == again.json()["requestId"] == "k-1"
        assert first.json()["output"] == again.json()["output"] == "echo: hello"
        events: list[tuple[str, Any]] = []
        (signals / "release-srv").touch()  # the tool of the streamed turn returns at once
        with httpx.stream(
            "POST",
            url,
            json={"text": "block:srv"},
            headers={"Idempotency-Key": "k-2", "Accept": "text/event-stream"},
            timeout=60,
        ) as response:
            name = ""
            for line in response.iter_lines():
                if line.startswith("event:"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("data:"):
                    events.append((name, json.loads(line.split(":", 1)[1])))
        # the worker's events, read from the turn's stream by the --no-worker server
        assert [n for n, _ in events] == ["tool_started", "tool_finished", "text_delta", "done"]
        assert events[0][1]["tool"] == "test_block" and events[1][1]["success"] is True
        assert events[2][1]["text"] == events[3][1]["result"]["output"] == "finished srv"
        bad = httpx.post(url, json={"text": "x"}, headers={"Idempotency-Key": "a\tb"}, timeout=60)
        assert bad.status_code == 400 and "Idempotency-Key" in bad.text
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=60)
        worker.stop()
    requests = read_jsonl(signals / "requests.jsonl")
    assert [(q["text"], q["pid"]) for q in requests] == [
        ("hello", worker.pid),
        ("block:srv", worker.pid),
        ("block:srv", worker.pid),
    ]
    stores = anyio.run(committed, project, "web:alice")
    assert stores == {name: ["k-1", "k-2"] for name in stores}


def test_workers_starting_together_create_the_heartbeat_table_once(pg_database: str) -> None:
    """Concurrent ``CREATE TABLE IF NOT EXISTS`` fails on Postgres without the advisory lock."""
    import threading

    from shipagent.hosts.durable import DurableSettings
    from shipagent.hosts.durable._heartbeat import Claimant, Heartbeats

    errors: list[str] = []

    def start(n: int) -> None:
        beats = Heartbeats(DurableSettings(pg_database, 30, None))
        try:
            assert beats.claim_id(f"exec-{n}", Claimant(pid=n, host="h"), 30) is None
        except Exception as exc:
            errors.append(repr(exc))
        finally:
            beats.close()

    threads = [threading.Thread(target=start, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    beats = Heartbeats(DurableSettings(pg_database, 30, None))
    try:
        assert sorted(beats.ages()) == [f"exec-{n}" for n in range(8)]
    finally:
        beats.close()
