"""Tool execution context and message injection."""

from __future__ import annotations

from pathlib import Path

import pytest
from inline_snapshot import snapshot

from shipagent import (
    InjectionResult,
    ShipAgent,
    ShipAgentError,
    ToolContextError,
    current_tool_context,
)
from tests.support.core import (
    ScriptedModel,
    answer,
    has_tool_return,
    make_agent,
    make_project,
    render,
    texts,
    tool_call,
)

SYSTEM_A = "INJECTED-SYSTEM-A: always answer in French"
SYSTEM_B = "INJECTED-SYSTEM-B: the repo uses uv"
ASSISTANT_A = "INJECTED-ASSISTANT-A: earlier you asked about pizza"
ASSISTANT_B = "INJECTED-ASSISTANT-B: and I said margherita"


def load_context() -> str:
    """Injects two system and two assistant messages, interleaved, plus one duplicate."""
    ctx = current_tool_context()
    results = [
        ctx.inject_system_message_once(SYSTEM_A, fingerprint="sys-a"),
        ctx.inject_assistant_message_once(ASSISTANT_A, fingerprint="asst-a"),
        ctx.inject_system_message_once(SYSTEM_B, fingerprint="sys-b"),
        ctx.inject_assistant_message_once(ASSISTANT_B, fingerprint="asst-b"),
        ctx.inject_system_message_once(SYSTEM_A, fingerprint="sys-a"),
    ]
    assert results[:4] == [InjectionResult(True, None)] * 4
    assert results[4] == InjectionResult(False, "duplicate")
    return "context loaded"


def _call_load_context_once(messages, info, n):  # type: ignore[no-untyped-def]
    return answer("final answer") if has_tool_return(messages) else tool_call("load_context")


def _three_plain_turns_then_tool(messages, info, n):  # type: ignore[no-untyped-def]
    if "inject please" not in texts(messages):
        return answer(f"reply {n}")
    return _call_load_context_once(messages, info, n)


@pytest.mark.anyio
async def test_second_request_places_injections_around_history_and_user_text(tmp_path: Path) -> None:
    # Small bounds so that the chat already starts with a compaction summary (a leading system
    # message) when the injecting turn runs: 3 turns = 6 messages > 4 -> [summary, t3 req, t3 resp].
    root = make_project(
        tmp_path,
        {"context": {"chatHistory": {"inMemoryMaxMessages": 4, "compactKeepLastMessages": 2}}},
    )
    scripted = ScriptedModel(_three_plain_turns_then_tool)
    agent = make_agent(root, scripted.model, [load_context])
    for i in range(1, 4):
        assert (await agent.run("chat:1", f"turn {i}")).success

    result = await agent.run("chat:1", "inject please")
    assert result.success, result.output
    first, second = scripted.requests[-2:]

    # The first request of the run comes before the tool ran: nothing injected yet.
    assert not any("INJECTED" in t for t in texts(first))
    # The second: system injections lead, in injection order; the summary follows as user text
    # (after the instructions, where a compaction changes nothing before it); assistant
    # injections immediately before the current user message, in order; user text as typed.
    rendered = render(second)
    assert rendered[2][1] == "user-prompt" and rendered[2][2].startswith("[Summary of the earlier")
    assert rendered[:2] + rendered[3:] == snapshot(
        [
            ("request", "system-prompt", "INJECTED-SYSTEM-A: always answer in French"),
            ("request", "system-prompt", "INJECTED-SYSTEM-B: the repo uses uv"),
            ("request", "user-prompt", "turn 3"),
            ("response", "text", "reply 3"),
            ("response", "text", "INJECTED-ASSISTANT-A: earlier you asked about pizza"),
            ("response", "text", "INJECTED-ASSISTANT-B: and I said margherita"),
            ("request", "user-prompt", "inject please"),
            ("response", "tool-call", "load_context({})"),
            ("request", "tool-return", "load_context -> context loaded"),
        ]
    )


def inject_numbered(n: int) -> str:
    ctx = current_tool_context()
    s = ctx.inject_system_message_once(f"SYS-{n}", fingerprint=f"s{n}")
    a = ctx.inject_assistant_message_once(f"ASST-{n}", fingerprint=f"a{n}")
    return f"{s.inserted} {a.inserted}"


