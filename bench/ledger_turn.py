"""The ledger's own cost per turn at 10, 100 and 1,000 messages of history, and bytes per record.

For each size, one chat on a throwaway project (ship.json bounds raised so every request carries
the whole history, as in ``turn_overhead.py``) runs ``--turns`` turns with an instant scripted
model; every fourth turn the model calls a tool first (two requests in that turn). The ledger's
CPU is measured where it is spent, with the calling thread's CPU clock:

* ``capture``: ``LedgerRecorder.on_request``, on the event loop before each model request;
* ``write``: the blocking writer ``Ledger.flush`` hands to the commit (encoding the turn's
  records and appending them), in the commit's worker thread.

It also prints the bytes the turn's records add to ``requests.jsonl`` (per record line); with
``--ab``, the whole turn's process CPU (median) beside the same chat in a project with
``context.ledger`` disabled, turns interleaved (a difference of a few tenths of a millisecond in
a 40 ms turn is within that column's noise on a shared machine; the thread clocks above are the
ledger's own figure).

Run: ``python bench/ledger_turn.py [--turns 30] [--sizes 10,100,1000] [--ab]``.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import RequestUsage

sys.path.insert(0, str(Path(__file__).parent))
from turn_overhead import seed

from shipagent import ShipAgent
from shipagent.agent.ledger import Ledger
from shipagent.agent.ledger._ledger import LedgerRecorder

KEY = "bench:ledger"
cpu: dict[str, float] = {"capture": 0.0, "write": 0.0}


def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"about {topic}: " + "facts " * 40


async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    usage = RequestUsage(input_tokens=1, output_tokens=1)
    last = messages[-1]
    prompt = next((p for p in last.parts if p.part_kind == "user-prompt"), None)
    if isinstance(last, ModelRequest) and prompt is not None and "tool" in str(prompt.content):
        return ModelResponse(parts=[ToolCallPart("lookup", {"topic": "x"}, tool_call_id="c1")], usage=usage)
    return ModelResponse(parts=[TextPart("ok")], usage=usage)


def instrument() -> None:
    """Count the thread CPU of the ledger's capture and of its writer."""
    on_request: Callable[..., Any] = LedgerRecorder.on_request

    @functools.wraps(on_request)
    def capture(self: LedgerRecorder, report: Any) -> None:
        start = time.thread_time()
        try:
            on_request(self, report)
        finally:
            cpu["capture"] += time.thread_time() - start

    flush: Callable[..., Any] = Ledger.flush

    @functools.wraps(flush)
    def flushing(self: Ledger, *args: Any, **kwargs: Any) -> Callable[[], None] | None:
        writer = flush(self, *args, **kwargs)
        if writer is None:
            return None

        def timed() -> None:
            start = time.thread_time()
            try:
                writer()
            finally:
                cpu["write"] += time.thread_time() - start

        return timed

    LedgerRecorder.on_request = capture  # type: ignore[method-assign]
    Ledger.flush = flushing  # type: ignore[method-assign]


async def chat(size: int, *, ledger: bool) -> ShipAgent:
    """A project whose chat ``KEY`` holds ``size`` messages, warmed up."""
    root = Path(tempfile.mkdtemp(prefix="ship-ledger-"))
    bounds = {"inMemoryMaxMessages": 100_000, "compactKeepLastMessages": 50_000, "maxHistoryTokens": 10**7}
    context = {"chatHistory": bounds, "ledger": {"enabled": ledger}}
    (root / "ship.json").write_text(json.dumps({"name": "bench", "context": context}))
    agent = ShipAgent.from_project(root, model=FunctionModel(model), toolsets=[FunctionToolset([lookup])])
    seed(agent, KEY, size)
    for i in range(5):
        await agent.run(KEY, f"warm up {i}")
    return agent


async def run_size(size: int, turns: int, *, ab: bool) -> dict[str, float]:
    agent = await chat(size, ledger=True)
    without = await chat(size, ledger=False) if ab else None
    path = agent.paths.chat_dir(KEY) / "requests.jsonl"
    before_bytes, before_records = path.stat().st_size, len(agent.ledger(KEY))
    cpu.update(capture=0.0, write=0.0)
    per_turn: list[float] = []
    whole: dict[bool, list[float]] = {True: [], False: []}
    for i in range(turns):
        text = f"turn {i}" + (" use a tool" if i % 4 == 3 else "")
        order = (True, False) if i % 2 else (False, True)  # interleaved: drift hits both alike
        for on in order if without is not None else (True,):
            start, ledger_start = time.process_time(), cpu["capture"] + cpu["write"]
            await (agent if on or without is None else without).run(KEY, text)
            whole[on].append(time.process_time() - start)
            if on:
                per_turn.append(cpu["capture"] + cpu["write"] - ledger_start)
    records = agent.ledger(KEY)
    added = len(records) - before_records
    assert len(records[-1].items) >= size  # every request carried the whole history
    return {
        "capture": cpu["capture"] / turns * 1000,
        "write": cpu["write"] / turns * 1000,
        "median": statistics.median(per_turn) * 1000,
        "bytes": (path.stat().st_size - before_bytes) / added,
        "on": statistics.median(whole[True]) * 1000,
        "off": statistics.median(whole[False]) * 1000 if without is not None else 0.0,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--ab", action="store_true", help="also time whole turns against a ledger-less chat")
    args = parser.parse_args()
    logging.getLogger("shipagent").setLevel(logging.ERROR)  # the seeded chat's recovery notice
    instrument()
    print(f"ledger CPU per turn (thread CPU clock), {args.turns} turns, every 4th with a tool call\n")
    print(
        "| history | capture (on_request) | encode + append | ledger total, mean | ledger total, median "
        "| bytes per record line |"
        + (" whole turn, ledger on / off (process CPU, median) |" if args.ab else "")
    )
    print("|---:|---:|---:|---:|---:|---:|" + ("---:|" if args.ab else ""))
    for size in (int(s) for s in args.sizes.split(",")):
        row = await run_size(size, args.turns, ab=args.ab)
        print(
            f"| {size} | {row['capture']:.3f} ms | {row['write']:.3f} ms | "
            f"{row['capture'] + row['write']:.3f} ms | {row['median']:.3f} ms | {row['bytes']:,.0f} |"
            + (f" {row['on']:.2f} / {row['off']:.2f} ms |" if args.ab else "")
        )


if __name__ == "__main__":
    anyio.run(main)
