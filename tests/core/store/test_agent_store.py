"""The agent writes a turn only through its ChatStore: one record per turn, whatever the backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent import ShipAgent
from shipagent.chatkeys import ShipPaths
from shipagent.store import MemoryStores, TurnRecord

pytestmark = pytest.mark.anyio

KEY = "api:chat:alice"


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart(f"answer {len(messages)}")])


async def test_the_agent_commits_through_the_store_it_holds(tmp_path: Path) -> None:
    (tmp_path / "ship.json").write_text(
        '{"context": {"chatHistory": {"inMemoryMaxMessages": 4, "compactKeepLastMessages": 2}}}'
    )
    agent = ShipAgent.from_project(tmp_path, model=FunctionModel(answer))
    store = MemoryStores()
    records: list[TurnRecord] = []
    commit = store.commit

    async def spy(record: TurnRecord):  # type: ignore[no-untyped-def]
        records.append(record)
        return await commit(record)

    store.commit = spy  # type: ignore[method-assign]
    agent.store = store  # type: ignore[assignment]
    agent.chats.store = store
    for text in ("one", "two", "three"):
        assert (await agent.run(KEY, text)).success

    assert [r.user_text for r in records] == ["one", "two", "three"]  # one record per turn
    third = records[-1]
    assert third.compaction is not None and third.removed  # decided before the write, in the record
    loaded = await store.load(KEY)
    assert loaded.messages == agent.history(KEY) == third.compaction
    said = [(r.data["role"], r.data["text"]) for r in await store.transcript.records(KEY)]
    assert said[::2] == [("user", "one"), ("user", "two"), ("user", "three")]
    assert [r.kind for r in await store.context_files.list(KEY)] == ["history"]
    assert not ShipPaths(tmp_path).message_log(KEY).exists()  # nothing went around the store
    assert not ShipPaths(tmp_path).transcript(KEY).exists()


async def test_a_turn_run_again_under_its_request_id_is_held_once(tmp_path: Path) -> None:
    agent = ShipAgent.from_project(tmp_path, model=FunctionModel(answer))
    for _ in range(2):  # a caller retrying with the same request id (a replayed durable turn)
        assert (await agent.run(KEY, "hello", request_id="once")).success
    paths = ShipPaths(tmp_path)
    turns = [line for line in paths.message_log(KEY).read_text().splitlines() if '"t":"turn"' in line]
    assert len(turns) == 1
    assert len(paths.transcript(KEY).read_text().splitlines()) == 2  # the user, the answer
    assert len(agent.history(KEY)) == 2


async def test_only_a_request_id_the_agent_minted_skips_asking_the_store(tmp_path: Path) -> None:
    """A minted id cannot be held yet: its commit asks no part first; a caller's id always asks."""
    agent = ShipAgent.from_project(tmp_path, model=FunctionModel(answer))
    records: list[TurnRecord] = []
    commit = agent.store.commit

    async def spy(record: TurnRecord):  # type: ignore[no-untyped-def]
        records.append(record)
        return await commit(record)

    agent.store.commit = spy  # type: ignore[method-assign]
    assert (await agent.run(KEY, "minted")).success
    assert (await agent.run(KEY, "named", request_id="caller-1")).success
    assert (await agent.run(KEY, "named", request_id="caller-1")).success  # a retry: held once
    assert [r.fresh for r in records] == [True, False, False]
    paths = ShipPaths(tmp_path)
    turns = [line for line in paths.message_log(KEY).read_text().splitlines() if '"t":"turn"' in line]
    assert len(turns) == 2 and len(agent.history(KEY)) == 4
    assert not agent._wiring.minted  # remembered only until the commit
