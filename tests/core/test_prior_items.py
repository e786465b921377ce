"""Unedited history items are reused between requests, and a later edited request never changes an earlier record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from shipagent import ShipAgent

pytestmark = pytest.mark.anyio
KEY = "web:user:5"


def big_lookup() -> str:
    """A result that no longer fits beside the whole history."""
    return "BIG " + " ".join(f"fact{j}" for j in range(500))


async def test_a_request_that_edits_leaves_the_records_of_unedited_ones_alone(tmp_path: Path) -> None:
    received: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        received.append(list(messages))
        last = messages[-1]
        asked = isinstance(last, ModelRequest) and any(
            "look it up" in str(getattr(p, "content", "")) for p in last.parts
        )
        if asked:
            return ModelResponse(parts=[ToolCallPart("big_lookup", {}, tool_call_id=f"c{len(received)}")])
        return ModelResponse(parts=[TextPart("noted " + "blah " * 150)])

    ship = {"context": {"chatHistory": {"inMemoryMaxMessages": 1000, "maxHistoryTokens": 2500}}}
    (tmp_path / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    agent = ShipAgent.from_project(
        tmp_path, model=FunctionModel(model), toolsets=[FunctionToolset([big_lookup])]
    )
    for n in range(8):  # a history that fits whole: these requests reuse each other's items
        assert (await agent.run(KEY, f"chat {n} " + "words " * 40)).success
    assert (await agent.run(KEY, "please look it up")).success  # request 1 fits, request 2 must drop history
    assert (await agent.run(KEY, "and now?")).success

    records = agent.ledger(KEY)
    assert len(records) == len(received) == 11
    first, second = records[-3], records[-2]
    assert (first.step, second.step) == (1, 2)
    assert {i.edit for i in first.items} == {"whole"}  # still as it was sent, though step 2 dropped items
    assert all(i.tokens == i.original_tokens > 0 for i in first.items)
    assert "dropped" in {i.edit for i in second.items}
    restarted = ShipAgent.from_project(tmp_path, model=FunctionModel(model))
    for record, sent in zip(records, received, strict=True):
        assert restarted.reconstruct(KEY, record.request_id, record.step) == sent, record.id
    # the big result arrived whole in step 2: history gave way, not the result
    results = [p for m in received[-2] for p in m.parts if isinstance(p, ToolReturnPart)]
    assert results and str(results[-1].content).startswith("BIG ")


async def test_a_compacted_chat_reuses_its_items_past_the_fused_summary(tmp_path: Path) -> None:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("fine " * 20)])

    ship = {"context": {"chatHistory": {"inMemoryMaxMessages": 12, "compactKeepLastMessages": 6}}}
    (tmp_path / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    agent = ShipAgent.from_project(tmp_path, model=FunctionModel(model))
    for n in range(8):  # past the bound: the history is a summary + the recent messages
        assert (await agent.run(KEY, f"message {n}")).success
    assert (await agent.run(KEY, "one more")).success
    before = list(agent._wiring.prior_items.get(KEY))
    assert before[0].section == "summary" and before[0].source.startswith("summary:")
    assert (await agent.run(KEY, "and another")).success
    after = agent._wiring.prior_items.get(KEY)
    # the summary arrives fused with the next request (new objects each time); the rest is reused
    shared = [a is b for a, b in zip(before, after, strict=False)]
    assert shared[2:] == [True] * (len(before) - 2) and len(after) == len(before) + 2
    records = agent.ledger(KEY)
    assert [i.source for i in records[-1].items][: len(before)] == [i.source for i in before]
