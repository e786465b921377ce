"""Per-turn time: shipagent against bare pydantic-ai and openai-agents + SQLiteSession, side by side.

Four contenders run in one process, each keeping one conversation going (every turn's messages
join its history), with an instant model:

* ``bare``: ``pydantic_ai.Agent.run(text, message_history=history)`` with a ``FunctionModel`` whose
  function is async and reports usage (a sync function costs an executor hop per request and a
  usage-less response a word count over the whole history — neither is pydantic-ai's own cost);
* ``bare + JSONL``: the same plus one JSONL append of the turn's new messages
  (``result.new_messages_json()``) in a worker thread — the least a persistent async app does;
* ``shipagent``: ``ShipAgent.run`` with persistence on (message log, transcript, agent-context
  log and card store written before ``run`` returns), its ~20 builtin/context/handover tools
  offered, ship.json bounds raised so it sends the same N messages as the others;
* ``openai-agents``: ``Runner.run(agent, text, session=SQLiteSession(<file>))`` with tracing off
  and a minimal instant ``agents.models.interface.Model`` (the SDK's
  ``agents.testing.ScriptedModel`` deep-copies every request's input to record it, which would
  charge the SDK ~ms per turn at 1,000 messages that a real deployment does not pay).

Turns are interleaved (contender order rotates every turn) so machine drift hits all alike; each
cell is the median of ``--turns`` turns (default 40). Needs the ``bench`` extra
(``pip install -e '.[bench]'``); without openai-agents that column is skipped.

Run: ``python bench/turn_overhead.py [--turns 40] [--sizes 10,100,1000] [--clock wall|cpu]`` (prints
a markdown table; ``--clock cpu`` counts the process's CPU time, steadier when other jobs share
the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from shipagent import ShipAgent
from shipagent.store.logs import AgentContextLog, MessageLog, Transcript

SIZES = (10, 100, 1000)
Turn = Callable[[int], Awaitable[None]]


async def instant(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """An async function (no executor hop) that reports usage (no word count over the history)."""
    return ModelResponse(parts=[TextPart("ok")], usage=RequestUsage(input_tokens=1, output_tokens=1))


def make_history(n: int) -> list[ModelMessage]:
    out: list[ModelMessage] = []
    for i in range(n // 2):
        out.append(ModelRequest(parts=[UserPromptPart(f"question {i}: " + "lorem ipsum " * 20)]))
        out.append(ModelResponse(parts=[TextPart(f"answer {i}: " + "dolor sit amet " * 20)]))
    return out


async def bare(n: int, root: Path, *, append: bool) -> Turn:
    agent = Agent(FunctionModel(instant))
    history = make_history(n)
    path = root / "bare.jsonl"
    state = {"history": history}

    def write(data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data + b"\n")
        finally:
            os.close(fd)

    async def turn(i: int) -> None:
        result = await agent.run(f"turn {i}", message_history=state["history"])
        if append:
            await anyio.to_thread.run_sync(write, result.new_messages_json())
        state["history"] = result.all_messages()

    return turn


async def ship(n: int, root: Path) -> Turn:
    config = {
        "name": "bench",
        "context": {
            "chatHistory": {
                "inMemoryMaxMessages": 100_000,
                "compactKeepLastMessages": 50_000,
                "maxHistoryTokens": 10_000_000,
            }
        },
    }
    (root / "ship.json").write_text(json.dumps(config))
    agent = ShipAgent.from_project(root, model=FunctionModel(instant))
    seed(agent, "bench:chat", n)

    async def turn(i: int) -> None:
        result = await agent.run("bench:chat", f"turn {i}")
        assert result.success, result.output

    return turn


def seed(agent: ShipAgent, chat_key: str, n: int) -> None:
    """Give ``chat_key`` ``n`` messages of history, written as one whole earlier turn (its message
    log, transcript and agent-context lines), so the first turn has nothing to recover."""
    MessageLog(agent.paths).append_turn(chat_key, "seed", make_history(n))
    Transcript(agent.paths).append_turn(chat_key, "seed", "seeded", "seeded")
    AgentContextLog(agent.paths).append(chat_key, "seed", "seeded", "seeded", [])


async def openai_agents(n: int, root: Path) -> Turn | None:
    try:
        from agents import Agent as OAAgent
        from agents import Runner, SQLiteSession, set_tracing_disabled
        from agents.models.interface import Model as OAModel
        from agents.testing import assistant_message
        from agents.usage import Usage
    except ImportError:
        return None
    from agents.items import ModelResponse as OAResponse

    set_tracing_disabled(True)

    class Instant(OAModel):
        async def get_response(self, *args: Any, **kwargs: Any) -> OAResponse:
            return OAResponse(output=[assistant_message("ok")], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    session = SQLiteSession("bench", root / "oa.sqlite")
    items: list[Any] = []
    for i in range(n // 2):
        items.append({"role": "user", "content": f"question {i}: " + "lorem ipsum " * 20})
        items.append({"role": "assistant", "content": f"answer {i}: " + "dolor sit amet " * 20})
    await session.add_items(items)
    agent = OAAgent(name="bench", instructions="You are a bench.", model=Instant())

    async def turn(i: int) -> None:
        await Runner.run(agent, f"turn {i}", session=session)

    return turn


async def measure(n: int, turns: int, clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="ship-bench-"))
    (tmp / "ship").mkdir()
    contenders: dict[str, Turn] = {
        "bare": await bare(n, tmp, append=False),
        "bare + JSONL": await bare(n, tmp, append=True),
        "shipagent": await ship(n, tmp / "ship"),
    }
    oa = await openai_agents(n, tmp)
    if oa is not None:
        contenders["openai-agents"] = oa
    return await interleaved_medians(contenders, turns, clock)


async def interleaved_medians(
    contenders: dict[str, Turn], turns: int, clock: Callable[[], float]
) -> dict[str, float]:
    """Each contender's median turn time, the contenders' order rotating every turn.

    Three warm-up turns each first (hydration, first-call caches); the rotation makes machine
    drift hit every contender alike.
    """
    names = list(contenders)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for name in names:
        for i in range(3):
            await contenders[name](-1 - i)
    for i in range(turns):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            start = clock()
            await contenders[name](i)
            samples[name].append(clock() - start)
    return {name: statistics.median(s) for name, s in samples.items()}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: this process's CPU time (all threads) per turn, steadier on a busy machine",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    what = "wall" if args.clock == "wall" else "CPU (process_time)"
    print(f"median per-turn {what} time over {args.turns} interleaved turns, instant model\n")
    print(
        "| history | bare pydantic-ai | bare + one JSONL append | shipagent | openai-agents + SQLiteSession "
        "| ship / (bare + JSONL) | ship / openai-agents |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        t = await measure(n, args.turns, clock)
        oa = t.get("openai-agents")
        oa_cell = f"{oa * 1000:.2f} ms" if oa else "n/a"
        oa_ratio = f"{t['shipagent'] / oa:.2f}x" if oa else "n/a"
        print(
            f"| {n} | {t['bare'] * 1000:.2f} ms | {t['bare + JSONL'] * 1000:.2f} ms "
            f"| {t['shipagent'] * 1000:.2f} ms | {oa_cell} "
            f"| {t['shipagent'] / t['bare + JSONL']:.2f}x | {oa_ratio} |",
            flush=True,
        )


if __name__ == "__main__":
    anyio.run(main)
