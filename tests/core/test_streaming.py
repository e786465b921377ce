"""``ShipAgent.run_stream``: events as they happen, one turn implementation with ``run``."""

from __future__ import annotations

import json
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic_ai.toolsets import FunctionToolset

from shipagent import (
    ApprovalRequest,
    ApprovalRequired,
    Compacted,
    Done,
    ShipAgent,
    TextDelta,
    ToolFinished,
    ToolStarted,
    current_tool_context,
)
from shipagent.errors import ChatKeyError
from shipagent.events import RunEvent
from tests.support.core import (
    answer,
    context_limits,
    dump,
    has_tool_return,
    make_project,
    read_jsonl,
    tool_call,
    user_texts,
)
from tests.support.stream import StreamScript

KEY = "web:alice"
LONG = "a long answer that streams in many small pieces, " * 3


async def collect(agent: ShipAgent, text: str, key: str = KEY, **kwargs: Any) -> list[RunEvent]:
    async with aclosing(agent.run_stream(key, text, **kwargs)) as events:
        return [event async for event in events]


def inject_context() -> str:
    """Injects a system and an assistant message the next requests must carry."""
    ctx = current_tool_context()
    ctx.inject_system_message_once("INJECTED SYSTEM: answer briefly " + "x" * 400, fingerprint="s")
    ctx.inject_assistant_message_once("INJECTED ASSISTANT: earlier transcript " + "y" * 400, fingerprint="a")
    return "injected"


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@pytest.mark.anyio
async def test_deltas_concatenate_to_the_final_output_and_done_is_last_exactly_once(tmp_path: Path) -> None:
    script = StreamScript(lambda m, i, n: answer(LONG), chunk=5)
    async with ShipAgent.from_project(make_project(tmp_path), model=script.model) as agent:
        events = await collect(agent, "tell me")
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 10  # really streamed, not one lump
    assert [e.type for e in events].count("done") == 1
    assert isinstance(events[-1], Done)
    result = events[-1].result
    assert result.success and "".join(deltas).strip() == result.output == LONG.strip()
    assert script.streamed == [True]  # the provider was asked for a stream


@pytest.mark.anyio
async def test_tool_events_in_order_with_step_summaries(tmp_path: Path) -> None:
    def reply(messages, info, n):  # type: ignore[no-untyped-def]
        return answer("three") if has_tool_return(messages) else tool_call("add", {"a": 1, "b": 2}, "c1")

    script = StreamScript(reply)
    tools = [FunctionToolset([add])]
    async with ShipAgent.from_project(make_project(tmp_path), model=script.model, toolsets=tools) as agent:
        events = await collect(agent, "add")
    assert [e.type for e in events] == ["tool_started", "tool_finished", "text_delta", "text_delta", "done"]
    started, finished = events[0], events[1]
    assert started == ToolStarted("c1", "add", {"a": 1, "b": 2})
    assert finished == ToolFinished("c1", "add", True, "add: done")
    result = events[-1].result  # type: ignore[union-attr]
    assert [(r.tool, r.output) for r in result.tool_calls] == [("add", "3")]


@pytest.mark.anyio
async def test_run_stream_and_run_commit_the_same_history(tmp_path: Path) -> None:
    histories = []
    for mode in ("run", "stream"):
        script = StreamScript()
        async with ShipAgent.from_project(make_project(tmp_path / mode), model=script.model) as agent:
            for text in ("one", "two"):
                if mode == "run":
                    assert (await agent.run(KEY, text)).success
                else:
                    assert isinstance((await collect(agent, text))[-1], Done)
            histories.append(agent.history(KEY))
    assert user_texts(histories[0]) == user_texts(histories[1]) == ["one", "two"]
    assert _normalized(histories[0]) == _normalized(histories[1])


_VOLATILE = {"timestamp", "run_id", "conversation_id", "usage", "provider_response_id"}


def _normalized(messages: Any) -> Any:
    """Messages as JSON without what differs between any two runs (times, ids, usage estimates).

    Tool-call arguments are compared parsed: a streamed call arrives as a JSON string, a whole one
    as a dict, which is how the model sent them, not something shipagent shapes.
    """

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            if isinstance(value.get("args"), str):
                value = {**value, "args": json.loads(value["args"])}
            return {k: strip(v) for k, v in value.items() if k not in _VOLATILE}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(dump(messages))


