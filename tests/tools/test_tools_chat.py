"""chat_send and chat_load_history, driven through ShipAgent.run with a scripted model."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from shipagent.chatkeys import ShipPaths
from shipagent.jsonl import append_lines, read_all
from shipagent.tools._chat import read_transcript_window
from tests.support.tools import (
    Call,
    Script,
    index_of_user,
    make_agent,
    make_project,
    response_text,
    tool_results,
)

pytestmark = pytest.mark.anyio
KEY = "telegram:chat:42"


def write_transcript(root: Path, n: int, *, key: str = KEY) -> Path:
    """``n`` alternating user/assistant entries, text ``msg <i>``; every 100th mentions a deploy."""
    path = ShipPaths(root).transcript(key)
    lines: list[dict[str, Any]] = []
    for i in range(n):
        text = f"msg {i}" + (f" DEPLOY-{i} to prod" if i % 100 == 0 else "")
        role = "user" if i % 2 == 0 else "assistant"
        lines.append(
            {
                "v": 1,
                "ts": "2026-01-01T00:00:00Z",
                "chatKey": key,
                "requestId": f"r{i}",
                "role": role,
                "text": text,
            }
        )
    append_lines(path, lines)
    return path


def injected_history_block(script: Script, user_text: str) -> str:
    """The text of the assistant message the second request carries right before the user message."""
    request = script.requests[1]
    user_at = index_of_user(request, user_text)
    return response_text(request[user_at - 1])


async def test_chat_load_history_places_assistant_block_right_before_the_user_message(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    write_transcript(root, 50)
    script = Script([Call("chat_load_history", {"count": 3}), "ok"])
    result = await make_agent(root, script).run(KEY, "what did we say?")

    assert result.success
    block = injected_history_block(script, "what did we say?")
    assert block.splitlines()[0].startswith(
        "[Earlier conversation loaded from the transcript] chat: telegram:chat:42"
    )
    assert "mode: recent" in block
    assert block.splitlines()[1:] == ["assistant: msg 47", "user: msg 48", "assistant: msg 49"]
    ret = tool_results(script.requests[1], "chat_load_history")[0]
    assert ret == {"success": True, "inserted": 1, "mode": "recent", "picked": 3}
    # [injected block, the user's untouched message, the tool call, its result]
    assert index_of_user(script.requests[1], "what did we say?") == 1 and len(script.requests[1]) == 4


async def test_windowing_over_10000_entries(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    write_transcript(root, 10_000)
    script = Script([Call("chat_load_history", {"count": 5, "offset": 2000}), "ok"])
    await make_agent(root, script).run(KEY, "page back")

    lines = injected_history_block(script, "page back").splitlines()[1:]
    # window [len-offset-count, len-offset) = [7995, 8000)
    assert [line.split(": ", 1)[1] for line in lines] == [f"msg {i}" for i in range(7995, 8000)]


async def test_keyword_regex_search_is_case_insensitive_and_windowed(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    write_transcript(root, 10_000)
    script = Script(
        [Call("chat_load_history", {"count": 3, "offset": 1, "keyword": r"deploy-\d+00 TO"}), "ok"]
    )
    await make_agent(root, script).run(KEY, "when did we deploy?")

    block = injected_history_block(script, "when did we deploy?")
    assert "mode: search" in block and "keyword: deploy-\\d+00 TO (regex)" in block
    # matches are 0, 100, …, 9900; offset 1 skips 9900 -> 9600, 9700, 9800
    assert [line.split(" ")[3] for line in block.splitlines()[1:]] == [
        "DEPLOY-9600",
        "DEPLOY-9700",
        "DEPLOY-9800",
    ]
    ret = tool_results(script.requests[1], "chat_load_history")[0]
    assert ret["mode"] == "search" and ret["keyword"] == r"deploy-\d+00 TO" and ret["picked"] == 3


async def test_invalid_regex_falls_back_to_substring(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    path = write_transcript(root, 10)
    append_lines(
        path,
        [
            {
                "v": 1,
                "ts": "t",
                "chatKey": KEY,
                "requestId": "x",
                "role": "user",
                "text": "I love C++ (and Rust",
            }
        ],
    )
    script = Script([Call("chat_load_history", {"keyword": "c++ (and"}), "ok"])
    await make_agent(root, script).run(KEY, "which languages?")

    block = injected_history_block(script, "which languages?")
    assert "(substring (not a valid regex))" in block
    assert block.splitlines()[1:] == ["user: I love C++ (and Rust"]


async def test_nothing_found_is_a_success_with_a_note_and_no_injection(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    write_transcript(root, 20)
    script = Script([Call("chat_load_history", {"keyword": "kubernetes"}), "ok"])
    await make_agent(root, script).run(KEY, "k8s?")

    ret = tool_results(script.requests[1], "chat_load_history")[0]
    assert ret == {
        "success": True,
        "inserted": 0,
        "note": "No messages match 'kubernetes'.",
        "picked": 0,
        "mode": "search",
        "keyword": "kubernetes",
    }
    assert not any("Earlier conversation" in str(m) for m in script.requests[1])


async def test_same_window_twice_in_one_run_is_injected_once(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    write_transcript(root, 30)
    script = Script([Call("chat_load_history"), Call("chat_load_history"), "ok"])
    await make_agent(root, script).run(KEY, "again")

    second = tool_results(script.requests[2], "chat_load_history")[1]
    assert second["inserted"] == 0 and second["reason"] == "duplicate"
    blocks = [m for m in script.requests[2] if "Earlier conversation" in str(m)]
    assert len(blocks) == 1


async def test_out_of_range_count_is_rejected_for_the_model_to_fix(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    write_transcript(root, 5)
    script = Script([Call("chat_load_history", {"count": 500}), "ok"])
    result = await make_agent(root, script).run(KEY, "all of it")

    assert result.success  # a validation problem goes back to the model as a retry prompt
    assert "less than or equal to 200" in str(script.requests[1][-1])


async def test_block_is_capped_at_12000_chars_keeping_the_newest(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    path = ShipPaths(root).transcript(KEY)
    append_lines(
        path,
        [
            {
                "v": 1,
                "ts": "t",
                "chatKey": KEY,
                "requestId": "r",
                "role": "user",
                "text": f"{i}:" + "x" * 1000,
            }
            for i in range(40)
        ],
    )
    script = Script([Call("chat_load_history", {"count": 40}), "ok"])
    await make_agent(root, script).run(KEY, "long")

    block = injected_history_block(script, "long")
    assert len(block) <= 12000
    assert "earlier entries omitted" in block
    assert block.splitlines()[-1].startswith("user: 39:")


def test_a_1gb_transcript_is_read_backwards_not_whole(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    path = ShipPaths(root).transcript(KEY)
    path.parent.mkdir(parents=True)
    with open(path, "wb") as fh:  # sparse: 1 GB of NULs no forward reader could get through quickly
        fh.truncate(1 << 30)
        fh.seek(0, 2)
        fh.write(
            b"\n"
            + b"".join(json.dumps({"role": "user", "text": f"tail {i}"}).encode() + b"\n" for i in range(30))
        )
    started = time.monotonic()
    window = read_transcript_window(path, count=20, offset=5)
    assert time.monotonic() - started < 1.0
    assert [e["text"] for e in window.entries] == [f"tail {i}" for i in range(5, 25)]


async def test_finds_turns_whose_model_messages_were_compacted_away(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p", {"context": {"chatHistory": {"inMemoryMaxMessages": 4, "compactKeepLastMessages": 2}}}
    )
    script = Script(
        [
            "answer about the blue widget",
            "fine",
            "fine",
            "fine",
            Call("chat_load_history", {"keyword": "blue widget"}),
            "found it",
        ]
    )
    agent = make_agent(root, script)
    for text in ("tell me about the blue widget", "a", "b", "c"):
        await agent.run(KEY, text)
    assert "blue widget" not in json.dumps([str(m) for m in agent.history(KEY)][-2:])
    await agent.run(KEY, "what about that widget?")

    block = injected_history_block(Script([], requests=script.requests[-2:]), "what about that widget?")
    assert "user: tell me about the blue widget" in block
    assert "assistant: answer about the blue widget" in block


class RecordingChannel:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    async def send_text(self, chat_key: str, text: str) -> None:
        self.sent.append((chat_key, text))


async def test_chat_send_with_a_channel_delivers_and_records_in_the_transcript(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    channel = RecordingChannel()
    script = Script([Call("chat_send", {"text": "The build is green."}), ""])
    result = await make_agent(root, script).run(KEY, "status?", channel=channel)

    assert channel.sent == [(KEY, "The build is green.")]
    assert tool_results(script.requests[1], "chat_send") == [{"success": True, "delivered": "channel"}]
    assert "The build is green." not in result.output  # it went to the channel, not the output
    tool_lines = [e for e in read_all(ShipPaths(root).transcript(KEY)) if e.get("via") == "tool"]
    assert [(e["role"], e["text"], e["requestId"]) for e in tool_lines] == [
        ("assistant", "The build is green.", result.request_id)
    ]


async def test_chat_send_without_a_channel_becomes_part_of_the_output(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    script = Script([Call("chat_send", {"text": "Deployed v2."}), "All done."])
    result = await make_agent(root, script).run(KEY, "deploy")

    assert result.success and not result.had_tool_failure
    assert tool_results(script.requests[1], "chat_send") == [{"success": True, "delivered": "output"}]
    assert result.output.startswith("Deployed v2.")
    assert "All done." in result.output
    # The transcript says each text once: the chat_send line, then the model's own answer.
    entries = [(e["role"], e["text"], e.get("via")) for e in read_all(ShipPaths(root).transcript(KEY))]
    assert entries == [
        ("user", "deploy", None),
        ("assistant", "Deployed v2.", "tool"),
        ("assistant", "All done.", None),
    ]


async def test_chat_send_reports_a_broken_channel_as_data(tmp_path: Path) -> None:
    class Broken:
        async def send_text(self, chat_key: str, text: str) -> None:
            raise ConnectionError("telegram is down")

    root = make_project(tmp_path / "p")
    script = Script([Call("chat_send", {"text": "hi"}), "sorry"])
    result = await make_agent(root, script).run(KEY, "hello", channel=Broken())

    assert result.success and result.had_tool_failure
    ret = tool_results(script.requests[1], "chat_send")[0]
    assert ret["success"] is False and "telegram is down" in ret["error"]


async def test_fingerprints_follow_the_pinned_format(tmp_path: Path) -> None:
    """Fingerprints are how a run deduplicates; their format is pinned by the issue."""
    import hashlib

    from pydantic_ai import Agent

    from shipagent.config import parse_config
    from shipagent.tools import builtin_toolset
    from shipagent.tools.execution import ToolExecutionContext, fingerprint_of, use_tool_context

    root = make_project(tmp_path / "p")
    write_transcript(root, 10)
    skill = root / "skills" / "deploy" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: deploy\ndescription: Ship it.\n---\nSteps.\n", encoding="utf-8")
    ctx = ToolExecutionContext(
        chat_key=KEY, request_id="req-1", project_root=root, config=parse_config({}), paths=ShipPaths(root)
    )
    script = Script(
        [
            [
                Call("chat_load_history", {"count": 2, "keyword": "msg"}),
                Call("skills_load", {"name": "deploy"}),
            ],
            "ok",
        ]
    )
    with use_tool_context(ctx):
        await Agent(script.model(), toolsets=[builtin_toolset()]).run("go")

    # the two calls run concurrently, so their injections may land in either order
    by_role = {m.role: m for m in ctx.injected}
    assert sorted(by_role) == ["assistant", "system"]
    history, loaded = by_role["assistant"], by_role["system"]
    assert history.fingerprint == f"chat_history:{KEY}:msg:2:0:{fingerprint_of(history.content)}"
    sha1 = hashlib.sha1(skill.read_text(encoding="utf-8").encode()).hexdigest()
    assert loaded.fingerprint == f"skill:deploy:{sha1}"


async def test_text_delivered_before_a_model_failure_stays_in_the_transcript(tmp_path: Path) -> None:
    """The run fails after chat_send delivered: history is unchanged, the transcript keeps what was said."""
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from shipagent import ShipAgent

    root = make_project(tmp_path / "p")
    calls = 0

    def flaky(messages: Any, info: Any) -> ModelResponse:
        nonlocal calls
        calls += 1
        if calls == 1:
            return ModelResponse(parts=[ToolCallPart("chat_send", {"text": "Working on it."})])
        raise RuntimeError("provider went away")

    channel = RecordingChannel()
    agent = ShipAgent.from_project(root, model=FunctionModel(flaky))
    result = await agent.run(KEY, "deploy", channel=channel)

    assert not result.success and "provider went away" in result.output
    assert channel.sent == [(KEY, "Working on it.")]
    assert agent.history(KEY) == []
    entries = [(e["role"], e["text"], e.get("via")) for e in read_all(ShipPaths(root).transcript(KEY))]
    assert entries == [("user", "deploy", None), ("assistant", "Working on it.", "tool")]
