"""The documentation's context-provider example (examples/context_provider.py), run through ShipAgent."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent import ShipAgent
from tests.support.paths import ROOT

pytestmark = pytest.mark.anyio

EXAMPLE = ROOT / "examples" / "context_provider.py"
README = ROOT / "docs" / "guides/context-providers.md"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("context_provider_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Script:
    """Calls ticket_open with a too-short title, then a valid one, then answers."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, list[str], list[ModelMessage]]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append((info.instructions or "", [t.name for t in info.function_tools], messages))
        calls = [
            {"title": "bug"},
            {"title": "Login page returns 500", "severity": "major"},
        ]
        step = len(self.requests) - 1
        if step < len(calls):
            return ModelResponse(parts=[ToolCallPart("ticket_open", calls[step], tool_call_id=f"t{step}")])
        return ModelResponse(parts=[TextPart("Filed T-1.")])


async def test_service_agent_gets_the_tool_the_guidance_and_validated_calls(tmp_path: Path) -> None:
    example = load_example()
    (tmp_path / "ship.json").write_text(
        json.dumps({"name": "support-bot", "agent": {"archetype": "service"}})
    )
    script = Script()
    agent = ShipAgent.from_project(
        tmp_path, model=FunctionModel(script), providers=[example.TicketsProvider()]
    )

    async with agent:
        result = await agent.run("api:chat:alice", "the login page is broken")

    assert result.success and result.output == "Filed T-1."
    instructions, tools, _ = script.requests[0]
    assert "support-bot files every bug it finds as a ticket." in instructions
    assert (
        "- `ticket_open` — Open a ticket in the tracker.\n  Open one ticket per distinct bug." in instructions
    )
    assert "ticket_open" in tools
    # the too-short title went back to the model; only the valid call reached the handler
    retry: Any = next(
        p for p in script.requests[1][2][-1].parts if isinstance(p, ToolReturnPart) and p.outcome == "retried"
    )
    assert retry.content == "invalid arguments for ticket_open: title: 'bug' is too short"
    assert example.TICKETS == [
        {"id": "T-1", "title": "Login page returns 500", "severity": "major", "chat": "api:chat:alice"}
    ]


async def test_repo_agent_does_not_get_the_service_scoped_tool(tmp_path: Path) -> None:
    example = load_example()
    seen: list[tuple[str, list[str]]] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append((info.instructions or "", [t.name for t in info.function_tools]))
        return ModelResponse(parts=[TextPart("hi")])

    agent = ShipAgent.from_project(
        tmp_path, model=FunctionModel(answer), providers=[example.TicketsProvider()]
    )
    assert (await agent.run("c", "hello")).success
    [(instructions, tools)] = seen
    assert "ticket_open" not in tools
    assert "## Internal tools" not in instructions
    assert "shipagent files every bug it finds as a ticket." in instructions  # the context still applies


def test_the_readme_shows_the_example_verbatim() -> None:
    readme = README.read_text(encoding="utf-8")
    if "# Context providers" not in readme:
        pytest.fail(f"{README} lost its section")
    assert EXAMPLE.read_text(encoding="utf-8").strip() in readme