@pytest.mark.anyio
async def test_streamed_requests_carry_the_same_budget_cut_and_injections(tmp_path: Path) -> None:
    """The ContextWindow capability shapes a streamed request exactly like a non-streamed one."""

    def reply(messages, info, n):  # type: ignore[no-untyped-def]
        if "inject" not in user_texts(messages)[-1:]:
            return answer(f"reply {n}: " + "z" * 300)
        return answer("done") if has_tool_return(messages) else tool_call("inject_context", {}, "c1")

    sent: dict[str, list[Any]] = {}
    for mode in ("run", "stream"):
        script = StreamScript(reply)
        root = make_project(tmp_path / mode, context_limits(maxHistoryTokens=256))
        tools = [FunctionToolset([inject_context])]
        async with ShipAgent.from_project(root, model=script.model, toolsets=tools) as agent:
            for text in ("first", "second", "third", "inject"):
                if mode == "run":
                    assert (await agent.run(KEY, text)).success
                else:
                    assert (await collect(agent, text))[-1].result.success  # type: ignore[union-attr]
        assert script.streamed == [mode == "stream"] * 5
        sent[mode] = [_normalized(r) for r in script.requests]
    assert sent["run"] == sent["stream"]
    last = json.dumps(sent["stream"][-1])
    assert "INJECTED SYSTEM" in last and "INJECTED ASSISTANT" in last  # the injections were placed
    assert "reply 1" not in last  # the budget cut the oldest history from the request


@pytest.mark.anyio
async def test_breaking_out_mid_stream_commits_nothing_and_the_next_turn_runs(tmp_path: Path) -> None:
    script = StreamScript(lambda m, i, n: answer(LONG), chunk=3, delay=0.01)
    root = make_project(tmp_path)
    async with ShipAgent.from_project(root, model=script.model) as agent:
        await collect(agent, "before")
        history = dump(agent.history(KEY))
        log = root / ".ship" / "chats" / "web%3Aalice" / "messages.jsonl"
        on_disk = log.read_bytes()
        transcript = agent.transcript.path(KEY).read_bytes()
        async with aclosing(agent.run_stream(KEY, "stop me")) as events:
            async for event in events:
                if isinstance(event, TextDelta):
                    break
        sent_before = script.chunks_sent
        await anyio.sleep(0.05)
        assert script.chunks_sent == sent_before  # the model stream stopped with the consumer
        assert dump(agent.history(KEY)) == history
        assert log.read_bytes() == on_disk
        assert agent.transcript.path(KEY).read_bytes() == transcript
        after = await collect(agent, "after")  # the lock was released
    assert after[-1].result.success  # type: ignore[union-attr]
    assert user_texts(agent.history(KEY)) == ["before", "after"]


@pytest.mark.anyio
async def test_a_plain_break_without_aclosing_also_cancels_the_turn(tmp_path: Path) -> None:
    script = StreamScript(lambda m, i, n: answer(LONG), chunk=3, delay=0.01)
    async with ShipAgent.from_project(make_project(tmp_path), model=script.model) as agent:
        async for event in agent.run_stream(KEY, "stop me"):
            if isinstance(event, TextDelta):
                break
        with anyio.fail_after(5):  # waits for the lock the abandoned turn held
            after = await collect(agent, "after")
    assert after[-1].result.success  # type: ignore[union-attr]
    assert user_texts(agent.history(KEY)) == ["after"]


@pytest.mark.anyio
async def test_cancelling_the_consumer_task_cancels_the_turn_and_keeps_chat_send_text(tmp_path: Path) -> None:
    def reply(messages, info, n):  # type: ignore[no-untyped-def]
        if n == 1:
            return tool_call("chat_send", {"text": "working on it"}, "c1")
        return answer(LONG)

    script = StreamScript(reply, chunk=2, delay=0.02)
    async with ShipAgent.from_project(make_project(tmp_path), model=script.model) as agent:
        seen: list[RunEvent] = []
        first_text = anyio.Event()

        async def consume() -> None:
            async with aclosing(agent.run_stream(KEY, "go")) as events:
                async for event in events:
                    seen.append(event)
                    if isinstance(event, TextDelta):
                        first_text.set()

        async with anyio.create_task_group() as group:
            group.start_soon(consume)
            await first_text.wait()
            group.cancel_scope.cancel()  # the consumer's task is cancelled mid-answer
        assert any(isinstance(e, TextDelta) for e in seen) and not any(isinstance(e, Done) for e in seen)
        assert agent.history(KEY) == []
        entries = read_jsonl(agent.transcript.path(KEY))
        assert [(e["role"], e["text"]) for e in entries] == [("user", "go"), ("assistant", "working on it")]
        script.delay = 0
        assert (await collect(agent, "again"))[-1].result.success  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_the_chat_key_is_checked_before_anything_runs(tmp_path: Path) -> None:
    agent = ShipAgent.from_project(make_project(tmp_path), model=StreamScript().model)
    with pytest.raises(ChatKeyError):
        agent.run_stream("", "hi")


