"""Store costs: a turn's commit, a chat's rebuild and the last-committed check, per implementation.

    python bench/stores.py [--turns 200]

Prints a markdown table: memory, ``.ship/`` files and Postgres (``SHIPAGENT_BENCH_DATABASE_URL``
or a throwaway cluster, as ``bench/durable.py`` starts one). Each turn commits a user message and
an answer of ~1 KB to the message log, transcript, agent-context log and output box.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from shipagent.store import FileStores, MemoryStores, PgStores, TurnWrite


def turn(i: int) -> TurnWrite:
    text = f"question {i}: " + "lorem ipsum ünïcödé " * 50
    messages = [ModelRequest(parts=[UserPromptPart(text)]), ModelResponse(parts=[TextPart(text)])]
    calls = [{"tool": "exec_shell", "success": True, "error": None}]
    return TurnWrite("bench:chat", f"r{i}", text, text, messages, tool_calls=calls)


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await fn()
    return (time.perf_counter() - start) * 1000


async def measure(stores: Any, turns: int) -> dict[str, float]:
    commits = [await timed(lambda i=i: stores.commit_turn(turn(i))) for i in range(turns)]
    rebuilds = [await timed(lambda: stores.messages.rebuild("bench:chat")) for _ in range(10)]
    checks = [await timed(lambda: stores.messages.last_committed("bench:chat")) for _ in range(50)]
    await stores.close()
    return {
        "commit": statistics.mean(commits),
        "commit_p50": statistics.median(commits),
        "rebuild": statistics.median(rebuilds),
        "check": statistics.median(checks),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))  # bench/ is not a package
    from durable import database, postgres_server

    rows: list[tuple[str, dict[str, float]]] = []
    rows.append(("memory", anyio.run(measure, MemoryStores(), args.turns)))
    with tempfile.TemporaryDirectory() as root:
        rows.append((".ship/ files", anyio.run(measure, FileStores(Path(root)), args.turns)))
    with postgres_server() as server, database(server) as url:
        rows.append(("Postgres", anyio.run(measure, PgStores(url), args.turns)))
    print(f"{args.turns} turns of one chat (~1 KB each way)\n")
    print("| stores | commit_turn mean ms | p50 ms | rebuild ms | last_committed ms |")
    print("|---|---:|---:|---:|---:|")
    for name, r in rows:
        print(
            f"| {name} | {r['commit']:.2f} | {r['commit_p50']:.2f} | {r['rebuild']:.2f} | {r['check']:.2f} |"
        )


if __name__ == "__main__":
    main()
