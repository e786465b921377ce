"""Durable turns do not wait for DBOS's polls: claimed at once, awaited on their task, woken by NOTIFY.

Each test slows every poll down to a minute or more (the queue's polling interval, the result's
read-back), so a turn can only finish within the test's deadline through the fast paths:

* a worker that enqueues a turn claims it at once and awaits the workflow's own task;
* on Postgres, a worker in another process is woken by ``NOTIFY shipagent_turn_queued`` and the
  waiting client by ``NOTIFY shipagent_turn_done``.

The deadlines are liveness bounds (a turn of the scripted model takes milliseconds; the slowed
polls take minutes), not performance assertions: ``bench/durable.py`` measures the latency.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from shipagent import ShipAgent
from shipagent.config import load_config
from shipagent.hosts.durable import _runtime
from shipagent.store import open_stores
from tests.support.durable import Worker, durable_project, read_jsonl
from tests.support.postgres import fresh_database

pytestmark = pytest.mark.anyio

SLOW = 600.0
"""Every poll interval in these tests: far beyond the deadlines below."""


@pytest.fixture
def slow_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_runtime, "QUEUE_POLL_SECONDS", {"sqlite": SLOW, "postgres": SLOW})
    monkeypatch.setattr(_runtime, "RESULT_POLL_SECONDS", SLOW)
    monkeypatch.setattr(_runtime, "RESULT_POLL_MAX_SECONDS", {"sqlite": SLOW, "postgres": SLOW * 4})


async def _turn_ids(project: Path, chat_key: str) -> list[str]:
    stores = open_stores(project, load_config(project))
    try:
        return [r.data["requestId"] for r in await stores.messages.records(chat_key) if r.data["t"] == "turn"]
    finally:
        await stores.close()


async def test_a_worker_runs_the_turns_it_enqueues_without_waiting_for_a_poll(
    tmp_path: Path, database: str, monkeypatch: pytest.MonkeyPatch, slow_polls: None
) -> None:
    from tests.support.durable_worker import scripted_model

    project = durable_project(tmp_path / "p", database)
    monkeypatch.setenv("SHIPAGENT_TEST_DIR", str(project / "signals"))
    agent = ShipAgent.from_project(project, model=scripted_model())  # this process is the worker
    outputs: dict[str, list[str]] = {"chat:a": [], "chat:b": []}

    async def chat(key: str) -> None:
        for n in range(3):
            result = await agent.run(key, f"{key[-1]}{n}", request_id=f"{key[-1]}-{n}")
            outputs[key].append(result.output)

    with anyio.fail_after(60):  # a single missed claim or result would wait SLOW seconds
        async with agent, anyio.create_task_group() as group:
            group.start_soon(chat, "chat:a")
            group.start_soon(chat, "chat:b")
    assert outputs == {
        "chat:a": ["echo: a0", "echo: a1", "echo: a2"],
        "chat:b": ["echo: b0", "echo: b1", "echo: b2"],
    }
    assert await _turn_ids(project, "chat:a") == ["a-0", "a-1", "a-2"]  # once each, in order
    assert await _turn_ids(project, "chat:b") == ["b-0", "b-1", "b-2"]


async def test_notify_wakes_a_worker_elsewhere_and_the_client_waiting_for_its_result(
    tmp_path: Path, postgres_server: str, slow_polls: None
) -> None:
    import psycopg

    with fresh_database(postgres_server) as url:
        project = durable_project(tmp_path / "p", url)
        worker = Worker(project, "worker-woken")
        try:
            await anyio.to_thread.run_sync(worker.wait_ready)
            # the worker runs with the normal fallback poll; slow it down in the database, where
            # its queue thread re-reads the interval before every wait
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(
                    "UPDATE dbos.queues SET polling_interval_sec = %s WHERE name = 'shipagent_turns'", (SLOW,)
                )
            await anyio.sleep(2)  # the current (short) wait ends and the slow one begins
            agent = ShipAgent.from_project(project)
            agent.turn_executor_options = {"worker": False}  # serve --no-worker's role
            results = []
            with anyio.fail_after(120):  # a turn waiting for a poll would take SLOW seconds
                async with agent:
                    for n in range(3):
                        results.append(await agent.run("chat:w", f"w{n}", request_id=f"w-{n}"))
        finally:
            worker.stop()
        assert [r.output for r in results] == ["echo: w0", "echo: w1", "echo: w2"]
        assert {q["pid"] for q in read_jsonl(project / "signals" / "requests.jsonl")} == {worker.pid}
        assert await _turn_ids(project, "chat:w") == ["w-0", "w-1", "w-2"]
