"""Turns over 100 chats at once, in one process: each chat's turns land in submission order.

1,000 turns (ten per chat) with ``-m slow``; the default run does 500 (five per chat), which proves
the same ordering in half the time. Every chat's turns are submitted as separate tasks
(all started together, turn ``n`` of every chat before turn ``n + 1``), so the
per-chat lock, not the submitter, decides the order: the test records the order in which each
chat's turns took its lock (the order the model saw them) and checks the transcript, the message
log and the agent-context log all hold exactly that order, with the history of each turn being
the turns before it.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent import ShipAgent
from shipagent.jsonl import read_all

pytestmark = pytest.mark.anyio
CHATS = 100


def prompts(messages: list[ModelMessage]) -> list[str]:
    return [
        str(p.content)
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart)
    ]


async def test_500_turns_over_100_concurrent_chats_keep_per_chat_order(tmp_path: Path) -> None:
    await check_order(tmp_path, turns=5)


@pytest.mark.slow
async def test_1000_turns_over_100_concurrent_chats_keep_per_chat_order(tmp_path: Path) -> None:
    await check_order(tmp_path, turns=10)


async def check_order(tmp_path: Path, *, turns: int) -> None:
    seen: dict[str, list[str]] = {}
    mismatches: list[str] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        said = prompts(messages)
        key, _, _ = said[-1].partition(" #")
        order = seen.setdefault(key, [])
        if said[:-1] != order:  # the model must see exactly this chat's earlier turns, in order
            mismatches.append(f"{key}: model saw {said[:-1]} after {order}")
        order.append(said[-1])
        return ModelResponse(parts=[TextPart(f"ok {said[-1]}")])

    (tmp_path / "ship.json").write_text(
        '{"context": {"chatHistory": {"inMemoryMaxMessages": 400, "compactKeepLastMessages": 200}}}',
        encoding="utf-8",
    )
    agent = ShipAgent.from_project(tmp_path, model=FunctionModel(reply))
    results: dict[str, bool] = {}

    async def turn(key: str, n: int) -> None:
        text = f"{key} #{n}"
        result = await agent.run(key, text)
        results[text] = result.success

    started = time.monotonic()
    async with agent, anyio.create_task_group() as tg:
        for n in range(turns):
            for c in range(CHATS):
                tg.start_soon(turn, f"load:chat:{c}", n)
                await anyio.lowlevel.checkpoint()  # submission order: turn n of every chat before turn n+1
    elapsed = time.monotonic() - started
    assert len(results) == CHATS * turns and all(results.values())
    assert mismatches == []

    for c in range(CHATS):
        key = f"load:chat:{c}"
        submitted = [f"{key} #{n}" for n in range(turns)]
        assert seen[key] == submitted, f"{key}: the model saw {seen[key]}"
        transcript = read_all(agent.transcript.path(key))
        assert [(e["role"], e["text"]) for e in transcript] == [
            (role, text) for s in submitted for role, text in (("user", s), ("assistant", f"ok {s}"))
        ]
        records = [r for r in read_all(agent.chats.log.path(key)) if r["t"] == "turn"]
        assert [r["requestId"] for r in records] == [e["requestId"] for e in transcript[::2]]
        context = read_all(agent.agent_context.path(key))
        assert [e["userPreview"] for e in context] == submitted
        assert prompts(agent.history(key)) == submitted
    print(f"\n{CHATS * turns} turns over {CHATS} chats in {elapsed:.1f}s")
