"""shipagent's own per-run state is in typed fields of ``ToolExecutionContext``, not string keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent import current_tool_context
from tests.support.core import make_agent, make_project

pytestmark = pytest.mark.anyio


async def test_a_tool_sees_typed_fields_and_no_shipagent_extras(tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    def peek() -> str:
        """Look at the run's context."""
        ctx = current_tool_context()
        seen.update(extras=dict(ctx.extras), files=ctx.context_files, session=ctx.session)
        return "ok"

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("peek", {})])
        return ModelResponse(parts=[TextPart("done")])

    agent = make_agent(make_project(tmp_path / "p", {}), FunctionModel(model), tools=[peek])
    result = await agent.run("api:chat:a", "go")
    assert result.success, result.output
    assert seen["extras"] == {}  # nothing of shipagent's own hangs on string keys any more
    assert seen["files"] is agent.context_files
    assert seen["session"] is not None and seen["session"].token


async def test_sub_agent_limit_counts_on_the_runs_context(tmp_path: Path) -> None:
    from shipagent.errors import ShipAgentError
    from shipagent.tools.execution import ToolExecutionContext

    agent = make_agent(
        make_project(
            tmp_path / "p", {"profiles": {"w": {"instructions": "W"}}, "handover": {"maxSubagentsPerRun": 1}}
        ),
        FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("x")])),
    )
    ctx = ToolExecutionContext(
        chat_key="api:chat:a",
        request_id="r",
        project_root=agent.project_root,
        config=agent.config,
        paths=agent.paths,
    )
    await agent.handover.prepare("api:chat:a", profile_name="w", instruction="one", run=ctx)
    assert ctx.subagents_started == 1
    with pytest.raises(ShipAgentError, match="maxSubagentsPerRun is 1"):
        await agent.handover.prepare("api:chat:a", profile_name="w", instruction="two", run=ctx)
    await agent.handover.aclose()
