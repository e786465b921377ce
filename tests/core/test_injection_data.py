"""Injected messages travel as data: in the injecting call's result, rebuilt per request."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturn,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from shipagent import current_tool_context
from shipagent.chatkeys import ShipPaths
from shipagent.config import parse_config
from shipagent.tools._injections import InjectionToolset, attach_injections
from shipagent.tools.execution import InjectedMessage, ToolExecutionContext, _current, use_tool_context
from shipagent.window.injections import INJECTIONS_KEY, run_injections, strip_injections
from shipagent.window.placement import ContextWindow, place_injections
from tests.support.core import ScriptedModel, answer, has_tool_return, make_agent, make_project, render, texts

pytestmark = pytest.mark.anyio


def _fresh_context(root: Path) -> ToolExecutionContext:
    return ToolExecutionContext(
        chat_key="k", request_id="r", project_root=root, config=parse_config({}), paths=ShipPaths(root)
    )


def _returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [
        p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)
    ]


async def test_injections_survive_a_fresh_tool_context_before_every_request(tmp_path: Path) -> None:
    """The contextvar state is thrown away between requests; the messages still carry the injection."""

    def inject_rules() -> str:
        current_tool_context().inject_system_message_once("RULES: be brief", fingerprint="rules")
        return "ok"

    def noop() -> str:
        return "nothing"

    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        step = len(seen)
        if step == 1:
            return ModelResponse(parts=[ToolCallPart("inject_rules", {}, tool_call_id="c1")])
        if step == 2:
            return ModelResponse(parts=[ToolCallPart("noop", {}, tool_call_id="c2")])
        return answer("done")

    agent = Agent(FunctionModel(model))
    toolset = InjectionToolset(FunctionToolset([inject_rules, noop]))
    contexts: list[ToolExecutionContext] = []
    async with agent.iter("go", toolsets=[toolset], capabilities=[ContextWindow(32000)]) as run:
        async for node in run:
            if Agent.is_model_request_node(node):
                contexts.append(_fresh_context(tmp_path))  # what a replayed / resumed turn would have
                _current.set(contexts[-1])
    _current.set(None)
    assert len(seen) == 3
    assert not any("RULES" in t for t in texts(seen[0]))
    for request in seen[1:]:
        assert [t for _, kind, t in render(request) if kind == "system-prompt"] == ["RULES: be brief"]
    # the injecting tool ran under the first context, which was thrown away before request 2
    assert [c.injected for c in contexts] == [
        (InjectedMessage("system", "RULES: be brief", "rules"),),
        (),
        (),
    ]
    # the record lives in the run's messages, attributed to the call; the model never sees it
    messages = run.result.all_messages() if run.result else []
    meta = {p.tool_call_id: p.metadata for p in _returns(messages)}
    assert meta == {
        "c1": {INJECTIONS_KEY: [{"role": "system", "content": "RULES: be brief", "fingerprint": "rules"}]},
        "c2": None,
    }
    assert all(p.metadata is None for p in _returns(seen[2]))


async def test_concurrent_calls_of_one_step_keep_their_own_injections(tmp_path: Path) -> None:
    async def slow_first(n: int) -> str:
        ctx = current_tool_context()
        ctx.inject_system_message_once(f"SLOW-{n}-a", fingerprint=f"slow-{n}-a")
        await anyio.sleep(0.05)  # the other calls inject while this one is still running
        ctx.inject_assistant_message_once(f"SLOW-{n}-b", fingerprint=f"slow-{n}-b")
        return "slow"

    async def fast(n: int) -> str:
        await anyio.sleep(0.01)
        current_tool_context().inject_system_message_once(f"FAST-{n}", fingerprint=f"fast-{n}")
        return "fast"

    def threaded(n: int) -> str:  # a sync tool runs in a worker thread
        current_tool_context().inject_assistant_message_once(f"THREAD-{n}", fingerprint=f"thread-{n}")
        return "thread"

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if has_tool_return(messages):
            return answer("done")
        return ModelResponse(
            parts=[
                ToolCallPart("slow_first", {"n": 1}, tool_call_id="s"),
                ToolCallPart("fast", {"n": 2}, tool_call_id="f"),
                ToolCallPart("threaded", {"n": 3}, tool_call_id="t"),
            ]
        )

    ctx = _fresh_context(tmp_path)
    with use_tool_context(ctx):
        result = await Agent(FunctionModel(model)).run(
            "go", toolsets=[InjectionToolset(FunctionToolset([slow_first, fast, threaded]))]
        )
    by_call = {
        p.tool_call_id: [i["content"] for i in (p.metadata or {}).get(INJECTIONS_KEY, [])]
        for p in _returns(result.all_messages())
    }
    assert by_call == {"s": ["SLOW-1-a", "SLOW-1-b"], "f": ["FAST-2"], "t": ["THREAD-3"]}
    assert len(ctx.injected) == 4  # the shared dedupe state saw all of them


def test_rebuild_dedupes_by_fingerprint_and_caps_per_run() -> None:
    def ret(call_id: str, *items: tuple[str, str]) -> ModelRequest:
        records = [InjectedMessage("system", content, fp) for content, fp in items]
        value = attach_injections("ok", records)
        return ModelRequest(parts=[ToolReturnPart("t", value.return_value, call_id, metadata=value.metadata)])

    messages: list[ModelMessage] = [
        ret("c1", ("one", "a"), ("two", "b")),
        ret("c2", ("one again", "a"), ("three", "c"), ("four", "d")),
    ]
    got = run_injections(messages, limit=3)
    assert [(i.message.content, i.tool_call_id) for i in got] == [
        ("one", "c1"),
        ("two", "c1"),
        ("three", "c2"),
    ]
    laid = place_injections([], messages, limit=2)
    assert [t for _, kind, t in render(laid) if kind == "system-prompt"] == ["one", "two"]


def test_a_tools_own_tool_return_keeps_its_metadata_and_the_strip_restores_it() -> None:
    injected = [InjectedMessage("assistant", "hello", "fp")]
    mine = attach_injections(ToolReturn("v", metadata={"mine": 1}), injected)
    assert mine.metadata == {"mine": 1, INJECTIONS_KEY: [injected[0].to_json()]}
    foreign = attach_injections(ToolReturn("v", metadata=["a list"]), injected)
    assert foreign.metadata == {"tool": ["a list"], INJECTIONS_KEY: [injected[0].to_json()]}
    parts = [
        ToolReturnPart("t", "v", "c1", metadata=mine.metadata),
        ToolReturnPart("t", "v", "c2", metadata=foreign.metadata),
        ToolReturnPart("t", "v", "c3", metadata={INJECTIONS_KEY: []}),
    ]
    stripped = strip_injections([ModelRequest(parts=list(parts))])
    assert [p.metadata for p in stripped[0].parts] == [{"mine": 1}, ["a list"], None]
    assert attach_injections("plain", []) == "plain"


async def test_committed_history_and_disk_hold_no_injection_records(tmp_path: Path) -> None:
    def load() -> str:
        current_tool_context().inject_system_message_once("SECRET-INJECTION", fingerprint="s")
        return "loaded"

    def reply(messages: list[ModelMessage], info: AgentInfo, n: int) -> ModelResponse:
        return (
            answer("fine") if has_tool_return(messages) else ModelResponse(parts=[ToolCallPart("load", {})])
        )

    scripted = ScriptedModel(reply)
    root = make_project(tmp_path)
    agent = make_agent(root, scripted.model, [load])
    assert (await agent.run("k", "go")).success
    assert "SECRET-INJECTION" in texts(scripted.requests[1])
    assert all(p.metadata is None for p in _returns(agent.history("k")))
    for path in (root / ".ship").rglob("*.jsonl"):
        assert "SECRET-INJECTION" not in path.read_text(encoding="utf-8"), path
        for line in path.read_text(encoding="utf-8").splitlines():
            json.loads(line)
