"""The public API other code and tests import from ``shipagent``: pinned, so a change is deliberate."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import shipagent
from shipagent import (
    AgentResult,
    ChatKeyError,
    ConfigError,
    InjectionResult,
    ShipAgent,
    ShipAgentError,
    StepEvent,
    ToolCallRecord,
    ToolContextError,
    ToolExecutionContext,
)


def test_all_is_pinned() -> None:
    assert shipagent.__all__ == [
        "AgentResult",
        "ApprovalRequest",
        "ApprovalRequired",
        "BadRequestError",
        "ChatKeyError",
        "Compacted",
        "ConfigError",
        "Done",
        "InjectionResult",
        "NotFoundError",
        "Pin",
        "Problem",
        "ProjectLockedError",
        "ReplyChannel",
        "Sender",
        "ShipAgent",
        "ShipAgentError",
        "ShipConfig",
        "StepEvent",
        "TextDelta",
        "ToolCallRecord",
        "ToolContextError",
        "ToolExecutionContext",
        "ToolFinished",
        "ToolStarted",
        "TurnDeps",
        "check_project",
        "current_tool_context",
        "load_config",
    ]


def test_every_public_name_is_importable_and_documented() -> None:
    for name in shipagent.__all__:
        obj = getattr(shipagent, name)
        assert obj.__doc__, f"shipagent.{name} has no docstring"
    assert sorted(shipagent.__all__) == shipagent.__all__  # kept sorted, like httpx


def test_public_objects_say_they_come_from_shipagent() -> None:
    for name in shipagent.__all__:
        assert getattr(shipagent, name).__module__.startswith("shipagent."), name


def test_error_tree() -> None:
    for error in (
        ConfigError,
        ChatKeyError,
        ToolContextError,
        shipagent.BadRequestError,
        shipagent.NotFoundError,
        shipagent.ProjectLockedError,
    ):
        assert issubclass(error, ShipAgentError)
    assert issubclass(ShipAgentError, Exception)
    assert ConfigError("x", path="llm.model").path == "llm.model"


def test_ship_agent_surface() -> None:
    params = inspect.signature(ShipAgent.from_project).parameters
    assert list(params)[:4] == ["root", "model", "toolsets", "on_approval"]
    for name in ("model", "toolsets", "on_approval"):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY
    assert inspect.iscoroutinefunction(ShipAgent.run)
    run = inspect.signature(ShipAgent.run).parameters
    assert list(run)[:3] == ["self", "chat_key", "text"]
    assert run["on_step"].kind is inspect.Parameter.KEYWORD_ONLY
    assert run["request_id"].kind is inspect.Parameter.KEYWORD_ONLY  # durable: same id → one turn
    assert callable(ShipAgent.run_sync) and callable(ShipAgent.history)
    stream = inspect.signature(ShipAgent.run_stream).parameters
    assert list(stream)[:3] == ["self", "chat_key", "text"]
    assert stream["channel"].kind is inspect.Parameter.KEYWORD_ONLY
    assert callable(ShipAgent.resolve_approval)
    assert hasattr(ShipAgent, "__aenter__") and hasattr(ShipAgent, "__aexit__")


def _fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def test_result_types() -> None:
    assert _fields(AgentResult) == [
        "success",
        "output",
        "request_id",
        "had_tool_failure",
        "tool_calls",
        "usage",
        "finish_reason",
        "budget",
    ]
    assert _fields(ToolCallRecord) == ["tool", "input", "output", "success", "error"]
    assert _fields(StepEvent) == ["type", "text", "data"]
    assert _fields(InjectionResult) == ["inserted", "reason"]
    events = {
        shipagent.TextDelta: ["text", "type"],
        shipagent.ToolStarted: ["tool_call_id", "tool", "args", "type"],
        shipagent.ToolFinished: ["tool_call_id", "tool", "success", "summary", "type"],
        shipagent.Compacted: ["removed", "kept", "type"],
        shipagent.ApprovalRequired: ["approval_id", "tool", "command", "type"],
        shipagent.Done: ["result", "type"],
    }
    for event, names in events.items():
        assert _fields(event) == names
    assert shipagent.TextDelta("x").type == "text_delta"
    assert InjectionResult(True) == InjectionResult(True, None)


def test_tool_execution_context_surface() -> None:
    names = _fields(ToolExecutionContext)
    for name in ("chat_key", "request_id", "project_root", "config", "max_injected_messages"):
        assert name in names
    for method in ("inject_system_message_once", "inject_assistant_message_once"):
        params = inspect.signature(getattr(ToolExecutionContext, method)).parameters
        assert list(params) == ["self", "content", "fingerprint"]
        assert params["fingerprint"].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.anyio
async def test_run_sync_and_async_with(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.support.core import ScriptedModel

    scripted = ScriptedModel()
    async with ShipAgent.from_project(tmp_path, model=scripted.model) as agent:
        result = await agent.run("k", "hi")
    assert result.success and result.output == "echo: hi"


def test_run_sync(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.support.core import ScriptedModel

    agent = ShipAgent.from_project(tmp_path, model=ScriptedModel().model)
    result = agent.run_sync("k", "hi")
    assert isinstance(result, AgentResult) and result.output == "echo: hi"
    assert result.usage.requests == 1


def test_durable_room_surface() -> None:
    import shipagent.hosts.durable

    assert shipagent.hosts.durable.__all__ == [
        "DurableExecutor",
        "DurableSettings",
        "claim_executor_id",
        "recover_executors",
        "resolve_settings",
    ]
    for name in shipagent.hosts.durable.__all__:
        assert getattr(shipagent.hosts.durable, name).__doc__, name


def test_stores_room_surface() -> None:
    import shipagent.store

    assert shipagent.store.__all__ == [
        "AgentContextStore",
        "Committed",
        "ContextFileStore",
        "FileStores",
        "LogRecord",
        "MemoryStores",
        "MessageLogStore",
        "MigrationRow",
        "PgStores",
        "RecordLog",
        "Stores",
        "TranscriptStore",
        "TurnWrite",
        "migrate",
        "open_stores",
    ]
    for name in shipagent.store.__all__:
        assert getattr(shipagent.store, name).__doc__, name
