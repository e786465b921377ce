"""Memory at many chats: touch ``--chats`` chats of ``--messages`` messages each in one process.

Every chat gets a real message log on disk (one turn record of ``--messages`` messages), then the
process touches each one through ``agent.history(key)`` — the same hydration a turn starts with —
and reports the resident set size as it goes. With ``context.chatHistory.maxResidentChats`` and
``idleEvictSeconds`` the idle and excess chats are dropped from memory and rehydrated from the
tail of their log on their next turn, so RSS stays flat however many chats there are.

Then it times real turns (``ShipAgent.run``, instant model, persistence on), interleaved, on a
chat that is resident and on one that was evicted (its first turn rehydrates it).

Run: ``python bench/many_chats.py [--chats 100000] [--messages 20] [--turns 30]``. The chats'
files go to a temp dir (about 0.6 GB for 100,000 chats) that is removed afterwards.
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
from pydantic_ai.models.function import FunctionModel
from turn_overhead import instant, make_history

from shipagent import ShipAgent, jsonl
from shipagent.store.logs import dump_messages, now_iso


def rss_mib() -> float:
    """The current resident set size of this process (``/proc/self/statm``), in MiB."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def seed(agent: ShipAgent, keys: list[str], messages: int) -> None:
    """One turn record of ``messages`` messages per chat, written as the message log writes it."""
    record = {
        "t": "turn",
        "ts": now_iso(),
        "requestId": "seed",
        "messages": dump_messages(make_history(messages)),
    }
    line = jsonl._dumps(record)
    for key in keys:
        path = agent.chats.log.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(line)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chats", type=int, default=100_000)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--turns", type=int, default=30)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ship-many-"))
    try:
        (root / "ship.json").write_text('{"name": "bench"}')
        agent = ShipAgent.from_project(root, model=FunctionModel(instant))
        keys = [f"bench:chat:{i}" for i in range(args.chats)]
        start = time.perf_counter()
        seed(agent, keys, args.messages)
        print(f"seeded {args.chats} chats in {time.perf_counter() - start:.1f} s")
        base = rss_mib()
        print("\n| chats touched | RSS | chats resident in memory | touch rate |")
        print("|---:|---:|---:|---:|")
        step = max(args.chats // 5, 1)
        start = time.perf_counter()
        for i, key in enumerate(keys, 1):
            assert len(agent.history(key)) == args.messages
            if i % step == 0 or i == args.chats:
                rate = i / (time.perf_counter() - start)
                print(
                    f"| {i:,} | {rss_mib():.0f} MiB | {len(agent.chats.resident()):,} | {rate:,.0f} chats/s |",
                    flush=True,
                )
        print(f"\nRSS before touching any chat: {base:.0f} MiB")

        # Turns: a resident chat (the last touched) against an evicted one (the oldest touched,
        # a fresh one each turn so every measured turn really rehydrates).
        warm = keys[-1]
        samples: dict[str, list[float]] = {"resident": [], "evicted": []}
        for i in range(args.turns):
            evicted = keys[i]
            for name, key in (("resident", warm), ("evicted", evicted))[:: 1 if i % 2 else -1]:
                t0 = time.perf_counter()
                result = await agent.run(key, f"turn {i}")
                samples[name].append(time.perf_counter() - t0)
                assert result.success, result.output
        res, evi = (statistics.median(samples[k]) for k in ("resident", "evicted"))
        print("\n| turn on a resident chat | turn on an evicted chat | ratio |")
        print("|---:|---:|---:|")
        print(f"| {res * 1000:.2f} ms | {evi * 1000:.2f} ms | {evi / res:.2f}x |")
        print(f"\nRSS at the end: {rss_mib():.0f} MiB")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
