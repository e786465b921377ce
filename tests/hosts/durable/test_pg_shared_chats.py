"""A durable cluster's chats, read and changed by a process that holds none of them (real Postgres).

``ShipAgent.history`` / ``expand`` / ``reconstruct`` / ``clear``, the context files and a failed
turn's ``chat_send`` lines of a project whose ship.json says ``durable`` on ``postgresql://``
go to the database, never to this machine's ``.ship/`` chat files.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from shipagent import ShipAgent
from shipagent.chatkeys import ShipPaths
from shipagent.store import FileStores, PgStores, migrate
from shipagent.window.compaction import summary_id
from tests.core.test_ledger import KEY, SHIP, Capture, _scripted_chat, load_rules, lookup
from tests.hosts.durable.test_pg_handover import ClusterHooks

pytestmark = pytest.mark.anyio


def _durable(root: Path, database: str, ship: dict[str, Any] | None = None) -> None:
    config = {**(ship or {}), "durable": {"enabled": True, "database": database}}
    (root / "ship.json").write_text(json.dumps(config), encoding="utf-8")


async def test_history_expand_reconstruct_context_files_and_clear_read_postgres(
    tmp_path: Path, pg_database: str
) -> None:
    agent, capture = await _scripted_chat(tmp_path)  # compacts, elides, injects: every store used
    await agent.handover.aclose()
    records = agent.ledger(KEY)
    from_files = ShipAgent.from_project(tmp_path, model=FunctionModel(capture))
    history = from_files.history(KEY)
    sid = summary_id(history[0])
    assert sid is not None
    expanded = from_files.expand(KEY, sid)
    refs = from_files.context_files.list(KEY, limit=1000)
    assert {r.kind for r in refs} >= {"history", "artifact", "catalog"}
    contents = {r.id: from_files.context_files.path_of(KEY, r).read_bytes() for r in refs}

    source, target = FileStores(tmp_path), PgStores(pg_database)
    try:
        assert all(row.ok for row in await migrate(source, target))
    finally:
        await source.close()
    # this machine keeps its ledger (per-machine diagnostics) and nothing of the chat itself
    paths = ShipPaths(tmp_path)
    for path in (paths.message_log(KEY), paths.transcript(KEY), paths.agent_context(KEY)):
        path.unlink()
    shutil.rmtree(paths.context_dir(KEY))
    _durable(tmp_path, pg_database, SHIP)

    member = ShipAgent.from_project(tmp_path, model=FunctionModel(capture))
    try:
        assert type(member.store).__name__ == "PgClusterStore"
        assert await member.ahistory(KEY) == history
        assert await member.aexpand(KEY, sid) == expanded
        for record, received in zip(records, capture.requests, strict=True):
            assert await member.areconstruct(KEY, record.request_id, record.step) == received, record.id
        # context files: listed from the database, each fetched into .ship/context/ when read
        assert [r.id for r in await member.context_files.alist(KEY, limit=1000)] == [r.id for r in refs]
        for ref in refs:
            page = await member.context_files.aread(KEY, ref.id, 0, 1 << 20)
            assert page.content.encode("utf-8") == contents[ref.id]
        history_ref = next(r for r in refs if r.kind == "history")
        word = next(w for w in contents[history_ref.id].decode().split() if w.isalnum() and len(w) > 3)
        assert (await member.context_files.agrep(KEY, history_ref.id, word)).total_matches >= 1
        assert not paths.message_log(KEY).exists()

        await member.clear(KEY)
        assert await member.ahistory(KEY) == []
        kinds = [r.data["t"] for r in await target.messages.records(KEY)]
        assert kinds[-1] == "compaction" and await target.messages.rebuild(KEY) == []
        assert not paths.message_log(KEY).exists()  # the clear went to the database only
    finally:
        await target.close()
        await member.handover.aclose()


def _send_then_fail(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if not isinstance(messages[-1].parts[-1], ToolReturnPart):
        return ModelResponse(parts=[ToolCallPart("chat_send", {"text": "on my way"})])
    raise RuntimeError("the model went away")


async def test_a_failed_turn_keeps_its_chat_send_lines_in_postgres_once(
    tmp_path: Path, pg_database: str
) -> None:
    _durable(tmp_path, pg_database)
    agent = ShipAgent.from_project(tmp_path, model=FunctionModel(_send_then_fail))
    stores = PgStores(pg_database)
    try:
        for _ in range(2):  # a resumed durable turn fails the same way: its lines are kept once
            result = await agent.execute_turn("web:bob", "come over", request_id="r-1")
            assert not result.success
        said = [
            (r.data["role"], r.data["text"], r.data.get("via"))
            for r in await stores.transcript.records("web:bob")
        ]
        assert said == [("user", "come over", None), ("assistant", "on my way", "tool")]
        assert await stores.messages.count("web:bob") == 0  # nothing of the turn was committed
        assert not ShipPaths(tmp_path).transcript("web:bob").exists()
    finally:
        await stores.close()
        await agent.handover.aclose()


def test_plain_and_sqlite_projects_have_no_shared_chats(tmp_path: Path) -> None:
    assert type(ShipAgent.from_project(tmp_path).store).__name__ == "FileStores"
    (tmp_path / "ship.json").write_text(json.dumps({"durable": {"enabled": True, "database": "sqlite"}}))
    agent = ShipAgent.from_project(tmp_path)
    assert type(agent.store).__name__ == "FileStores" and type(agent.context_files).__name__ == "ContextFiles"


async def test_a_cluster_numbers_messages_so_summaries_expand_on_every_machine(
    tmp_path: Path, pg_database: str
) -> None:
    """Compaction on worker one names a summary ``S<from>-<to>``; machine two expands it."""
    from functools import partial

    from pydantic_ai.messages import ModelRequest, TextPart, UserPromptPart

    from shipagent.agent.turns import TurnCommit
    from shipagent.hosts.durable._pgturns import PgTurnHooks
    from shipagent.tools._deps import TurnDeps
    from shipagent.tools.files._tools import expand_page

    ship = {"context": {"chatHistory": {"inMemoryMaxMessages": 6, "compactKeepLastMessages": 2}}}
    one, two, back = tmp_path / "one", tmp_path / "two", tmp_path / "back"
    for root in (one, two, back):
        root.mkdir()
        _durable(root, pg_database, ship)
    first = ShipAgent.from_project(one, model=FunctionModel(_send_then_fail))
    second = ShipAgent.from_project(two, model=FunctionModel(_send_then_fail))
    stores = PgStores(pg_database)
    hooks = {id(first): PgTurnHooks(stores), id(second): PgTurnHooks(stores)}

    async def turn(agent: ShipAgent, n: int) -> None:  # what a worker's turn does around its run
        base = await hooks[id(agent)].load(agent, KEY, partial(agent.chats.aget, KEY))
        new = [ModelRequest(parts=[UserPromptPart(f"q{n}")]), ModelResponse(parts=[TextPart(f"a{n}")])]
        commit = TurnCommit(KEY, f"r{n}", f"q{n}", f"a{n}", f"a{n}", [], [], base, new, None)
        _, failure = await hooks[id(agent)].commit(agent, commit, agent._wiring.commit)
        assert failure is None

    try:
        for n in range(5):  # alternate machines: each turn is committed by the other worker
            await turn(first if n % 2 == 0 else second, n)
        history = await second.ahistory(KEY)
        sid = summary_id(history[0])
        assert sid == "S0-5"  # the six oldest messages, numbered 0..5 across both workers
        expanded = await second.aexpand(KEY, sid)
        assert [m.parts[0].content for m in expanded] == [f"{x}{n}" for n in range(3) for x in "qa"]  # type: ignore[union-attr]
        # the model's tool on machine two, mid-turn, reads the shared log
        deps = TurnDeps(second._wiring.tool_context(KEY, "r-x", None), hooks[id(second)].tool_stores(second))
        page = await expand_page(deps, sid)
        assert (
            page["success"] and page["messages"] == 6 and "q0" in page["content"] and "a2" in page["content"]
        )

        await second.clear(KEY)  # numbering goes on after a clear
        await turn(first, 5)
        kinds = [
            (r.data["t"], r.data.get("seq"), r.data.get("nextSeq"))
            for r in await stores.messages.records(KEY)
        ]
        assert kinds[-2:] == [("compaction", None, 10), ("turn", 10, None)]
        # the records are the files' format: copied back to .ship/, a plain agent reads the same
        source, target = PgStores(pg_database), FileStores(back)
        try:
            assert all(row.ok for row in await migrate(source, target))
        finally:
            await source.close()
            await target.close()
        (back / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
        plain = ShipAgent.from_project(back)
        assert plain.expand(KEY, sid) == expanded
        assert [type(m).__name__ for m in plain.history(KEY)] == ["ModelRequest", "ModelResponse"]
        assert plain.chats.numbering(KEY) == (["history:10", "history:11"], 12)
    finally:
        await stores.close()
        for agent in (first, second):
            await agent.handover.aclose()


async def test_every_request_of_a_cluster_run_chat_is_reconstructed_from_postgres(
    tmp_path: Path, pg_database: str
) -> None:
    """Turns loaded and committed the way a Postgres worker does: the ledger's sources resolve there."""
    _durable(tmp_path, pg_database, SHIP)
    stores = PgStores(pg_database)
    capture = Capture()
    tools = [FunctionToolset([lookup, load_rules])]
    agent = ShipAgent.from_project(tmp_path, model=FunctionModel(capture), toolsets=tools)
    agent.turn_hooks = ClusterHooks(stores)
    try:
        for text in ["hello", "use tools please", "plain " + "x " * 100, "use tools again", "bye"] * 2:
            result = await agent.execute_turn(KEY, text)
            assert result.success, result.output
        records = agent.ledger(KEY)
        assert any(i.source.startswith("summary:S") for r in records for i in r.items)  # compacted, with ids
        assert not ShipPaths(tmp_path).message_log(KEY).exists()  # the chat is in Postgres only
        fresh = ShipAgent.from_project(tmp_path, model=FunctionModel(capture))
        for record, received in zip(records, capture.requests, strict=True):
            assert await fresh.areconstruct(KEY, record.request_id, record.step) == received, record.id
        await fresh.handover.aclose()
    finally:
        await stores.close()
        await agent.handover.aclose()
