"""A cluster's Postgres from every kind of caller: a tool on the loop, a worker thread, no loop at all.

The stores are async and their connections belong to the loop that opened them, so: a tool awaits
the database on its run's loop (the loop keeps serving other tasks meanwhile), a sync caller in a
worker thread is answered on that thread's loop, a sync caller with no loop on one made for the
call, and a sync call on a running loop's own thread is refused with the method to await instead.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from shipagent import ShipAgent
from shipagent.chatkeys import ShipPaths
from shipagent.config import ShipConfig
from shipagent.errors import ShipAgentError
from shipagent.store import PgStores
from shipagent.store._pg_files import ClusterContextFiles
from shipagent.tools.execution import ToolExecutionContext, use_tool_context
from shipagent.tools.files import context_toolset
from shipagent.window.compaction import summary_id
from tests.core.test_ledger import KEY, SHIP, Capture, load_rules, lookup
from tests.hosts.durable.test_pg_handover import ClusterHooks

WAITING = "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'shipagent.context_index'::regclass"


def _durable(root: Path, database: str) -> Path:
    root.mkdir(exist_ok=True)
    config = {**SHIP, "durable": {"enabled": True, "database": database}}
    (root / "ship.json").write_text(json.dumps(config), encoding="utf-8")
    return root


def _hold_the_index(url: str, locked: threading.Event, release: threading.Event) -> None:
    """Another client holds ``context_index`` exclusively until told (or, as a last resort, a minute)."""
    with psycopg.connect(url) as conn:
        conn.execute("LOCK TABLE shipagent.context_index IN ACCESS EXCLUSIVE MODE")
        locked.set()
        release.wait(60)  # only if the loop never frees up to say so: the order below then fails
        conn.rollback()


@pytest.mark.anyio
async def test_a_context_read_waiting_on_postgres_leaves_the_tools_loop_serving_other_tasks(
    tmp_path: Path, pg_database: str
) -> None:
    one = ClusterContextFiles(ShipPaths(tmp_path / "one"), PgStores(pg_database))
    ref = await one.aadd_artifact(KEY, "the build failed: disk full\n", name="log", source="tool:make")
    stores = PgStores(pg_database)
    two = ClusterContextFiles(ShipPaths(tmp_path / "two"), stores)
    assert [r.id for r in await two.alist(KEY)] == [ref.id]  # the schema is checked, a connection open

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if parts:
            return ModelResponse(parts=[TextPart(parts[0].model_response_str())])
        return ModelResponse(parts=[ToolCallPart("context_read", {"id": ref.id})])

    ctx = ToolExecutionContext(
        chat_key=KEY,
        request_id="r1",
        project_root=tmp_path / "two",
        config=ShipConfig(),
        paths=ShipPaths(tmp_path / "two"),
        context_files=two,
    )
    events: list[str] = []
    locked, release = threading.Event(), threading.Event()
    answers: list[str] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.to_thread.run_sync, _hold_the_index, pg_database, locked, release)
        await anyio.to_thread.run_sync(locked.wait)

        async def read() -> None:
            with use_tool_context(ctx):
                result = await Agent(FunctionModel(model), toolsets=[context_toolset()]).run("what failed?")
            answers.append(result.output)
            events.append("the tool's read returned")

        async def tick() -> None:
            async with await psycopg.AsyncConnection.connect(pg_database, autocommit=True) as watcher:
                while not events:  # until the read is seen waiting for the lock (or is over)
                    count = await (await watcher.execute(WAITING)).fetchone()
                    if count is not None and count[0] > 0:
                        events.append("another task ran while the read waited on Postgres")
                        break
                    await anyio.sleep(0.01)
            release.set()

        tg.start_soon(read)
        tg.start_soon(tick)
    assert events == ["another task ran while the read waited on Postgres", "the tool's read returned"]
    assert json.loads(answers[0])["content"] == "the build failed: disk full\n"
    await stores.close()


def test_the_sync_inspection_methods_of_a_cluster_work_from_threads_with_no_loop(
    tmp_path: Path, pg_database: str
) -> None:
    root = _durable(tmp_path / "project", pg_database)
    capture = Capture()
    tools = [FunctionToolset([lookup, load_rules])]
    agent = ShipAgent.from_project(root, model=FunctionModel(capture), toolsets=tools)
    fresh = ShipAgent.from_project(root, model=FunctionModel(capture))  # holds none of the chat in memory
    seen: dict[str, Any] = {}

    async def turns() -> None:  # one loop runs the turns (its connections go with it)
        agent.turn_hooks = ClusterHooks(agent.store)  # type: ignore[arg-type]
        for text in ["hello", "use tools please", "plain " + "x " * 100, "use tools again", "bye"] * 2:
            result = await agent.execute_turn(KEY, text)
            assert result.success, result.output
        seen["history"] = await fresh.ahistory(KEY)
        # a worker thread of a running loop: answered back on that loop
        seen["from a worker thread"] = await anyio.to_thread.run_sync(fresh.history, KEY)
        await agent.handover.aclose()
        await fresh.handover.aclose()

    anyio.run(turns)
    assert seen["from a worker thread"] == seen["history"]
    records = agent.ledger(KEY)

    def inspect() -> tuple[Any, ...]:
        history = fresh.history(KEY)
        sid = summary_id(history[0])
        assert sid is not None
        received = [fresh.reconstruct(KEY, r.request_id, r.step) for r in records]
        return history, fresh.expand(KEY, sid), received

    here = inspect()  # this thread: no loop at all
    assert here[0] == seen["history"] and here[1] and here[2] == capture.requests
    there: list[Any] = []
    thread = threading.Thread(target=lambda: there.append(inspect()))  # a plain thread, no loop either
    thread.start()
    thread.join()
    assert there == [here]


@pytest.mark.anyio
async def test_a_sync_read_on_a_running_loop_in_a_cluster_names_what_to_await(
    tmp_path: Path, pg_database: str
) -> None:
    agent = ShipAgent.from_project(_durable(tmp_path, pg_database))
    try:
        with pytest.raises(
            ShipAgentError, match=r"would block the running event loop.*ShipAgent\.ahistory\(\)"
        ):
            agent.history(KEY)
        with pytest.raises(ShipAgentError, match=r"ShipAgent\.aexpand\(\) or ShipAgent\.areconstruct\(\)"):
            agent.expand(KEY, "S0-1")
        with pytest.raises(ShipAgentError, match=r"alist, aread, atail, agrep, aadd_artifact"):
            agent.context_files.list(KEY)
        # the async twins answer on this loop
        assert await agent.ahistory(KEY) == []
        assert await agent.context_files.alist(KEY) == []
        with pytest.raises(KeyError):
            await agent.aexpand(KEY, "S0-1")
    finally:
        await agent.handover.aclose()


def test_one_store_serves_two_event_loops_at_once_each_on_its_own_connections(pg_database: str) -> None:
    """Serve's loop and a worker thread's loop share an agent's store: neither uses the other's connections."""
    stores = PgStores(pg_database)
    both_connected = threading.Barrier(2, timeout=60)
    backends: dict[str, list[int]] = {}

    def on_a_loop_of_its_own(name: str) -> None:
        async def main() -> None:
            pids = backends.setdefault(name, [])
            for n in range(6):
                (row,) = await stores.pool.fetch("SELECT pg_backend_pid()")
                pids.append(int(row[0]))
                if n == 0:  # both loops hold a connection before either goes on
                    await anyio.to_thread.run_sync(both_connected.wait)
            await stores.pool.release()

        anyio.run(main)

    threads = [threading.Thread(target=on_a_loop_of_its_own, args=(name,)) for name in ("serve", "worker")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [len(set(backends[name])) for name in ("serve", "worker")] == [1, 1]  # each reuses its own
    assert backends["serve"][0] != backends["worker"][0]
