"""agent_load_context through ShipAgent.run: summaries of earlier runs as a system block at the top."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai.messages import SystemPromptPart, UserPromptPart

from shipagent.chatkeys import ShipPaths
from shipagent.jsonl import append_lines
from tests.support.tools import Call, Script, make_agent, make_project, system_texts, tool_results

pytestmark = pytest.mark.anyio
KEY = "api:chat:alice"


def entry(i: int, *, failed: bool = False) -> dict[str, object]:
    return {
        "v": 1,
        "ts": f"2026-03-01T10:{i % 60:02d}:00Z",
        "chatKey": KEY,
        "requestId": f"req-{i}",
        "userPreview": f"question {i}",
        "outputPreview": f"answer {i}",
        "toolCalls": [{"tool": "exec_shell", "success": not failed, "error": "exit 2" if failed else None}],
    }


async def test_agent_context_is_injected_as_a_system_block_at_the_top(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    script = Script(["first answer", Call("agent_load_context", {"count": 5}), "ok"])
    agent = make_agent(root, script)
    await agent.run(KEY, "run the tests")  # a real earlier run writes the log
    append_lines(ShipPaths(root).agent_context(KEY), [entry(7, failed=True)])
    await agent.run(KEY, "what did you do before?")

    request = script.requests[-1]
    top = system_texts(request[0])
    assert len(top) == 1, "the injected block must open the request"
    block = top[0]
    assert block.startswith("[Agent context: summaries of earlier runs in chat api:chat:alice] entries: 2")
    assert "user: run the tests" in block and "output: first answer" in block
    assert "request req-7" in block and "tools: exec_shell FAILED (exit 2)" in block
    # oldest first: the real run comes before req-7
    assert block.index("run the tests") < block.index("req-7")
    # the earlier turn follows the block: it sits above the history (pydantic-ai merges adjacent
    # requests, so the block is the first part of the first message and the old user text comes after)
    first = request[0].parts
    assert isinstance(first[0], SystemPromptPart) and first[0].content == block
    assert [p.content for p in first[1:] if isinstance(p, UserPromptPart)] == ["run the tests"]
    ret = tool_results(request, "agent_load_context")[0]
    assert ret == {"success": True, "inserted": 1, "entries": 2}


async def test_window_count_and_offset(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    append_lines(ShipPaths(root).agent_context(KEY), [entry(i) for i in range(50)])
    script = Script([Call("agent_load_context", {"count": 3, "offset": 10}), "ok"])
    await make_agent(root, script).run(KEY, "history?")

    block = system_texts(script.requests[1][0])[0]
    assert [line.split()[-1] for line in block.splitlines() if " request " in line] == [
        "req-37",
        "req-38",
        "req-39",
    ]


async def test_summary_entries_are_rendered_as_summaries(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    summary = {
        "v": 1,
        "ts": "2026-01-01T00:00:00Z",
        "summary": True,
        "runs": 150,
        "userPreview": "Summary of 150 earlier runs",
        "outputPreview": "Tools used in those runs: exec_shell×9",
        "toolCalls": [],
    }
    append_lines(ShipPaths(root).agent_context(KEY), [summary, entry(1)])
    script = Script([Call("agent_load_context"), "ok"])
    await make_agent(root, script).run(KEY, "everything?")

    block = system_texts(script.requests[1][0])[0]
    assert "[summary of 150 earlier runs]" in block and "exec_shell×9" in block


async def test_empty_log_is_a_success_with_a_note(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    script = Script([Call("agent_load_context"), "ok"])
    result = await make_agent(root, script).run(KEY, "anything before?")

    assert not result.had_tool_failure
    assert tool_results(script.requests[1], "agent_load_context") == [
        {"success": True, "inserted": 0, "note": "No agent context available.", "entries": 0}
    ]
    assert not system_texts(script.requests[1][0])
