"""Per-turn overhead of ``ShipAgent.run`` against bare ``pydantic_ai.Agent.run``.

Both use the same instant ``FunctionModel``; shipagent runs with persistence on (transcript,
message log, agent-context log on disk). Three rows per history size:

* ``bare``: ``Agent.run(text, message_history=<N messages>)``, keeping the conversation going
  (each turn's messages join the history, exactly as they do in shipagent);
* ``bare + ship's toolsets``: the same, offering the model the ~14 builtin and context tools a
  shipagent run offers (a tool costs pydantic-ai time per request even when it is not called);
* ``ship (N in memory)``: ship.json bounds raised so shipagent sends the same N messages;
* ``ship (default bounds)``: the default 60/30 compaction and 32k token budget, with N messages on
  disk — what a real long chat costs.

Run: ``python bench/turn_overhead.py`` (prints a markdown table).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import anyio
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent import ShipAgent
from shipagent.history.stores import MessageLog, Transcript

TURNS = 60
SIZES = (10, 100, 1000)


def instant(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("ok")])


def make_history(n: int) -> list[ModelMessage]:
    out: list[ModelMessage] = []
    for i in range(n // 2):
        out.append(ModelRequest(parts=[UserPromptPart(f"question {i}: " + "lorem ipsum " * 20)]))
        out.append(ModelResponse(parts=[TextPart(f"answer {i}: " + "dolor sit amet " * 20)]))
    return out


def project(n: int, *, bounded: bool) -> Path:
    root = Path(tempfile.mkdtemp(prefix="ship-bench-"))
    config: dict[str, object] = {"name": "bench"}
    if not bounded:
        config["context"] = {
            "chatHistory": {
                "inMemoryMaxMessages": 100_000,
                "compactKeepLastMessages": 50_000,
                "maxHistoryTokens": 10_000_000,
            }
        }
    (root / "ship.json").write_text(json.dumps(config))
    agent = ShipAgent.from_project(root, model=FunctionModel(instant))
    history = make_history(n)
    log, transcript = MessageLog(agent.paths), Transcript(agent.paths)
    for i in range(0, len(history), 2):
        log.append_turn("bench:chat", f"seed{i}", history[i : i + 2])
        transcript.append_turn("bench:chat", f"seed{i}", f"question {i}", f"answer {i}")
    return root


async def time_bare(n: int, *, tools: bool = False) -> float:
    """The same conversation through bare pydantic-ai: its history grows by each turn, as ship's does."""
    agent = Agent(FunctionModel(instant))
    toolsets = ShipAgent.from_project(project(0, bounded=False))._toolsets() if tools else None
    history = make_history(n)
    history = (await agent.run("warm up", message_history=history, toolsets=toolsets)).all_messages()
    samples = []
    for i in range(TURNS):
        start = time.perf_counter()
        result = await agent.run(f"turn {i}", message_history=history, toolsets=toolsets)
        samples.append(time.perf_counter() - start)
        history = result.all_messages()
    return statistics.median(samples)


async def time_ship(n: int, *, bounded: bool) -> tuple[float, int]:
    root = project(n, bounded=bounded)
    agent = ShipAgent.from_project(root, model=FunctionModel(instant))
    await agent.run("bench:chat", "warm up")  # hydrates the chat from disk once
    samples = []
    for i in range(TURNS):
        start = time.perf_counter()
        await agent.run("bench:chat", f"turn {i}")
        samples.append(time.perf_counter() - start)
    disk = sum(p.stat().st_size for p in (root / ".ship").rglob("*") if p.is_file())
    return statistics.median(samples), disk


async def main() -> None:
    print(f"median per-turn time over {TURNS} turns, instant FunctionModel\n")
    print(
        "| history | bare pydantic-ai | bare + ship's toolsets | ship (same N in memory) | ratio to bare "
        "| ratio to bare + tools | ship (default bounds) | .ship on disk |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in SIZES:
        bare = await time_bare(n)
        bare_tools = await time_bare(n, tools=True)
        same, _ = await time_ship(n, bounded=False)
        default, disk = await time_ship(n, bounded=True)
        print(
            f"| {n} | {bare * 1000:.2f} ms | {bare_tools * 1000:.2f} ms | {same * 1000:.2f} ms "
            f"| {same / bare:.2f}x | {same / bare_tools:.2f}x | {default * 1000:.2f} ms | {disk / 1024:.0f} KiB |"
        )


if __name__ == "__main__":
    anyio.run(main)
