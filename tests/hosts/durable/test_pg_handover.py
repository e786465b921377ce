"""Handover in a durable cluster: cards and boxes live in Postgres, whichever machine writes them.

Two agents on two project copies (each its own ``.ship/``) share one real database, as two
workers on two machines do. A turn committed the worker way on machine A fills A's chat output
box; machine B's delegation inherits that box and its sub-agent receives exactly those cards;
what B's delegation wrote (the context box, the sub-agent's output box) reads back on A.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent import ShipAgent
from shipagent.agent.turns import TurnHooks
from shipagent.errors import NotFoundError
from shipagent.store import PgStores
from shipagent.store.cards._cards import CARD_TASK_INSTRUCTION
from shipagent.tools.handover import CARD_CHAT_MESSAGE, SqliteCardBoxStore, TextContent
from tests.tools.test_handover_delegation import Recorder, all_text

pytestmark = pytest.mark.anyio

ALICE, BOB = "web:alice", "web:bob"
SHIP: dict[str, Any] = {"name": "demo", "profiles": {"helper": {"instructions": "You summarise."}}}


def _machine(root: Path, database: str) -> Path:
    root.mkdir()
    config = {**SHIP, "durable": {"enabled": True, "database": database}}
    (root / "ship.json").write_text(json.dumps(config), encoding="utf-8")
    return root


class ClusterHooks(TurnHooks):
    """A Postgres worker's load and commit (``PgTurnHooks``), without DBOS's recorded steps."""

    def __init__(self, stores: PgStores) -> None:
        from shipagent.hosts.durable._pgturns import PgTurnHooks

        self.pg = PgTurnHooks(stores)

    async def load(self, agent: ShipAgent, chat_key: str, load: Any) -> list[ModelMessage]:
        return await self.pg.load(agent, chat_key, load)

    async def commit(self, agent: ShipAgent, turn: Any, commit: Any) -> Any:
        return await self.pg.commit(agent, turn, commit)


def _said(cards: list[Any]) -> list[tuple[str, str, str, str]]:
    out = []
    for card in cards:
        assert isinstance(card.content, TextContent), card
        out.append((card.type, card.metadata["role"], card.metadata["request_id"], card.content.text))
    return out


async def test_a_commit_on_machine_a_is_the_box_a_delegation_on_machine_b_inherits(
    tmp_path: Path, pg_database: str
) -> None:
    one = _machine(tmp_path / "one", pg_database)
    two = _machine(tmp_path / "two", pg_database)
    stores = PgStores(pg_database, project_id="demo")  # the workers' commit store

    a = ShipAgent.from_project(
        one, model=FunctionModel(lambda m, i: ModelResponse([TextPart("ship friday")]))
    )
    a.turn_hooks = ClusterHooks(stores)
    helper = Recorder(lambda m, i: ModelResponse([TextPart("summary: it ships on friday")]))
    box_of_alice: dict[str, str] = {}

    def boss(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if isinstance(messages[-1].parts[-1], ToolReturnPart):
            return ModelResponse([TextPart("asked the helper")])
        task = {"profile_name": "helper", "instruction": "Summarise alice's plan.", "input_box_ids": []}
        task["input_box_ids"] = [box_of_alice["id"]]
        return ModelResponse([ToolCallPart("fork_join", {"tasks": [task]})])

    b = ShipAgent.from_project(two, model=FunctionModel(boss), profile_models={"helper": helper.model})
    b.turn_hooks = ClusterHooks(stores)
    try:
        result = await a.execute_turn(ALICE, "what is the plan?", request_id="r-alice")
        assert result.success, result.output

        # machine B, another chat, another .ship/: A's output box, card for card
        box_of_alice["id"] = await b.handover.output_box_id(ALICE)
        assert box_of_alice["id"] == await a.handover.output_box_id(ALICE)
        seen_on_b = await b.handover.read_box(box_of_alice["id"])
        assert _said(seen_on_b) == [
            (CARD_CHAT_MESSAGE, "user", "r-alice", "what is the plan?"),
            (CARD_CHAT_MESSAGE, "assistant", "r-alice", "ship friday"),
        ]
        committed = await stores.cards.get_box(await stores.cards.named_box(f"output:{ALICE}"))
        assert [c.card_id for c in seen_on_b] == committed.card_ids  # the very rows A's commit wrote

        # B delegates with that box: the helper is sent exactly A's turn, then the instruction
        result = await b.execute_turn(BOB, "ask the helper about alice", request_id="r-bob")
        assert result.success, result.output
        (sent,) = helper.requests
        text = all_text(sent)
        assert text.index("what is the plan?") < text.index("ship friday") < text.index("Summarise alice")

        # B's handover writes, read on A: the context box B packed, the helper's output box
        (task,) = b.handover.tasks.values()
        assert task.status == "done", task.error
        packed = await a.handover.read_box(task.context_box_id)
        assert [c.card_id for c in packed if c.type == CARD_CHAT_MESSAGE] == committed.card_ids
        assert any(c.type == CARD_TASK_INSTRUCTION for c in packed)
        rendered = await a.handover.render_box(task.context_box_id)
        assert rendered.prompt.startswith("Summarise alice's plan.")
        answers = await a.handover.read_box(await a.handover.output_box_id(task.chat_key))
        assert [(role, text) for _, role, _, text in _said(answers)][-1] == (
            "assistant",
            "summary: it ships on friday",
        )
        # B's own turn was committed by its worker hooks: its cards are there for A too
        bob = _said(await a.handover.read_box(await a.handover.output_box_id(BOB)))
        assert bob == [
            (CARD_CHAT_MESSAGE, "user", "r-bob", "ask the helper about alice"),
            (CARD_CHAT_MESSAGE, "assistant", "r-bob", "asked the helper"),
        ]
        for root in (one, two):  # no machine kept cards of its own
            assert not (root / ".ship" / "cardbox.sqlite3").exists()
    finally:
        await stores.close()
        for agent in (a, b):
            await agent.handover.aclose()


async def test_a_handover_write_on_b_reads_on_a_and_errors_name_the_box(
    tmp_path: Path, pg_database: str
) -> None:
    one = _machine(tmp_path / "one", pg_database)
    two = _machine(tmp_path / "two", pg_database)
    a, b = ShipAgent.from_project(one), ShipAgent.from_project(two)
    try:
        card = await b.handover.store.add_card(type="note", content="from machine two", author_id="b")
        box = await b.handover.store.named_box("shared:notes")
        assert await b.handover.store.append_to_box(box, [card]) == [card]
        # A finds the box by name (one box per project and name, whoever asked first)
        assert await a.handover.store.named_box("shared:notes") == box
        (got,) = await a.handover.read_box(box)
        assert (got.card_id, got.content, got.author_id, got.project_id) == (
            card,
            TextContent("from machine two"),
            "b",
            "demo",
        )
        # profile boxes are shared too: both machines resolve one box per profile
        assert await a.handover.resources.find_profile_by_name(
            "helper"
        ) == await b.handover.resources.find_profile_by_name("helper")
        with pytest.raises(NotFoundError, match="box 'no-such-box' not found"):
            await a.handover.read_box("no-such-box")
        assert not (one / ".ship" / "cardbox.sqlite3").exists()
    finally:
        for agent in (a, b):
            await agent.handover.aclose()


def test_a_worker_process_commit_is_read_by_handover_on_another_machine(
    tmp_path: Path, pg_database: str
) -> None:
    """A real ``shipagent worker`` (DBOS, its own process and ``.ship/``) commits; machine two reads."""
    import shutil

    import anyio

    from tests.hosts.durable.test_durable_pg_files import _on_worker
    from tests.support.durable import durable_project

    one = durable_project(tmp_path / "machine-1", pg_database)
    two = tmp_path / "machine-2"
    two.mkdir()
    shutil.copy(one / "ship.json", two / "ship.json")
    signals = tmp_path / "signals"
    signals.mkdir()
    turns = [("boxes:1", "w1", "hello"), ("boxes:1", "w2", "again")]
    results = _on_worker(one, "worker-1", signals, turns, pg_database)
    assert [r.output for r in results] == ["echo: hello", "echo: again"]

    async def read() -> list[tuple[str, str, str, str]]:
        agent = ShipAgent.from_project(two)
        try:
            return _said(await agent.handover.read_box(await agent.handover.output_box_id("boxes:1")))
        finally:
            await agent.handover.aclose()

    assert anyio.run(read) == [
        (CARD_CHAT_MESSAGE, "user", "w1", "hello"),
        (CARD_CHAT_MESSAGE, "assistant", "w1", "echo: hello"),
        (CARD_CHAT_MESSAGE, "user", "w2", "again"),
        (CARD_CHAT_MESSAGE, "assistant", "w2", "echo: again"),
    ]
    assert not (one / ".ship" / "cardbox.sqlite3").exists()  # the worker kept no cards of its own


def test_files_projects_keep_their_sqlite_card_store(tmp_path: Path) -> None:
    assert isinstance(ShipAgent.from_project(tmp_path).handover.store, SqliteCardBoxStore)
    (tmp_path / "ship.json").write_text(json.dumps({"durable": {"enabled": True, "database": "sqlite"}}))
    assert isinstance(ShipAgent.from_project(tmp_path).handover.store, SqliteCardBoxStore)
