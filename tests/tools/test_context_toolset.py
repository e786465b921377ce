"""Provider tools as a pydantic-ai toolset: validated args, the tool execution context, failures as data."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent.chatkeys import ShipPaths
from shipagent.config import ShipConfig
from shipagent.tools.context import ProviderTool
from shipagent.tools.context._toolset import provider_toolset
from shipagent.tools.execution import ToolExecutionContext, current_tool_context, use_tool_context

pytestmark = pytest.mark.anyio

TICKET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "minLength": 3},
        "priority": {"type": "integer", "minimum": 1, "maximum": 5},
    },
    "required": ["title"],
    "additionalProperties": False,
}


def tool_context(tmp_path: Path, token: str | None = "ab" * 32) -> ToolExecutionContext:
    return ToolExecutionContext(
        chat_key="api:chat:alice",
        request_id="req-1",
        project_root=tmp_path,
        config=ShipConfig(),
        paths=ShipPaths(tmp_path),
        session_token=token,
    )


def scripted(calls: list[dict[str, Any]], tool_name: str = "ticket_open") -> FunctionModel:
    """A model that makes the given tool calls one request at a time, then answers with the results."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = sum(isinstance(m, ModelResponse) for m in messages)
        if step < len(calls):
            return ModelResponse(parts=[ToolCallPart(tool_name, calls[step], tool_call_id=f"call-{step}")])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond)


def parts_of(messages: list[ModelMessage], kind: type) -> list[Any]:
    return [p for m in messages for p in m.parts if isinstance(p, kind)]


async def test_handler_gets_validated_kwargs_and_the_run_tool_context(tmp_path: Path) -> None:
    received: list[tuple[dict[str, Any], str, str | None]] = []

    async def open_ticket(title: str, priority: int = 3) -> dict[str, Any]:
        ctx = current_tool_context()
        received.append(({"title": title, "priority": priority}, ctx.chat_key, ctx.session_token))
        return {"id": 7, "title": title}

    toolset = provider_toolset(
        [ProviderTool("ticket_open", "Open a ticket.", TICKET_SCHEMA, handler=open_ticket)]
    )
    agent = Agent(scripted([{"title": "Disk full", "priority": 2}]), toolsets=[toolset])
    with use_tool_context(tool_context(tmp_path)):
        result = await agent.run("file it")

    assert received == [({"title": "Disk full", "priority": 2}, "api:chat:alice", "ab" * 32)]
    returns = parts_of(result.all_messages(), ToolReturnPart)
    assert [(r.tool_name, r.content) for r in returns] == [("ticket_open", {"id": 7, "title": "Disk full"})]


async def test_schema_violations_go_back_to_the_model_and_the_handler_never_sees_them(tmp_path: Path) -> None:
    seen: list[str] = []
    toolset = provider_toolset(
        [
            ProviderTool(
                "ticket_open", "Open a ticket.", TICKET_SCHEMA, handler=lambda title, **_: seen.append(title)
            )
        ]
    )
    agent = Agent(
        scripted([{"title": "no", "priority": 9, "extra": True}, {"title": "Disk full"}]), toolsets=[toolset]
    )
    with use_tool_context(tool_context(tmp_path)):
        result = await agent.run("file it")

    assert seen == ["Disk full"]
    returns = parts_of(result.all_messages(), ToolReturnPart)
    assert [r.outcome for r in returns] == ["retried", "success"]
    assert returns[0].content == (
        "invalid arguments for ticket_open: (arguments): Additional properties are not allowed "
        "('extra' was unexpected); priority: 9 is greater than the maximum of 5; title: 'no' is too short"
    )


async def test_sync_handlers_run_off_the_event_loop_but_see_the_tool_context(tmp_path: Path) -> None:
    seen: list[tuple[str, bool]] = []
    loop_thread = threading.get_ident()

    def blocking(title: str) -> str:
        seen.append((current_tool_context().request_id, threading.get_ident() != loop_thread))
        return f"opened {title}"

    toolset = provider_toolset(
        [ProviderTool("ticket_open", "Open a ticket.", TICKET_SCHEMA, handler=blocking)]
    )
    with use_tool_context(tool_context(tmp_path)):
        result = await Agent(scripted([{"title": "Disk full"}]), toolsets=[toolset]).run("go")
    assert seen == [("req-1", True)]
    assert parts_of(result.all_messages(), ToolReturnPart)[0].content == "opened Disk full"


async def test_a_raising_handler_is_failure_data_the_model_reads_not_a_dead_run(tmp_path: Path) -> None:
    def broken(title: str) -> str:
        raise ConnectionError("tracker unreachable")

    toolset = provider_toolset([ProviderTool("ticket_open", "Open a ticket.", TICKET_SCHEMA, handler=broken)])
    with use_tool_context(tool_context(tmp_path)):
        result = await Agent(scripted([{"title": "Disk full"}]), toolsets=[toolset]).run("go")
    assert result.output == "done"
    failed = parts_of(result.all_messages(), ToolReturnPart)
    assert [(f.tool_name, f.content) for f in failed] == [
        (
            "ticket_open",
            {"success": False, "error": "ticket_open failed: ConnectionError: tracker unreachable"},
        )
    ]


async def test_a_handler_may_raise_tool_failed_itself(tmp_path: Path) -> None:
    def refuse(title: str) -> str:
        raise ToolFailed("tickets are closed for the weekend")

    toolset = provider_toolset([ProviderTool("ticket_open", "Open a ticket.", TICKET_SCHEMA, handler=refuse)])
    with use_tool_context(tool_context(tmp_path)):
        result = await Agent(scripted([{"title": "Disk full"}]), toolsets=[toolset]).run("go")
    [failed] = parts_of(result.all_messages(), ToolReturnPart)
    assert (failed.outcome, failed.content) == ("failed", "tickets are closed for the weekend")


async def test_the_model_sees_the_tool_schema_whole(tmp_path: Path) -> None:
    shown: list[Any] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        shown.extend((t.name, t.description, t.parameters_json_schema) for t in info.function_tools)
        return ModelResponse(parts=[TextPart("ok")])

    toolset = provider_toolset(
        [ProviderTool("ticket_open", "Open a ticket.", TICKET_SCHEMA, handler=lambda **a: a)]
    )
    await Agent(FunctionModel(respond), toolsets=[toolset]).run("hi")
    assert shown == [("ticket_open", "Open a ticket.", TICKET_SCHEMA)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "has space"}, "must match"),
        ({"name": "x" * 65}, "must match"),
        ({"scope": "admin"}, "scope must be one of all, service, employee"),
        ({"parameters": {"type": "string"}}, "must be a JSON schema of type 'object'"),
        (
            {"parameters": {"type": "object", "properties": {"a": {"type": "nope"}}}},
            "invalid parameters schema",
        ),
    ],
)
def test_provider_tool_rejects_what_no_model_api_would_accept(kwargs: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {
        "name": "ok_tool",
        "description": "d",
        "parameters": TICKET_SCHEMA,
        "handler": print,
    }
    fields.update(kwargs)
    with pytest.raises(ValueError, match=message):
        ProviderTool(**fields)
