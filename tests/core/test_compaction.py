"""Bounded in-memory history: compaction at 60/30, tool pairs kept, persisted summaries, restart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from shipagent import ShipAgent, StepEvent
from shipagent.window.compaction import compact, is_summary, safe_cut_index
from tests.support.core import (
    ScriptedModel,
    answer,
    dump,
    has_tool_return,
    make_agent,
    make_project,
    read_jsonl,
    render,
    tool_call,
    user_texts,
)

MARKS = {"context": {"chatHistory": {"inMemoryMaxMessages": 60, "compactKeepLastMessages": 30}}}
"""The marks these scenarios count with (a 60-message chat compacting to 30)."""


def lookup(topic: str) -> str:
    return f"facts about {topic}"


def _tool_turn_model() -> ScriptedModel:
    """Every turn: call ``lookup`` once, then answer — 4 messages per turn."""

    def reply(messages, info, n):  # type: ignore[no-untyped-def]
        if has_tool_return(messages):
            return answer(f"answer {n}")
        return tool_call("lookup", {"topic": user_texts(messages)[-1]}, call_id=f"call-{n}")

    return ScriptedModel(reply)


def _orphans(history: list[ModelMessage]) -> set[str]:
    """Tool-call ids answered in ``history`` whose call is not in it (and calls never answered)."""
    calls = {p.tool_call_id for m in history for p in m.parts if isinstance(p, ToolCallPart)}
    returns = {p.tool_call_id for m in history for p in m.parts if isinstance(p, ToolReturnPart)}
    return calls ^ returns


# -- the pure function ---------------------------------------------------------------------------


def _turn(i: int, *, tool: bool) -> list[ModelMessage]:
    user = ModelRequest(parts=[UserPromptPart(f"user {i}")])
    if not tool:
        return [user, ModelResponse(parts=[TextPart(f"reply {i}")])]
    return [
        user,
        ModelResponse(parts=[ToolCallPart("lookup", {"topic": str(i)}, tool_call_id=f"c{i}")]),
        ModelRequest(parts=[ToolReturnPart("lookup", f"result {i}", tool_call_id=f"c{i}")]),
        ModelResponse(parts=[TextPart(f"reply {i}")]),
    ]


def test_cut_that_would_orphan_a_tool_return_moves_earlier() -> None:
    # 10 plain messages, then a tool turn: naive cut for keep=3 lands on the tool return (index 12).
    messages = [m for i in range(5) for m in _turn(i, tool=False)] + _turn(5, tool=True)
    assert len(messages) == 14 and isinstance(messages[12].parts[0], ToolReturnPart)
    assert safe_cut_index(messages, 2) == 11  # tail would start at the return: moved onto the call
    assert safe_cut_index(messages, 3) == 11
    assert safe_cut_index(messages, 4) == 10  # already a clean cut: unchanged

    done = compact(messages, 2)
    assert done is not None
    assert is_summary(done.history[0])
    assert done.history[1:] == messages[11:]
    assert done.removed == messages[:11]
    assert _orphans(done.history) == set()


def test_parallel_tool_calls_are_kept_with_all_their_returns() -> None:
    call = ModelResponse(
        parts=[
            ToolCallPart("lookup", {"topic": "a"}, tool_call_id="pa"),
            ToolCallPart("lookup", {"topic": "b"}, tool_call_id="pb"),
        ]
    )
    returns = ModelRequest(
        parts=[
            ToolReturnPart("lookup", "ra", tool_call_id="pa"),
            ToolReturnPart("lookup", "rb", tool_call_id="pb"),
        ]
    )
    messages = [*_turn(0, tool=False), ModelRequest(parts=[UserPromptPart("both")]), call, returns]
    messages.append(ModelResponse(parts=[TextPart("done")]))
    done = compact(messages, 2)
    assert done is not None
    assert done.history[1:] == [call, returns, messages[-1]]


def test_compaction_summary_folds_the_previous_summary_and_counts() -> None:
    messages = [m for i in range(10) for m in _turn(i, tool=False)]
    first = compact(messages, 4)
    assert first is not None and len(first.history) == 5
    again = compact([*first.history, *_turn(10, tool=False), *_turn(11, tool=False)], 4)
    assert again is not None
    summary = again.history[0]
    assert is_summary(summary) and isinstance(summary.parts[0], SystemPromptPart)
    text = summary.parts[0].content
    assert text.startswith("[Summary of the earlier conversation: 20 older messages were compacted.")
    # The oldest facts survive a second compaction, through the previous summary's body.
    assert "user: user 0" in text and "user: user 9" in text
    assert compact(again.history[:3], 4) is None  # nothing to fold


# -- through ShipAgent ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_compaction_at_the_60_30_boundary_keeps_tool_pairs_and_persists(tmp_path: Path) -> None:
    root = make_project(tmp_path, MARKS)
    scripted = _tool_turn_model()
    agent = make_agent(root, scripted.model, [lookup])
    events: list[StepEvent] = []

    for i in range(15):  # 15 tool turns x 4 messages = 60: at the bound, not over it
        assert (await agent.run("chat", f"q{i}", on_step=events.append)).success
    assert len(agent.history("chat")) == 60
    assert not any(is_summary(m) for m in agent.history("chat"))
    assert [e for e in events if e.type == "compaction"] == []

    # Turn 16 makes 64 > 60. Keeping the last 30 would start the tail at index 34, the tool return
    # of turn 8 (32 user, 33 call, 34 return, 35 answer): the cut moves to 33, keeping 31 messages.
    assert (await agent.run("chat", "q15", on_step=events.append)).success
    history = agent.history("chat")
    assert len(history) == 32
    assert is_summary(history[0])
    assert (
        history[0]
        .parts[0]
        .content.startswith("[Summary of the earlier conversation: 33 older messages were compacted.")
    )
    first_kept = history[1]
    assert isinstance(first_kept, ModelResponse) and isinstance(first_kept.parts[0], ToolCallPart)
    assert first_kept.parts[0].args_as_dict() == {"topic": "q8"}
    assert _orphans(history) == set()
    assert user_texts(history)[-1] == "q15"

    compactions = [e for e in events if e.type == "compaction"]
    assert compactions == [
        StepEvent(
            "compaction",
            "compacted 33 older messages into a summary",
            {"removed": 33, "kept": 31, "summarizer": "extract", "summaryId": "S0-32"},
        )
    ]
    # The compaction is reported before the run's "done".
    assert [e.type for e in events[-2:]] == ["compaction", "done"]

    # Restart: a new agent on the same directory rebuilds exactly the same history.
    restarted = ShipAgent.from_project(root, model=scripted.model)
    assert dump(restarted.history("chat")) == dump(history)

    # What was compacted away is still on disk: every turn in messages.jsonl, every line in the
    # transcript.
    chat_dir = root / ".ship" / "chats" / "chat"
    records = read_jsonl(chat_dir / "messages.jsonl")
    logged_users = [
        part["content"]
        for r in records
        if r["t"] == "turn"
        for m in r["messages"]
        for part in m["parts"]
        if part["part_kind"] == "user-prompt"
    ]
    assert logged_users == [f"q{i}" for i in range(16)]
    assert [r["t"] for r in records].count("compaction") == 1
    transcript = read_jsonl(chat_dir / "history.jsonl")
    assert [(e["role"], e["text"]) for e in transcript if e["role"] == "user"] == [
        ("user", f"q{i}") for i in range(16)
    ]

    # The restarted agent keeps going from [summary, …recent] (q8's tool call but not its user
    # message survived the cut): its first request starts with the summary.
    assert (await restarted.run("chat", "after restart")).success
    sent = render(scripted.requests[-2])
    # (sent as user text after the instructions: a compaction changes nothing before it)
    assert sent[0][1] == "user-prompt" and sent[0][2].startswith("[Summary of the earlier conversation")
    assert [t for _, kind, t in sent[1:] if kind == "user-prompt"] == [f"q{i}" for i in range(9, 16)] + [
        "after restart"
    ]


@pytest.mark.anyio
async def test_plain_turns_compact_to_summary_plus_30(tmp_path: Path) -> None:
    root = make_project(tmp_path, MARKS)
    scripted = ScriptedModel()
    agent = make_agent(root, scripted.model)
    for i in range(30):
        await agent.run("k", f"m{i}")
    assert len(agent.history("k")) == 60
    await agent.run("k", "m30")
    history = agent.history("k")
    assert len(history) == 31 and is_summary(history[0])
    assert user_texts(history) == [f"m{i}" for i in range(16, 31)]
    # The next turn sends [summary, …kept, new user message].
    await agent.run("k", "m31")
    assert render(scripted.requests[-1])[0][2].startswith("[Summary of the earlier conversation: 32 older")
    assert user_texts(scripted.requests[-1]) == [f"m{i}" for i in range(16, 32)]
    restarted = ShipAgent.from_project(root, model=scripted.model)
    assert dump(restarted.history("k")) == dump(agent.history("k"))


@pytest.mark.anyio
async def test_compaction_with_custom_bounds_from_ship_json(tmp_path: Path) -> None:
    root = make_project(
        tmp_path, {"context": {"chatHistory": {"inMemoryMaxMessages": 6, "compactKeepLastMessages": 2}}}
    )
    agent = make_agent(root, ScriptedModel().model)
    for i in range(4):
        await agent.run("k", f"m{i}")
    history = agent.history("k")
    assert [is_summary(m) for m in history] == [True, False, False]
    assert user_texts(history) == ["m3"]
    lines = (root / ".ship" / "chats" / "k" / "messages.jsonl").read_text(encoding="utf-8").splitlines()
    kinds = [json.loads(line)["t"] for line in lines]
    assert kinds == ["turn", "turn", "turn", "turn", "compaction"]
