"""Where a shipagent turn's fixed cost goes: a wall-clock breakdown by phase, then cProfile's top.

Runs ``--turns`` turns of one chat (instant model, persistence on, ``--history`` messages) and
times each phase of ``ShipAgent.run`` by wrapping the methods that implement it:

* ``load history`` (``ChatHistories.aget``), ``instructions`` (``TurnWiring.instructions``),
  ``toolsets`` (building the guarded toolset list), ``tool loop`` (pydantic-ai's run, including
  the catalog check in ``CatalogToolset.get_tools`` and its tool-definition preparation),
* ``context window``: shipagent's own work before each model request (the sectioned budget plan,
  injection placement, the prefix hash, the report to the ledger);
* ``commit``: message log, transcript, agent-context log, the card store's output box and the
  ledger's records, all written in one worker-thread hop before ``run`` returns.

The history grows by two messages a turn (as in ``turn_overhead.py``).

Run: ``python bench/turn_profile.py [--history 10] [--turns 200] [--top 25]``.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import pstats
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).parent))
from turn_overhead import instant, seed

from shipagent import ShipAgent
from shipagent.agent import _turn as turn_module
from shipagent.agent._combined import SequentialCombinedToolset
from shipagent.agent._wiring import TurnWiring
from shipagent.agent.ledger._ledger import LedgerRecorder
from shipagent.agent.ledger._store import LedgerStore
from shipagent.store.chats import ChatHistories
from shipagent.store.logs import AgentContextLog, MessageLog, Transcript
from shipagent.tools.files import CatalogToolset
from shipagent.tools.files import _catalog as files_catalog
from shipagent.window.placement import ContextWindow

spent: dict[str, list[float]] = defaultdict(list)


def timed(owner: Any, attr: str, label: str) -> None:
    """Replace ``owner.attr`` (sync or async) with a wrapper adding its wall time to ``label``."""
    original: Callable[..., Any] = getattr(owner, attr)
    spent[label]  # the table lists the phases in the order they are registered here
    if hasattr(original, "__code__") and original.__code__.co_flags & 0x80:  # a coroutine function

        @functools.wraps(original)
        async def wrapper_async(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                spent[label].append(time.perf_counter() - start)

        setattr(owner, attr, wrapper_async)
    else:

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spent[label].append(time.perf_counter() - start)

        setattr(owner, attr, wrapper)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--history", type=int, default=10)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    from pydantic_ai.models.function import FunctionModel

    root = Path(tempfile.mkdtemp(prefix="ship-profile-"))
    bounds = {"inMemoryMaxMessages": 100_000, "compactKeepLastMessages": 50_000, "maxHistoryTokens": 10**7}
    (root / "ship.json").write_text(json.dumps({"name": "bench", "context": {"chatHistory": bounds}}))
    agent = ShipAgent.from_project(root, model=FunctionModel(instant))
    seed(agent, "bench:chat", args.history)
    for _ in range(5):
        await agent.run("bench:chat", "warm up")

    timed(ChatHistories, "aget", "load history")
    timed(TurnWiring, "instructions", "instructions")
    timed(TurnWiring, "toolsets", "toolsets")
    timed(turn_module, "_tool_loop", "tool loop (pydantic-ai)")
    timed(CatalogToolset, "get_tools", "  of which: tool defs + catalog check")
    timed(SequentialCombinedToolset, "get_tools", "    of which: tool defs of shipagent's toolsets")
    timed(files_catalog, "render_catalog", "    of which: catalog rendering")
    timed(
        ContextWindow, "before_model_request", "  of which: context window (budget plan, injections, prefix)"
    )
    timed(LedgerRecorder, "on_request", "    of which: handing the request to the ledger")
    timed(
        type(agent.store),
        "commit",
        "commit: message log, transcript, agent-context log, cards, ledger (one hop)",
    )
    timed(MessageLog, "append_turn", "  of which: message log append (in the worker thread)")
    timed(Transcript, "append_turn", "  of which: transcript append (in the worker thread)")
    timed(AgentContextLog, "append", "  of which: agent-context append (in the worker thread)")
    timed(type(agent.handover.store), "append_to_box_sync", "  of which: card store (in the worker thread)")
    timed(
        LedgerStore, "append_turn", "  of which: ledger records encoded and appended (in the worker thread)"
    )
    timed(LedgerRecorder, "lines", "    of which: encoded")
    timed(ShipAgent, "run", "whole turn")
    for i in range(args.turns):
        await agent.run("bench:chat", f"turn {i}")

    turn = statistics.median(spent["whole turn"])
    print(f"median wall time per turn over {args.turns} turns, {args.history} messages of history\n")
    print("| phase | per turn | calls per turn | share of the turn |")
    print("|---|---:|---:|---:|")
    for label, samples in spent.items():
        per_turn = sum(samples) / args.turns
        print(
            f"| {label} | {per_turn * 1000:.2f} ms | {len(samples) / args.turns:.0f} | {per_turn / turn:.0%} |"
        )

    profiler = cProfile.Profile()
    profiler.enable()
    for i in range(args.turns):
        await agent.run("bench:chat", f"profiled {i}")
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(args.top)
    print("\ncProfile, by own time:\n")
    print(out.getvalue().split("\n", 6)[-1].replace(str(Path(sys.prefix)), "<venv>"))


if __name__ == "__main__":
    anyio.run(main)
