"""Throughput: 100 chats running turns concurrently against the same turns one after another.

One ``ShipAgent`` (instant model, persistence on, default bounds). Sequential: ``--rounds``
rounds, each running one turn of every chat in turn. Concurrent: the same rounds, each starting
one turn of every chat at once (``asyncio.gather``). Both are repeated ``--repeat`` times,
alternating, and the best of each is kept. A real model's latency would make concurrency win
by far more; with an instant model this measures how much of a turn's own work overlaps (the
stores' writes run in worker threads while other turns use the event loop).

Besides turns/s the table gives CPU per turn (``time.process_time``: every thread of the process,
median of the repeats), which other jobs on a shared machine disturb far less than wall time:
with an instant model a turn is Python under one GIL, so concurrency can only win the time a
sequential turn spends idle (waking the worker thread that writes the stores and being woken by
it), and it loses whatever extra CPU concurrent turns cost. ``--thread-limit N`` sets anyio's
default worker-thread limit (40) to show what the number of writer threads costs.

Run: ``python bench/concurrency.py [--chats 100] [--rounds 3] [--repeat 3] [--model-latency-ms 0]
[--thread-limit N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import anyio.to_thread
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
    parser.add_argument("--thread-limit", type=int, default=0, help="anyio's worker threads (default 40)")
    args = parser.parse_args()
    if args.thread_limit:
        anyio.to_thread.current_default_thread_limiter().total_tokens = args.thread_limit
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

        turns = args.rounds * len(keys)

        async def sequential() -> tuple[float, float]:
            start, cpu = time.perf_counter(), time.process_time()
            for r in range(args.rounds):
                for key in keys:
                    assert (await agent.run(key, f"round {r}")).success
            return turns / (time.perf_counter() - start), (time.process_time() - cpu) / turns

        async def concurrent() -> tuple[float, float]:
            start, cpu = time.perf_counter(), time.process_time()
            for r in range(args.rounds):
                results = await asyncio.gather(*(agent.run(key, f"round {r}") for key in keys))
                assert all(result.success for result in results)
            return turns / (time.perf_counter() - start), (time.process_time() - cpu) / turns

        seq: list[tuple[float, float]] = []
        con: list[tuple[float, float]] = []
        for _ in range(args.repeat):  # alternating, so load drift hits both alike
            seq.append(await sequential())
            con.append(await concurrent())
        best_seq, best_con = max(rate for rate, _ in seq), max(rate for rate, _ in con)
        cpu_seq = statistics.median(cpu for _, cpu in seq) * 1000
        cpu_con = statistics.median(cpu for _, cpu in con) * 1000
        model = f"model latency {args.model_latency_ms:g} ms" if args.model_latency_ms else "instant model"
        threads = f", {args.thread_limit} worker threads" if args.thread_limit else ""
        print(
            f"{args.chats} chats × {args.rounds} rounds, best of {args.repeat}, {model}{threads}, "
            f"load average {os.getloadavg()[0]:.1f}\n"
        )
        print("| sequential | concurrent | ratio | CPU per turn, sequential | CPU per turn, concurrent |")
        print("|---:|---:|---:|---:|---:|")
        print(
            f"| {best_seq:.0f} turns/s | {best_con:.0f} turns/s | {best_con / best_seq:.2f}x "
            f"| {cpu_seq:.2f} ms | {cpu_con:.2f} ms |"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