@pytest.mark.anyio
async def test_injections_of_later_tool_calls_follow_earlier_ones_on_every_request(tmp_path: Path) -> None:
    def reply(messages, info, n):  # type: ignore[no-untyped-def]
        calls = sum(1 for _, kind, _ in render(messages) if kind == "tool-return")
        if calls < 2:
            return tool_call("inject_numbered", {"n": calls + 1}, call_id=f"c{calls + 1}")
        return answer("done")

    scripted = ScriptedModel(reply)
    agent = make_agent(make_project(tmp_path), scripted.model, [inject_numbered])
    result = await agent.run("k", "go")
    assert result.success and [r.output for r in result.tool_calls] == ["True True", "True True"]

    first, second, third = scripted.requests
    assert render(first) == [("request", "user-prompt", "go")]
    assert render(second) == snapshot(
        [
            ("request", "system-prompt", "SYS-1"),
            ("response", "text", "ASST-1"),
            ("request", "user-prompt", "go"),
            ("response", "tool-call", 'inject_numbered({"n":1})'),
            ("request", "tool-return", "inject_numbered -> True True"),
        ]
    )
    assert render(third) == snapshot(
        [
            ("request", "system-prompt", "SYS-1"),
            ("request", "system-prompt", "SYS-2"),
            ("response", "text", "ASST-1"),
            ("response", "text", "ASST-2"),
            ("request", "user-prompt", "go"),
            ("response", "tool-call", 'inject_numbered({"n":1})'),
            ("request", "tool-return", "inject_numbered -> True True"),
            ("response", "tool-call", 'inject_numbered({"n":2})'),
            ("request", "tool-return", "inject_numbered -> True True"),
        ]
    )


def try_reasons() -> str:
    ctx = current_tool_context()
    outcomes = [
        ctx.inject_system_message_once("content", fingerprint=""),
        ctx.inject_assistant_message_once("content", fingerprint="   "),
        ctx.inject_system_message_once("", fingerprint="fp-empty"),
        ctx.inject_assistant_message_once(" \n\t", fingerprint="fp-blank"),
        ctx.inject_system_message_once("first", fingerprint="fp-1"),
        ctx.inject_system_message_once("first again", fingerprint="fp-1"),
        # dedupe is by fingerprint, whatever the role
        ctx.inject_assistant_message_once("same fingerprint, other role", fingerprint="fp-1"),
    ]
    return ",".join(str(o.reason) for o in outcomes)


@pytest.mark.anyio
async def test_injection_reasons_missing_fingerprint_empty_content_duplicate(tmp_path: Path) -> None:
    def reply(messages, info, n):  # type: ignore[no-untyped-def]
        return answer("ok") if has_tool_return(messages) else tool_call("try_reasons")

    scripted = ScriptedModel(reply)
    agent = make_agent(make_project(tmp_path), scripted.model, [try_reasons])
    result = await agent.run("k", "go")
    assert result.tool_calls[0].output == (
        "missing_fingerprint,missing_fingerprint,empty_content,empty_content,None,duplicate,duplicate"
    )
    # Only the one accepted injection reached the model; rejected ones left no trace.
    injected = [t for kind, part, t in render(scripted.requests[1]) if part == "system-prompt"]
    assert injected == ["first"]
    assert not any("again" in t or "other role" in t for t in texts(scripted.requests[1]))


def dedupe_probe() -> str:
    return str(current_tool_context().inject_system_message_once("rules", fingerprint="rules-v1").reason)


@pytest.mark.anyio
async def test_dedupe_is_per_run_a_new_run_may_inject_the_same_fingerprint(tmp_path: Path) -> None:
    def reply(messages, info, n):  # type: ignore[no-untyped-def]
        return answer("ok") if has_tool_return(messages) else tool_call("dedupe_probe", call_id=f"c{n}")

    agent = make_agent(make_project(tmp_path), ScriptedModel(reply).model, [dedupe_probe])
    first = await agent.run("k", "one")
    second = await agent.run("k", "two")
    assert [first.tool_calls[0].output, second.tool_calls[0].output] == ["None", "None"]


