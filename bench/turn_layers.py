"""Where shipagent's per-turn overhead over bare pydantic-ai comes from, layer by layer.

Five contenders in one process, each keeping one conversation going, turns interleaved (as in
``turn_overhead.py``), with the same instant model:

* ``bare``: ``Agent.run(text, message_history=history)`` on pydantic-ai's ``Agent``, as a turn
  uses it;
* ``+ instructions``: the same run given shipagent's assembled instructions for the project;
* ``+ tools``: also offered shipagent's toolsets exactly as a turn offers them (the builtin,
  context and handover tools behind the catalog, guard, spill and injection wrappers) — what
  pydantic-ai itself spends on a run that has tools: walking the toolsets, building tool
  definitions, instruction collection, the tool-search and capability scans;
* ``+ context window``: also with shipagent's ``ContextWindow`` capability (the sectioned budget
  and injection placement per request; no ledger observer) — pydantic-ai's dispatch of a
  capability's hooks plus the capability's own work;
* ``shipagent``: ``ShipAgent.run`` — all of the above plus the ledger, the chat lock, the step
  reporter and the commit (message log, transcript, agent-context log, card store and ledger in
  one worker-thread hop before ``run`` returns).

The differences between neighbouring columns are what each layer costs. Nothing is persisted by
the first four (they measure pydantic-ai's work); ``turn_overhead.py`` has the persistent baseline.

Run: ``python bench/turn_layers.py [--turns 40] [--sizes 10,100,1000] [--clock wall|cpu]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import FunctionModel

sys.path.insert(0, str(Path(__file__).parent))
from turn_overhead import SIZES, instant, interleaved_medians, make_history, seed

from shipagent import ShipAgent
from shipagent.agent._combined import SequentialCombinedToolset
from shipagent.agent._turn import _RunWindow
from shipagent.tools._deps import TurnDeps
from shipagent.tools.execution import use_tool_context
from shipagent.tools.files import CatalogToolset
from shipagent.window.placement import ContextWindow

Turn = Callable[[int], Awaitable[None]]
LAYERS = ("bare", "+ instructions", "+ tools", "+ context window")


def _layer(agent: ShipAgent, instructions: str, name: str, n: int) -> Turn:
    model = agent.model
    state: dict[str, list[ModelMessage]] = {"history": make_history(n)}
    level = LAYERS.index(name)

    def window(deps: TurnDeps) -> ContextWindow:
        made = agent._wiring.context_window(deps)
        made.observer = None  # the ledger belongs to the last column
        return made

    # as ShipAgent does: the window is an agent-level capability, made afresh by its ``for_run``
    capabilities = [_RunWindow(make=window)] if level >= 3 else []
    pa = Agent(output_type=str, deps_type=TurnDeps, name="bench", retries=1, capabilities=capabilities)

    async def turn(i: int) -> None:
        ctx = agent._wiring.tool_context("bench:layers", f"{name}-{i}", None)
        with use_tool_context(ctx):
            kwargs: dict[str, Any] = {}
            if level >= 1:
                kwargs["instructions"] = instructions
            if level >= 2:
                toolsets = agent.turn_hooks.toolsets(agent._wiring.toolsets())
                one = toolsets[0] if len(toolsets) == 1 else SequentialCombinedToolset(toolsets)
                kwargs["toolsets"] = [CatalogToolset(one, skills=agent._wiring.catalog_skills)]
            result = await pa.run(
                f"turn {i}", message_history=state["history"], model=model, deps=TurnDeps(ctx), **kwargs
            )
        state["history"] = result.all_messages()

    return turn


async def measure(n: int, turns: int, clock: Callable[[], float]) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="ship-layers-"))
    bounds = {"inMemoryMaxMessages": 100_000, "compactKeepLastMessages": 50_000, "maxHistoryTokens": 10**7}
    (root / "ship.json").write_text(json.dumps({"name": "bench", "context": {"chatHistory": bounds}}))
    agent = ShipAgent.from_project(root, model=FunctionModel(instant))
    seed(agent, "bench:chat", n)
    ctx = agent._wiring.tool_context("bench:layers", "instructions", None)
    with use_tool_context(ctx):
        instructions = await agent._wiring.instructions(ctx)

    async def ship(i: int) -> None:
        result = await agent.run("bench:chat", f"turn {i}")
        assert result.success, result.output

    contenders: dict[str, Turn] = {name: _layer(agent, instructions, name, n) for name in LAYERS}
    contenders["shipagent"] = ship
    return await interleaved_medians(contenders, turns, clock)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = parser.parse_args()
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    what = "wall" if args.clock == "wall" else "CPU (process_time)"
    print(f"median per-turn {what} time over {args.turns} interleaved turns, instant model\n")
    print(f"| history | {' | '.join(LAYERS)} | shipagent |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in (int(s) for s in args.sizes.split(",")):
        t = await measure(n, args.turns, clock)
        cells = " | ".join(f"{t[name] * 1000:.2f} ms" for name in (*LAYERS, "shipagent"))
        print(f"| {n} | {cells} |", flush=True)


if __name__ == "__main__":
    anyio.run(main)
