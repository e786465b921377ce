"""Exact expansion of compaction summaries: seqs, summary ids, context_expand."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent import ShipAgent
from shipagent.store.files._render import render_messages
from shipagent.window.compaction import is_summary, summary_id
from tests.support.core import ScriptedModel, make_agent, make_project, read_jsonl

pytestmark = pytest.mark.anyio
KEY = "slack:team:chan"
LIMITS = {"context": {"chatHistory": {"inMemoryMaxMessages": 6, "compactKeepLastMessages": 2}}}


def _summaries(root: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    path = root / ".ship" / "chats" / "slack%3Ateam%3Achan" / "messages.jsonl"
    for record in read_jsonl(path):
        if record["t"] == "compaction" and record["history"]:
            info = record["history"][0]["metadata"]["shipagent"]
            out.setdefault(info["id"], info)
    return out


async def test_three_nested_compactions_expand_exactly_after_a_restart(tmp_path: Path) -> None:
    root = make_project(tmp_path, LIMITS)
    scripted = ScriptedModel()
    agent = make_agent(root, scripted.model)
    committed: list[ModelMessage] = []
    for i in range(9):
        assert (await agent.run(KEY, f"turn {i} — ünïcode ✓")).success
        committed.extend(agent.history(KEY)[-2:])  # each plain turn commits request + answer
    summaries = _summaries(root)
    assert len(summaries) >= 3
    ids = list(summaries)
    # nested: each summary after the first folded the one before it in
    assert summaries[ids[0]]["parent"] is None
    for before, after in itertools.pairwise(ids):
        assert summaries[after]["parent"] == before
        assert summaries[after]["fromSeq"] == summaries[before]["toSeq"] + 1

    restarted = ShipAgent.from_project(root, model=scripted.model)
    for sid, info in summaries.items():
        expanded = restarted.expand(KEY, sid)
        assert expanded == committed[info["fromSeq"] : info["toSeq"] + 1], sid
        assert expanded  # never an empty range
    head = restarted.history(KEY)[0]
    assert is_summary(head) and summary_id(head) == ids[-1]
    assert f"context_expand(summary_id='{ids[-1]}')" in head.parts[0].content  # type: ignore[union-attr]
    with pytest.raises(KeyError):
        restarted.expand(KEY, "S999-1000")

    # sources line up with the rebuilt history and the seq counter continues after the restart
    sources = restarted.chats.sources(KEY)
    assert sources[0] == f"summary:{ids[-1]}"
    assert sources[1:] == [f"history:{n}" for n in range(len(committed) - len(sources) + 1, len(committed))]
    assert (await restarted.run(KEY, "after restart")).success
    assert restarted.chats.sources(KEY)[-2:] == [f"history:{len(committed)}", f"history:{len(committed) + 1}"]


async def test_context_expand_pages_the_original_messages_verbatim(tmp_path: Path) -> None:
    root = make_project(tmp_path, LIMITS)
    plain = make_agent(root, ScriptedModel().model)
    for i in range(4):
        assert (await plain.run(KEY, f"fact {i}: " + "the sky is blue " * 40)).success
    [sid] = list(_summaries(root))
    original = render_messages(plain.expand(KEY, sid))[0]

    pages: list[dict[str, Any]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if returns:
            page = json.loads(returns[0].model_response_str())
            pages.append(page)
            if page["done"]:
                return ModelResponse(parts=[TextPart("got it")])
            offset = page["nextOffset"]
        else:
            offset = 0
        args = {"summary_id": sid, "offset": offset, "limit": 700}
        return ModelResponse(parts=[ToolCallPart("context_expand", args, tool_call_id=f"e{len(pages)}")])

    agent = ShipAgent.from_project(root, model=FunctionModel(model))
    assert (await agent.run(KEY, "what did I say before?")).success
    assert len(pages) > 2 and all(p["success"] and p["summaryId"] == sid for p in pages)
    assert "".join(p["content"] for p in pages) == original
    assert "fact 0: the sky is blue" in original and "## user ·" in original
    missing = await _expand_missing(agent)
    assert missing == {"success": False, "error": "no summary with id 'S404-405' in this chat"}


async def _expand_missing(agent: ShipAgent) -> dict[str, Any]:
    from shipagent.tools._deps import TurnDeps
    from shipagent.tools.files._tools import expand_page

    return await expand_page(TurnDeps(agent._wiring.tool_context(KEY, "r", None)), "S404-405")


def test_a_log_written_before_seqs_gets_implicit_ones(tmp_path: Path) -> None:
    from shipagent.chatkeys import ShipPaths
    from shipagent.store.logs import MessageLog, dump_messages

    log = MessageLog(ShipPaths(tmp_path))
    path = log.path(KEY)
    path.parent.mkdir(parents=True)

    def msgs(*texts: str) -> list[Any]:
        return dump_messages([ModelResponse(parts=[TextPart(t)]) for t in texts])

    old = [
        {"t": "turn", "requestId": "a", "messages": msgs("m0", "m1")},
        {"t": "turn", "requestId": "b", "messages": msgs("m2", "m3")},
        {"t": "compaction", "requestId": "b", "history": msgs("summary", "m3")},
        {"t": "turn", "requestId": "c", "messages": msgs("m4", "m5")},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in old), encoding="utf-8")
    sources, next_seq = log.sources(KEY)
    assert sources == ["summary:legacy", "history:3", "history:4", "history:5"]
    assert next_seq == 6
    assert len(log.rebuild(KEY)) == len(sources)