def flood() -> str:
    ctx = current_tool_context()
    reasons = [
        ctx.inject_system_message_once(f"flood {i}", fingerprint=f"flood-{i}").reason for i in range(4)
    ]
    # A duplicate is still reported as such once the limit is hit (dedupe is checked first).
    reasons.append(ctx.inject_assistant_message_once("flood 0", fingerprint="flood-0").reason)
    return ",".join(str(r) for r in reasons)


@pytest.mark.anyio
async def test_limit_reached_after_max_injected_messages(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"context": {"injection": {"maxInjectedMessages": 2}}})

    def reply(messages, info, n):  # type: ignore[no-untyped-def]
        return answer("ok") if has_tool_return(messages) else tool_call("flood")

    scripted = ScriptedModel(reply)
    agent = make_agent(root, scripted.model, [flood])
    result = await agent.run("k", "go")
    assert result.tool_calls[0].output == "None,None,limit_reached,limit_reached,duplicate"
    sent = [t for _, part, t in render(scripted.requests[1]) if part == "system-prompt"]
    assert sent == ["flood 0", "flood 1"]


def context_fields() -> dict[str, object]:
    ctx = current_tool_context()
    return {
        "chat_key": ctx.chat_key,
        "request_id": ctx.request_id,
        "project_root": str(ctx.project_root),
        "max_injected_messages": ctx.max_injected_messages,
        "config_name": ctx.config.name,
    }


@pytest.mark.anyio
async def test_tool_sees_its_runs_context(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"name": "ctx-agent", "context": {"injection": {"maxInjectedMessages": 7}}})

    def reply(messages, info, n):  # type: ignore[no-untyped-def]
        return answer("ok") if has_tool_return(messages) else tool_call("context_fields")

    agent = make_agent(root, ScriptedModel(reply).model, [context_fields])
    result = await agent.run("telegram:chat:42", "hi")
    import json

    assert json.loads(result.tool_calls[0].output) == {
        "chat_key": "telegram:chat:42",
        "request_id": result.request_id,
        "project_root": str(root.resolve()),
        "max_injected_messages": 7,
        "config_name": "ctx-agent",
    }


@pytest.mark.anyio
async def test_injected_messages_are_not_persisted_and_a_later_run_does_not_see_them(tmp_path: Path) -> None:
    root = make_project(tmp_path)

    def reply(messages, info, n):  # type: ignore[no-untyped-def]
        if "plain turn" in texts(messages):
            return answer("plain reply")
        return _call_load_context_once(messages, info, n)

    scripted = ScriptedModel(reply)
    agent = make_agent(root, scripted.model, [load_context])
    assert (await agent.run("k", "inject please")).success

    # The tool call and its result are history; the injected messages are not.
    history = agent.history("k")
    assert render(history) == snapshot(
        [
            ("request", "user-prompt", "inject please"),
            ("response", "tool-call", "load_context({})"),
            ("request", "tool-return", "load_context -> context loaded"),
            ("response", "text", "final answer"),
        ]
    )
    ship = root / ".ship"
    for path in ship.rglob("*.jsonl"):
        assert "INJECTED" not in path.read_text(encoding="utf-8"), path

    # A new process rebuilds the same history, still without them.
    restarted = ShipAgent.from_project(root, model=scripted.model)
    assert render(restarted.history("k")) == render(history)

    # The next run's requests do not carry them either.
    assert (await agent.run("k", "plain turn")).success
    assert not any("INJECTED" in t for t in texts(scripted.requests[-1]))
    assert "load_context -> context loaded" in texts(scripted.requests[-1])


def test_current_tool_context_outside_a_run_raises() -> None:
    with pytest.raises(ToolContextError, match="outside a shipagent run"):
        current_tool_context()
    assert issubclass(ToolContextError, ShipAgentError)


@pytest.mark.anyio
async def test_current_tool_context_is_gone_after_the_run(tmp_path: Path) -> None:
    agent = make_agent(make_project(tmp_path), ScriptedModel().model)
    assert (await agent.run("k", "hello")).success
    with pytest.raises(ToolContextError):
        current_tool_context()