def _shell_then_answer(messages, info, n):  # type: ignore[no-untyped-def]
    if has_tool_return(messages):
        return answer("ran it")
    return tool_call("exec_shell", {"command": "echo approved-output"}, "c1")


@pytest.mark.anyio
async def test_approval_is_asked_in_the_stream_and_answered_by_resolve_approval(tmp_path: Path) -> None:
    script = StreamScript(_shell_then_answer)
    async with ShipAgent.from_project(make_project(tmp_path), model=script.model) as agent:
        events: list[RunEvent] = []
        async with aclosing(agent.run_stream(KEY, "run it")) as stream:
            async for event in stream:
                events.append(event)
                if isinstance(event, ApprovalRequired):
                    assert (event.tool, event.command) == ("exec_shell", "echo approved-output")
                    assert agent.resolve_approval(event.approval_id, True)
                    assert not agent.resolve_approval(event.approval_id, True)  # answered once
    kinds = [e.type for e in events]
    assert kinds[:3] == ["tool_started", "approval_required", "tool_finished"]
    finished = events[2]
    assert isinstance(finished, ToolFinished) and finished.success
    assert "approved-output" in finished.summary and len(finished.summary) <= 500


@pytest.mark.anyio
async def test_an_unanswered_approval_times_out_as_refused(tmp_path: Path) -> None:
    script = StreamScript(_shell_then_answer)
    async with ShipAgent.from_project(make_project(tmp_path), model=script.model) as agent:
        events = await collect(agent, "run it", approval_timeout=0.1)
    finished = next(e for e in events if isinstance(e, ToolFinished))
    assert not finished.success and "no answer within 0.1 s" in finished.summary
    assert agent.approvals.chat_key_of(events[1].approval_id) is None  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_an_on_approval_callback_still_decides_in_a_streamed_turn(tmp_path: Path) -> None:
    asked: list[ApprovalRequest] = []

    def refuse(request: ApprovalRequest) -> bool:
        asked.append(request)
        return False

    script = StreamScript(_shell_then_answer)
    agent = ShipAgent.from_project(make_project(tmp_path), model=script.model, on_approval=refuse)
    async with agent:
        events = await collect(agent, "run it")
    assert [r.command for r in asked] == ["echo approved-output"]
    assert [e.type for e in events][:3] == ["tool_started", "approval_required", "tool_finished"]
    finished = events[2]
    assert isinstance(finished, ToolFinished) and not finished.success
    assert "refused" in finished.summary


@pytest.mark.anyio
async def test_compaction_is_an_event(tmp_path: Path) -> None:
    root = make_project(tmp_path, context_limits(inMemoryMaxMessages=4, compactKeepLastMessages=2))
    async with ShipAgent.from_project(root, model=StreamScript().model) as agent:
        await collect(agent, "one")
        await collect(agent, "two")
        events = await collect(agent, "three")
    compacted = [e for e in events if isinstance(e, Compacted)]
    assert compacted and compacted[0].removed > 0 and compacted[0].kept >= 2
    assert events[-1].type == "done" and events[-2] is compacted[-1]


@pytest.mark.anyio
async def test_a_model_without_a_stream_function_answers_whole(tmp_path: Path) -> None:
    from pydantic_ai.models.function import FunctionModel

    whole = FunctionModel(lambda messages, info: answer("all at once"))
    async with ShipAgent.from_project(make_project(tmp_path), model=whole) as agent:
        events = await collect(agent, "hi")
    assert [e.type for e in events] == ["text_delta", "done"]
    assert events[0] == TextDelta("all at once") and events[1].result.output == "all at once"  # type: ignore[union-attr]


def test_can_stream_looks_through_wrapper_models() -> None:
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.models.wrapper import WrapperModel

    from shipagent.agent._streaming import can_stream

    whole = FunctionModel(lambda messages, info: answer("x"))
    assert not can_stream(whole) and not can_stream(WrapperModel(whole))
    assert can_stream(WrapperModel(StreamScript().model))
