"""Optional model-written summaries: pair-safe, expandable, persisted, with fallback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from shipagent import ShipAgent
from shipagent.results import StepEvent
from shipagent.window.compaction import is_summary, summary_id

pytestmark = pytest.mark.anyio
KEY = "tg:chat:5"


def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


class Script:
    def __init__(self, *, fail_summary: bool = False) -> None:
        self.fail_summary = fail_summary
        self.summary_inputs: list[str] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if info.instructions and info.instructions.startswith("You summarize"):
            prompt = str(messages[-1].parts[-1].content)  # type: ignore[union-attr]
            self.summary_inputs.append(prompt)
            if self.fail_summary:
                raise RuntimeError("summary model is down")
            return ModelResponse(
                parts=[TextPart(f"MODEL SUMMARY #{len(self.summary_inputs)}: the user asks about weather")]
            )
        last = messages[-1]
        if any(isinstance(p, ToolReturnPart) for p in last.parts):
            return ModelResponse(parts=[TextPart("it is sunny")])
        return ModelResponse(
            parts=[ToolCallPart("weather", {"city": "Oslo"}, tool_call_id=f"w{len(messages)}")]
        )


def _agent(root: Path, script: Script) -> ShipAgent:
    ship = {
        "context": {
            "chatHistory": {"inMemoryMaxMessages": 8, "compactKeepLastMessages": 4, "summarizer": "model"}
        }
    }
    (root / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    return ShipAgent.from_project(root, model=FunctionModel(script), toolsets=[FunctionToolset([weather])])


async def test_a_model_summary_is_pair_safe_expandable_persisted_and_reported(tmp_path: Path) -> None:
    script = Script()
    agent = _agent(tmp_path, script)
    events: list[StepEvent] = []

    async def on_step(event: StepEvent) -> None:
        events.append(event)

    committed: list[ModelMessage] = []
    for n in range(3):
        assert (await agent.run(KEY, f"weather {n}?", on_step=on_step)).success
        committed.extend(agent.history(KEY)[-4:])  # each turn: request, call, result, answer
    compactions = [e for e in events if e.type == "compaction"]
    assert compactions and compactions[0].data["summarizer"] == "model"
    history = agent.history(KEY)
    head = history[0]
    assert is_summary(head) and "MODEL SUMMARY #1" in head.parts[0].content  # type: ignore[union-attr]
    # the model saw the folded messages (and the previous summary, none yet)
    assert (
        "There is no previous summary" in script.summary_inputs[0]
        and "sunny in Oslo" in script.summary_inputs[0]
    )
    # pair-safe: no tool result in the kept tail without its call
    calls = {p.tool_call_id for m in history for p in m.parts if isinstance(p, ToolCallPart)}
    returns = {p.tool_call_id for m in history for p in m.parts if isinstance(p, ToolReturnPart)}
    assert returns <= calls
    # expandable and persisted
    sid = summary_id(head)
    assert sid is not None and compactions[0].data["summaryId"] == sid
    restarted = ShipAgent.from_project(tmp_path, model=FunctionModel(script))
    assert restarted.history(KEY)[0] == head
    info: Any = head.metadata["shipagent"]  # type: ignore[index]
    assert restarted.expand(KEY, sid) == committed[info["fromSeq"] : info["toSeq"] + 1]
    # the ledger says which summarizer wrote the summary a request carried
    assert (await agent.run(KEY, "and now?")).success
    assert agent.ledger(KEY, last=1)[0].summarizer == "model"


async def test_a_failing_summary_model_falls_back_to_the_extract(tmp_path: Path) -> None:
    script = Script(fail_summary=True)
    agent = _agent(tmp_path, script)
    events: list[StepEvent] = []

    async def on_step(event: StepEvent) -> None:
        events.append(event)

    for n in range(3):
        result = await agent.run(KEY, f"weather {n}?", on_step=on_step)
        assert result.success, result.output
    assert script.summary_inputs  # it was asked
    compactions = [e for e in events if e.type == "compaction"]
    assert compactions and compactions[0].data["summarizer"] == "extract"
    head = agent.history(KEY)[0]
    assert is_summary(head) and "tool call weather" in head.parts[0].content  # type: ignore[union-attr]
