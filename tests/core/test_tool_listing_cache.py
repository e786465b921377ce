"""A user's FunctionToolset keeps working as they change it between turns, though listings are remembered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import FunctionToolset

from shipagent import ShipAgent
from tests.support.core import make_project

pytestmark = pytest.mark.anyio


def weather(city: str) -> str:
    """Tell the weather."""
    return f"sunny in {city}"


async def test_renamed_added_and_prepared_tools_reach_the_model(tmp_path: Path) -> None:
    offered: list[dict[str, str]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        offered.append({t.name: t.description or "" for t in info.function_tools})
        return ModelResponse(parts=[TextPart("ok")])

    toolset: FunctionToolset[Any] = FunctionToolset([weather])
    agent = ShipAgent.from_project(make_project(tmp_path), model=FunctionModel(model), toolsets=[toolset])
    assert (await agent.run("t:1", "one")).success
    assert (await agent.run("t:1", "two")).success
    assert offered[0]["weather"] == offered[1]["weather"] == "Tell the weather."
    # the user edits the tool's description: the next request carries the new one
    toolset.tools["weather"].description = "Tell the weather, in Celsius."
    assert (await agent.run("t:1", "three")).success
    assert offered[-1]["weather"] == "Tell the weather, in Celsius."
    # a tool added to the same toolset is offered at once
    toolset.add_function(lambda: "42", name="answer", description="The answer.")
    assert (await agent.run("t:1", "four")).success
    assert offered[-1]["answer"] == "The answer."
    # a tool with a prepare function is asked on every request (here: hidden on odd ones)
    calls: list[int] = []

    async def every_other(ctx: RunContext[Any], tool_def: ToolDefinition) -> ToolDefinition | None:
        calls.append(1)
        return tool_def if len(calls) % 2 == 0 else None

    toolset.add_function(lambda: "x", name="sometimes", description="Now and then.", prepare=every_other)
    assert (await agent.run("t:1", "five")).success
    assert (await agent.run("t:1", "six")).success
    assert ["sometimes" in o for o in offered[-2:]] == [False, True]
