"""A durable turn streams live: its workflow writes its events to a DBOS stream the submitter reads.

The scripted model of ``tests.support.durable_worker`` answers ``block:<tag>`` with a call of ``test_block``,
which waits for the file ``release-<tag>``, then with the text ``finished <tag>``. A test that
releases the tool only after it has seen ``tool_started`` proves the event crossed from the worker
while the turn was still running.
"""

from __future__ import annotations

from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import pytest

from shipagent import Done, ShipAgent, StepEvent, TextDelta, ToolFinished, ToolStarted
from shipagent.hosts.durable import _runtime
from shipagent.hosts.durable._stream import decode, encode_run, encode_step
from tests.support.durable import Worker, durable_project, read_jsonl, wait_for

pytestmark = pytest.mark.anyio


def _shape(events: list[Any]) -> list[tuple[str, str]]:
    shapes: list[tuple[str, str]] = []
    for event in events:
        if isinstance(event, ToolStarted | ToolFinished):
            shapes.append((event.type, event.tool))
        elif isinstance(event, TextDelta):
            shapes.append((event.type, event.text))
        elif isinstance(event, Done):
            shapes.append((event.type, event.result.output))
    return shapes


def test_records_are_plain_json_and_round_trip() -> None:
    import json

    events = [
        TextDelta("hi"),
        ToolStarted("c1", "exec_shell", {"command": "ls"}),
        ToolFinished("c1", "x", True, "ok"),
    ]
    for event in events:
        record = encode_run(event)
        assert record is not None and decode(json.loads(json.dumps(record))) == event
    step = StepEvent("step_finish", "ran: ls (exit 0)", {"tool": "exec_shell", "toolCallId": "c1"})
    record = encode_step(step)
    assert record is not None and decode(json.loads(json.dumps(record))) == step
    # done is built from the recorded result; retries happen inside a recorded step: not published
    assert encode_step(StepEvent("done", "x")) is None and encode_step(StepEvent("retry", "x")) is None
    assert decode({"run": {"type": "from_the_future"}}) is None and decode("junk") is None


async def test_run_stream_on_a_durable_sqlite_agent_yields_the_turns_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.durable_worker import scripted_model

    project = durable_project(tmp_path / "p", "sqlite")
    signals = project / "signals"
    monkeypatch.setenv("SHIPAGENT_TEST_DIR", str(signals))
    (signals / "release-s1").touch()  # the tool returns at once
    agent = ShipAgent.from_project(project, model=scripted_model())  # this process is the worker
    steps: list[StepEvent] = []
    events: list[Any] = []
    with anyio.fail_after(60):
        async with agent:
            stream = agent.run_stream("chat:s1", "block:s1", on_step=steps.append, request_id="stream-1")
            async with aclosing(stream) as running:
                async for event in running:
                    events.append(event)
            # the same request id again: the turn is not run again; its recorded stream is read
            again = [e async for e in agent.run_stream("chat:s1", "block:s1", request_id="stream-1")]
    assert _shape(events) == [
        ("tool_started", "test_block"),
        ("tool_finished", "test_block"),
        ("text_delta", "finished s1"),
        ("done", "finished s1"),
    ]
    started, finished = events[0], events[1]
    assert started.args == {"tag": "s1"} and started.tool_call_id == finished.tool_call_id
    assert finished.success and finished.summary == "test_block: done"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == events[-1].result.output
    assert [(s.type, s.text) for s in steps] == [
        ("step_finish", "test_block: done"),
        ("assistant", "finished s1"),
        ("done", "finished s1"),
    ]
    assert _shape(again) == _shape(events)
    assert len(read_jsonl(signals / "effects.jsonl")) == 1


async def test_a_worker_process_streams_to_a_client_on_postgres_while_the_turn_runs(
    tmp_path: Path, pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the client's polls (the stream's and the result's) slowed far beyond the deadline: the
    # events and the result can only arrive in time through NOTIFY
    monkeypatch.setattr(_runtime, "RESULT_POLL_SECONDS", 600.0)
    monkeypatch.setattr(_runtime, "RESULT_POLL_MAX_SECONDS", {"sqlite": 600.0, "postgres": 600.0})
    project = durable_project(tmp_path / "p", pg_database)
    signals = project / "signals"
    worker = await anyio.to_thread.run_sync(Worker(project, "worker-stream").wait_ready)
    client = ShipAgent.from_project(project)
    client.turn_executor_options = {"worker": False}  # serve --no-worker's role: only enqueues
    events: list[Any] = []
    steps: list[str] = []
    try:
        with anyio.fail_after(60):
            async with client:
                stream = client.run_stream("chat:s2", "block:s2", on_step=lambda s: steps.append(s.type))
                async with aclosing(stream) as running:
                    async for event in running:
                        events.append(event)
                        if isinstance(event, ToolStarted):
                            # the tool is blocked until this file exists: the turn is still running
                            assert not (signals / "effects.jsonl").exists()
                            await anyio.to_thread.run_sync(wait_for, signals / "running-s2")
                            (signals / "release-s2").touch()
    finally:
        worker.stop()
    assert _shape(events) == [
        ("tool_started", "test_block"),
        ("tool_finished", "test_block"),
        ("text_delta", "finished s2"),
        ("done", "finished s2"),
    ]
    assert steps == ["step_finish", "assistant", "done"]
    assert [e["pid"] for e in read_jsonl(signals / "effects.jsonl")] == [worker.pid]


async def test_a_resumed_turn_streams_each_event_once(tmp_path: Path) -> None:
    """Killed mid-tool with a reader attached: after the restart the reader goes on, nothing twice.

    The events written before the crash are recorded writes of the workflow: the resumed turn
    replays them without writing them again, and a reader that comes later reads the same events.
    """
    project = durable_project(tmp_path / "p", "sqlite")
    signals = project / "signals"
    first = await anyio.to_thread.run_sync(Worker(project, "worker-r").wait_ready)
    client = ShipAgent.from_project(project)
    client.turn_executor_options = {"worker": False}
    events: list[Any] = []
    second: Worker | None = None
    try:
        with anyio.fail_after(90):
            async with client:

                async def read() -> None:
                    stream = client.run_stream("chat:r", "block:r1", request_id="turn-r")
                    async with aclosing(stream) as running:
                        async for event in running:
                            events.append(event)

                async with anyio.create_task_group() as group:
                    group.start_soon(read)
                    await anyio.to_thread.run_sync(wait_for, signals / "running-r1")  # tool running
                    first.kill9()
                    (signals / "release-r1").touch()
                    second = await anyio.to_thread.run_sync(Worker(project, "worker-r").wait_ready)
                late = [e async for e in client.run_stream("chat:r", "block:r1", request_id="turn-r")]
    finally:
        if second is not None:
            second.stop()
    expected = [
        ("tool_started", "test_block"),
        ("tool_finished", "test_block"),
        ("text_delta", "finished r1"),
        ("done", "finished r1"),
    ]
    assert _shape(events) == expected
    assert _shape(late) == expected
    assert read_jsonl(signals / "effects.jsonl") == [{"tag": "r1", "pid": second.pid}]  # rerun once
