"""The ledger: a record per model request that rebuilds exactly what was sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from shipagent import ShipAgent, current_tool_context
from tests.support.core import last_user_text

pytestmark = pytest.mark.anyio
KEY = "web:user:9"


def _project(root: Path, ship: dict[str, Any]) -> Path:
    (root / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    return root


def lookup(n: int) -> str:
    """A result of ~1,200 tokens."""
    return f"RESULT-{n} " + " ".join(f"fact{n}x{j}" for j in range(300))


def load_rules() -> str:
    """Injects a huge rule set (cut by its section) and a short earlier exchange."""
    ctx = current_tool_context()
    ctx.inject_system_message_once("RULES " + "always be kind " * 3000, fingerprint="rules-v1")
    ctx.inject_assistant_message_once("EARLIER: you asked about pizza", fingerprint="pizza")
    return "rules loaded"


def _run_returns(messages: list[ModelMessage]) -> int:
    count = 0
    for message in reversed(messages):
        if isinstance(message, ModelRequest) and any(isinstance(p, UserPromptPart) for p in message.parts):
            break
        if isinstance(message, ModelRequest):
            count += sum(isinstance(p, ToolReturnPart) for p in message.parts)
    return count


class Capture:
    def __init__(self) -> None:
        self.requests: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        text, done = last_user_text(messages), _run_returns(messages)
        if text.startswith("use tools") and done < 4:
            return ModelResponse(
                parts=[ToolCallPart("lookup", {"n": done}, tool_call_id=f"l{len(self.requests)}")]
            )
        if text.startswith("use tools") and done == 4:
            return ModelResponse(
                parts=[ToolCallPart("load_rules", {}, tool_call_id=f"r{len(self.requests)}")]
            )
        return ModelResponse(parts=[TextPart(f"answer to {text[:20]} " + "blah " * 60)])


SHIP = {
    "context": {
        "chatHistory": {
            "inMemoryMaxMessages": 10,
            "compactKeepLastMessages": 4,
            "maxHistoryTokens": 5000,
            "compactAtTokens": 100_000,  # compaction by count here; the budget edits requests
            "summaryMaxTokens": 1500,
        },
        "budget": {"sections": {"injections": 0.1}},
    }
}


async def _scripted_chat(root: Path) -> tuple[ShipAgent, Capture]:
    capture = Capture()
    agent = ShipAgent.from_project(
        _project(root, SHIP), model=FunctionModel(capture), toolsets=[FunctionToolset([lookup, load_rules])]
    )
    turns = [
        "hello",
        "use tools please",
        "plain " + "x " * 100,
        "use tools again",
        "huge " + "word " * 6000,
        "use tools one more time",
        "bye",
    ]
    for text in turns:
        result = await agent.run(KEY, text)
        assert result.success, result.output
    return agent, capture


async def test_reconstruct_equals_what_the_model_received_for_every_request(tmp_path: Path) -> None:
    agent, capture = await _scripted_chat(tmp_path)
    records = agent.ledger(KEY)
    assert len(records) == len(capture.requests)
    edits = {i.edit for r in records for i in r.items}
    assert {"whole", "cut", "elided", "dropped"} <= edits  # the scenario exercises every edit
    sources = {i.source.partition(":")[0] for r in records for i in r.items}
    assert sources == {"history", "summary", "injection", "turn"}
    restarted = ShipAgent.from_project(tmp_path, model=FunctionModel(capture))
    for record, received in zip(records, capture.requests, strict=True):
        assert restarted.reconstruct(KEY, record.request_id, record.step) == received, record.id


async def test_the_ledger_shows_each_edit_and_where_each_item_came_from(tmp_path: Path) -> None:
    agent, _capture = await _scripted_chat(tmp_path)
    records = agent.ledger(KEY)
    # the request after load_rules: the huge injection is cut in its section, attributed to its call
    with_rules = next(r for r in records if any(i.source == "injection:rules-v1" for i in r.items))
    rules = next(i for i in with_rules.items if i.source == "injection:rules-v1")
    assert rules.edit == "cut" and rules.original_tokens > rules.tokens
    assert rules.tool_call_ids and rules.tool_call_ids[0].startswith("r") and rules.role == "system"
    assert with_rules.sections["injectedSystem"] == rules.tokens
    # elided results say how to get them back: a context file
    elided = [i for r in records for i in r.items if i.edit == "elided"]
    hint = next(iter(elided[0].hints.values()))
    ref_id = hint.split("context_read(id='")[1].split("'")[0]
    assert agent.context_files.read(KEY, ref_id, 0, 65536).content.startswith("RESULT-")
    # dropped history is named by seq, and a tool pair is dropped (or kept) together
    for record in records:
        kept_calls = {
            c for i in record.items if i.edit != "dropped" and i.section == "history" for c in i.tool_call_ids
        }
        for item in record.items:
            if item.edit == "dropped":
                assert item.source.startswith(("history:", "summary:")) and item.tokens == 0
                assert not set(item.tool_call_ids) & kept_calls
    # the huge user text of turn 5 was cut, and said so
    huge = next(r for r in records if any(i.section == "turn" and i.edit == "cut" for i in r.items))
    assert huge.step == 1
    # prefix: the same instructions and tools on every request of this chat
    assert len({r.prefix_hash for r in records}) == 1
    # on disk: one line per request, valid JSON
    lines = (tmp_path / ".ship" / "chats" / "web%3Auser%3A9" / "requests.jsonl").read_text().splitlines()
    assert [json.loads(line)["requestId"] for line in lines] == [r.request_id for r in records]


async def test_the_ledger_rotates_to_one_previous_generation(tmp_path: Path) -> None:
    ship = {"context": {"ledger": {"keepRequests": 10}}}
    agent = ShipAgent.from_project(
        _project(tmp_path, ship), model=FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("ok")]))
    )
    for n in range(25):
        assert (await agent.run(KEY, f"turn {n}")).success
    chat = tmp_path / ".ship" / "chats" / "web%3Auser%3A9"
    current = (chat / "requests.jsonl").read_text().splitlines()
    previous = (chat / "requests.1.jsonl").read_text().splitlines()
    assert (len(previous), len(current)) == (10, 5)
    records = agent.ledger(KEY)
    assert len(records) == 15 and len(agent.ledger(KEY, last=3)) == 3
    assert [r.step for r in records] == [1] * 15


async def test_a_disabled_ledger_writes_nothing(tmp_path: Path) -> None:
    agent = ShipAgent.from_project(
        _project(tmp_path, {"context": {"ledger": {"enabled": False}}}),
        model=FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("ok")])),
    )
    assert (await agent.run(KEY, "hi")).success
    assert agent.ledger(KEY) == []
    assert not list((tmp_path / ".ship").rglob("requests*.jsonl"))
