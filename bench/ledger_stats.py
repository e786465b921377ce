"""A 200-turn scripted chat, then ``shipagent inspect --stats`` on it.

Run: ``python bench/ledger_stats.py [--turns 200]``. The chat runs on a throwaway project with the
default ship.json bounds (60 messages in memory, compaction to 30, a 32k-token budget); every
fourth turn the model calls a tool, every tenth a tool that injects a system message. Turns are
spread over simulated hours with a movable clock, so a time in the instructions would show up
as prefix changes.

The scripted model reports usage like a provider with an automatic prefix cache: input tokens are
the request's o200k count, cached tokens the longest prefix (instructions, tool definitions, then
whole messages) it shares with the previous request. That makes the cached-token share a measure
of how stable the prefix really is; it is a simulation, not a provider's number.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import RequestUsage

from shipagent import ShipAgent, current_tool_context
from shipagent.window.sections import message_tokens
from shipagent.window.tokens import count_tokens

KEY = "bench:chat:ledger"


def lookup(topic: str) -> str:
    """Look a topic up in the team wiki."""
    return f"wiki page about {topic}: " + " ".join(f"{topic}-fact-{i}" for i in range(120))


def house_rules() -> str:
    """Load the house rules for this conversation."""
    current_tool_context().inject_system_message_once(
        "House rules: answer in English, cite the wiki page you used, never guess.", fingerprint="rules-v1"
    )
    return "rules loaded"


class PrefixCacheModel:
    """Scripted answers, and usage as a provider with a longest-prefix cache would report it."""

    def __init__(self) -> None:
        self.previous: list[str] = []

    def _usage(self, messages: list[ModelMessage], info: AgentInfo) -> RequestUsage:
        tools = json.dumps(
            [(t.name, t.description, t.parameters_json_schema) for t in info.function_tools], sort_keys=True
        )
        blocks = [info.instructions or "", tools, *(repr(m.parts) for m in messages)]
        costs = [count_tokens(blocks[0]), count_tokens(tools), *(message_tokens(m) for m in messages)]
        shared = 0
        for a, b in zip(blocks, self.previous, strict=False):
            if a != b:
                break
            shared += 1
        self.previous = blocks
        return RequestUsage(input_tokens=sum(costs), cache_read_tokens=sum(costs[:shared]))

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        usage = self._usage(messages, info)
        last = messages[-1]
        text = next(
            (
                str(p.content)
                for m in reversed(messages)
                if isinstance(m, ModelRequest)
                for p in m.parts
                if p.part_kind == "user-prompt"
            ),
            "",
        )
        if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
            return ModelResponse(parts=[TextPart("Done: " + " ".join(["noted"] * 40))], usage=usage)
        turn = int(text.split()[1].rstrip(":")) if text.startswith("turn ") else 0
        if turn % 10 == 9:
            return ModelResponse(
                parts=[ToolCallPart("house_rules", {}, tool_call_id=f"r{turn}")], usage=usage
            )
        if turn % 4 == 3:
            call = ToolCallPart("lookup", {"topic": f"topic{turn}"}, tool_call_id=f"l{turn}")
            return ModelResponse(parts=[call], usage=usage)
        return ModelResponse(parts=[TextPart(f"Answer {turn}: " + " ".join(["words"] * 60))], usage=usage)


async def chat(root: Path, turns: int) -> float:
    agent = ShipAgent.from_project(
        root, model=FunctionModel(PrefixCacheModel()), toolsets=[FunctionToolset([lookup, house_rules])]
    )
    start = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
    began = time.perf_counter()
    for n in range(turns):
        moment = start + timedelta(minutes=3 * n)  # 200 turns span ten hours, same day
        agent.clock = lambda moment=moment: moment  # type: ignore[misc]
        result = await agent.run(KEY, f"turn {n}: tell me more about the project " + "please " * 20)
        assert result.success, result.output
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "Agent.md").write_text("You are the project's helpful assistant.", encoding="utf-8")
        (root / "ship.json").write_text("{}\n", encoding="utf-8")  # the defaults
        seconds = asyncio.run(chat(root, args.turns))
        print(f"{args.turns} turns in {seconds:.1f} s\n")
        command = [
            sys.executable,
            "-c",
            "from shipagent.hosts.cli._app import main; main()",
            "inspect",
            KEY,
            "-C",
            str(root),
            "--stats",
        ]
        subprocess.run(command, check=True)
        stats: dict[str, Any] = json.loads(
            subprocess.run([*command, "--json"], check=True, capture_output=True, text=True).stdout
        )
        print("\nas JSON:", json.dumps(stats))


if __name__ == "__main__":
    main()
