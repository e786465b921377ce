"""Throughput: 100 chats running turns concurrently against the same turns one after another.

One ``ShipAgent`` (instant model, persistence on, default bounds). Sequential: ``--rounds``
rounds, each running one turn of every chat in turn. Concurrent: the same rounds, each starting
one turn of every chat at once (``asyncio.gather``). Both are repeated ``--repeat`` times,
alternating, and the best of each is kept. A real model's latency would make concurrency win
by far more; with an instant model this measures how much of a turn's own work overlaps (the
stores' writes run in worker threads while other turns use the event loop).

Run: ``python bench/concurrency.py [--chats 100] [--rounds 3] [--repeat 3] [--model-latency-ms 0]``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from turn_overhead import instant

from shipagent import ShipAgent


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chats", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--model-latency-ms",
        type=float,
        default=0.0,
        help="make the model answer after this long (a real model takes 100s of ms)",
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ship-concurrency-"))
    try:
        (root / "ship.json").write_text('{"name": "bench"}')

        async def slow(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            await asyncio.sleep(args.model_latency_ms / 1000)
            return await instant(messages, info)

        agent = ShipAgent.from_project(root, model=FunctionModel(slow if args.model_latency_ms else instant))
        keys = [f"bench:chat:{i}" for i in range(args.chats)]
        for key in keys:  # warm: every chat exists on disk and in memory
            await agent.run(key, "warm up")

        async def sequential() -> float:
            start = time.perf_counter()
            for r in range(args.rounds):
                for key in keys:
                    assert (await agent.run(key, f"round {r}")).success
            return args.rounds * len(keys) / (time.perf_counter() - start)

        async def concurrent() -> float:
            start = time.perf_counter()
            for r in range(args.rounds):
                results = await asyncio.gather(*(agent.run(key, f"round {r}") for key in keys))
                assert all(result.success for result in results)
            return args.rounds * len(keys) / (time.perf_counter() - start)

        seq, con = 0.0, 0.0
        for _ in range(args.repeat):
            seq = max(seq, await sequential())
            con = max(con, await concurrent())
        model = f"model latency {args.model_latency_ms:g} ms" if args.model_latency_ms else "instant model"
        print(f"{args.chats} chats × {args.rounds} rounds, best of {args.repeat}, {model}\n")
        print("| sequential | concurrent | ratio |")
        print("|---:|---:|---:|")
        print(f"| {seq:.0f} turns/s | {con:.0f} turns/s | {con / seq:.2f}x |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
