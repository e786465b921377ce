"""Idle and excess chats leave memory and come back from disk unchanged; running turns stay put."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent.store import agent_context
from shipagent.tools.handover import _runtime as handover_runtime
from tests.support.core import ScriptedModel, context_limits, dump, make_agent, make_project, read_jsonl


def _limits(**extra: int) -> dict[str, object]:
    return context_limits(inMemoryMaxMessages=1000, compactKeepLastMessages=500, **extra)


@pytest.mark.anyio
async def test_an_evicted_chat_continues_with_exactly_its_history(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", _limits(maxResidentChats=2))
    model = ScriptedModel()
    agent = make_agent(root, model.model)
    for text in ("a one", "a two"):
        assert (await agent.run("chat:a", text)).success
    before = dump(model.requests[-1]) + dump([ModelResponse(parts=[TextPart("echo: a two")])])
    assert (await agent.run("chat:b", "b one")).success
    assert (await agent.run("chat:c", "c one")).success
    assert agent.chats.resident() == ["chat:b", "chat:c"]  # a was the least recently used

    assert (await agent.run("chat:a", "a three")).success
    sent = model.requests[-1]
    # the model sees a's two earlier turns exactly as before, then the new request
    assert [m["parts"] for m in dump(sent[: len(before)])] == [m["parts"] for m in before]
    assert [p["content"] for p in dump(sent[len(before) :])[0]["parts"]] == ["a three"]
    assert agent.chats.resident() == ["chat:c", "chat:a"]


@pytest.mark.anyio
async def test_lru_order_keeps_the_recently_used(tmp_path: Path) -> None:
    agent = make_agent(make_project(tmp_path / "p", _limits(maxResidentChats=2)), ScriptedModel().model)
    for key in ("k:a", "k:b", "k:a", "k:c"):
        assert (await agent.run(key, "hi")).success
    assert agent.chats.resident() == ["k:a", "k:c"]  # b was least recently used, not a
    assert (await agent.run("k:b", "again")).success
    assert agent.chats.resident() == ["k:c", "k:b"]


@pytest.mark.anyio
async def test_idle_chats_leave_memory_after_idle_evict_seconds(tmp_path: Path) -> None:
    agent = make_agent(make_project(tmp_path / "p", _limits(idleEvictSeconds=600)), ScriptedModel().model)
    now = [1000.0]
    agent.chats.clock = lambda: now[0]
    assert (await agent.run("k:a", "hi")).success
    history = dump(agent.history("k:a"))
    now[0] += 599
    assert (await agent.run("k:b", "hi")).success
    assert agent.chats.resident() == ["k:a", "k:b"]  # 599 s idle: still here
    now[0] += 2
    assert (await agent.run("k:b", "again")).success
    assert agent.chats.resident() == ["k:b"]  # a idled 601 s
    assert dump(agent.history("k:a")) == history  # rebuilt from disk, the same


@pytest.mark.anyio
async def test_a_chat_whose_turn_runs_is_never_evicted(tmp_path: Path) -> None:
    """With room for one chat and no idle time, a running turn keeps its chat and its lock."""
    root = make_project(tmp_path / "p", _limits(maxResidentChats=1, idleEvictSeconds=0))
    release = anyio.Event()
    entered = anyio.Event()
    order: list[str] = []

    async def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        text = str(messages[-1].parts[-1].content)  # type: ignore[union-attr]
        order.append(f"start {text}")
        if text == "slow":
            entered.set()
            await release.wait()
        order.append(f"end {text}")
        return ModelResponse(parts=[TextPart(f"done {text}")])

    agent = make_agent(root, FunctionModel(reply))
    results: dict[str, bool] = {}

    async def turn(key: str, text: str) -> None:
        results[text] = (await agent.run(key, text)).success

    async with anyio.create_task_group() as group:
        group.start_soon(turn, "k:slow", "slow")
        await entered.wait()
        group.start_soon(turn, "k:slow", "queued")  # waits for the same chat's lock
        await anyio.sleep(0.05)
        for i in range(3):  # other chats come and go, each evicting what it may
            await turn(f"k:other{i}", f"other {i}")
        assert "start queued" not in order  # still waiting: the lock survived the evictions
        release.set()
    assert all(results.values()) and len(results) == 5
    assert order.index("end slow") < order.index("start queued")
    history = [m for m in dump(agent.history("k:slow")) if m["kind"] == "request"]
    assert [p["content"] for m in history for p in m["parts"]] == ["slow", "queued"]


@pytest.mark.anyio
async def test_per_chat_bookkeeping_is_bounded_and_stays_correct(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(handover_runtime, "MAX_REMEMBERED_BOXES", 2)
    monkeypatch.setattr(agent_context, "_REMEMBERED_COUNTS", 2)
    root = make_project(tmp_path / "p", {"context": {"agentContext": {"windowEntries": 3}}})
    agent = make_agent(root, ScriptedModel().model)
    for round_ in range(4):
        for key in ("k:a", "k:b", "k:c"):
            assert (await agent.run(key, f"{key} {round_}")).success
    assert len(agent.handover._output_boxes) <= 2
    assert len(agent.agent_context._counts) <= 2
    # every chat's cards went to its own output box, in order, across cache misses
    box = await agent.handover.output_box_id("k:a")
    cards = await agent.handover.read_box(box)
    assert [c.content.text for c in cards if c.metadata["role"] == "user"] == [f"k:a {i}" for i in range(4)]
    # and the agent-context window held (3 entries: a summary of two runs, then the last two)
    entries = read_jsonl(agent.agent_context.path("k:a"))
    assert len(entries) == 3 and entries[0]["summary"] is True and entries[0]["runs"] == 2
    assert [e["userPreview"] for e in entries[1:]] == ["k:a 2", "k:a 3"]


def _turn_seqs(agent_path: Path) -> list[tuple[int, int]]:
    """``(seq, message count)`` of every turn record of a message log, in file order."""
    return [(r["seq"], len(r["messages"])) for r in read_jsonl(agent_path) if r["t"] == "turn"]


@pytest.mark.anyio
async def test_an_evicted_chat_continues_its_message_seqs_from_disk(tmp_path: Path) -> None:
    """Eviction drops a chat's ``sources``/``next_seq`` with it; the rebuilt chat numbers on from disk."""
    agent = make_agent(make_project(tmp_path / "p", _limits(maxResidentChats=1)), ScriptedModel().model)
    for text in ("a one", "a two"):
        assert (await agent.run("k:a", text)).success
    assert (await agent.run("k:b", "b one")).success  # room for one chat: a leaves memory
    assert agent.chats.resident() == ["k:b"]
    assert (await agent.run("k:a", "a three")).success
    await agent.chats.reset("k:a", "clear-1")  # a /clear on the rebuilt chat keeps the counter
    assert (await agent.run("k:b", "b two")).success
    assert (await agent.run("k:a", "a four")).success

    path = agent.chats.log.path("k:a")
    seqs = _turn_seqs(path)
    assert [seq for seq, _ in seqs] == [0, 2, 4, 6]  # contiguous: each turn is a request + a response
    assert all(count == 2 for _, count in seqs)
    clear = [r for r in read_jsonl(path) if r["t"] == "compaction"]
    assert [(c["sources"], c["nextSeq"]) for c in clear] == [([], 6)]
    assert agent.chats.sources("k:a") == ["history:6", "history:7"]
    # "messages" stays the last key of a turn record (the line is built around pydantic's bytes)
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert list(json.loads(first)) == ["t", "ts", "requestId", "seq", "messages"]
    assert [seq for seq, _ in _turn_seqs(agent.chats.log.path("k:b"))] == [0, 2]
