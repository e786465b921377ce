"""Provider MCP servers: started with the agent like ship.json's servers, stopped with it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent import ShipAgent
from shipagent.tools.context import AgentInstanceMeta, McpServerStdio
from tests.support.paths import MCP_SERVERS

pytestmark = pytest.mark.anyio

STDIO_SERVER = str(MCP_SERVERS / "stdio_server.py")


class Probe:
    """Contributes the test stdio server twice under one name (dedupe) and once under ship.json's name."""

    name = "probe"

    def get_mcp_servers(self, agent_name: str, meta: AgentInstanceMeta) -> list[McpServerStdio]:
        return [
            McpServerStdio("probe", sys.executable, [STDIO_SERVER], {"SHIP_TEST_VALUE": "from-provider"}),
            McpServerStdio("probe", "never-started"),
            McpServerStdio("taken", "never-started"),
        ]


async def test_provider_mcp_server_tools_are_callable_and_the_server_stops_with_the_agent(
    tmp_path: Path,
) -> None:
    (tmp_path / "ship.json").write_text(
        '{"mcp": {"servers": {"taken": {"command": "definitely-not-a-command-xyz"}}}}', encoding="utf-8"
    )
    seen_tools: list[list[str]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen_tools.append(sorted(t.name for t in info.function_tools))
        if not any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            return ModelResponse(parts=[ToolCallPart("probe__whereami", {}, tool_call_id="w1")])
        return ModelResponse(parts=[TextPart("ok")])

    agent = ShipAgent.from_project(tmp_path, model=FunctionModel(respond), providers=[Probe()])
    async with agent:
        manager = agent.context_runtime.mcp
        assert manager is not None
        assert [(s.name, s.state) for s in manager.servers] == [("probe", "connected")]
        result = await agent.run("c", "where are you?")

    assert result.success, result.output
    assert "probe__whereami" in seen_tools[0] and "probe__echo" in seen_tools[0]
    assert not any(name.startswith("taken__") for name in seen_tools[0])
    [call] = result.tool_calls
    assert call.tool == "probe__whereami" and call.success
    assert "from-provider" in call.output
    assert agent.context_runtime.mcp is None  # stopped with the agent
