"""CPU per call of each write a turn's commit makes to the ``.ship/`` stores.

    python bench/store_appends.py [--calls 2000]

A turn's commit (``ChatHistories.commit``, one worker-thread hop) appends to the message log, the
transcript and the agent-context log and writes the turn's two cards to the chat's output box in
the card store. This script times each of those calls alone, in a loop, with
``time.process_time`` (CPU of the process, steadier on a shared machine) and with the wall clock
(which also counts waiting for the disk: the agent-context window's ``fsync``), and prints a
markdown table of the medians per call over ``--rounds`` rounds of ``--calls`` calls.

The agent-context log is timed twice: for a chat below its window, and for a chat past it, where
every append also keeps the file at ``windowEntries`` (200) entries.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from shipagent.chatkeys import ShipPaths
from shipagent.store.cards._sqlite import SqliteCardBoxStore
from shipagent.store.logs import AgentContextLog, MessageLog, Transcript
from shipagent.tools.handover import CARD_CHAT_MESSAGE, NewCard, TextContent

TEXT = "question: " + "lorem ipsum ünïcödé " * 20  # ~400 bytes, a short chat turn
CALLS = [{"tool": "exec_shell", "success": True, "error": None}]


def per_call(fn: Callable[[int], object], calls: int, rounds: int) -> tuple[float, float]:
    """Medians over ``rounds`` of the CPU and the wall time per call of ``calls`` calls, in µs."""
    cpu, wall = [], []
    counter = 0
    for _ in range(rounds):
        start, start_wall = time.process_time(), time.perf_counter()
        for _ in range(calls):
            fn(counter)
            counter += 1
        cpu.append((time.process_time() - start) / calls * 1e6)
        wall.append((time.perf_counter() - start_wall) / calls * 1e6)
    return statistics.median(cpu), statistics.median(wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ship-appends-"))
    paths = ShipPaths(root)
    messages = [ModelRequest(parts=[UserPromptPart(TEXT)]), ModelResponse(parts=[TextPart(TEXT)])]
    log, transcript = MessageLog(paths), Transcript(paths)
    context = AgentContextLog(paths, window=200)
    store = SqliteCardBoxStore(root / ".ship" / "cardbox.sqlite3")
    box = store._write(lambda conn: store._insert_box(conn, [], store.project_id))

    def cards(i: int) -> list[NewCard]:
        return [
            NewCard(CARD_CHAT_MESSAGE, TextContent(TEXT), "bench", {"role": role, "request_id": f"r{i}"})
            for role in ("user", "assistant")
        ]

    # A chat below its window: a fresh key every 150 appends.
    def short_context(i: int) -> None:
        context.append(f"short-{i // 150}", f"r{i}", TEXT, TEXT, CALLS)

    for i in range(250):  # one chat already past its window
        context.append("long", f"seed{i}", TEXT, TEXT, CALLS)

    cases: list[tuple[str, Callable[[int], object]]] = [
        (
            "message log `append_turn` (2 messages)",
            lambda i: log.append_turn("c", f"r{i}", messages, seq=2 * i),
        ),
        ("transcript `append_turn`", lambda i: transcript.append_turn("c", f"r{i}", TEXT, TEXT)),
        ("agent-context `append`, chat below its window", short_context),
        (
            "agent-context `append`, chat past its window (200)",
            lambda i: context.append("long", f"r{i}", TEXT, TEXT, CALLS),
        ),
        ("card store `append_to_box_sync` (2 cards)", lambda i: store.append_to_box_sync(box, cards(i))),
    ]
    print(f"per call: median of {args.rounds} rounds of {args.calls} calls\n")
    print("| write | CPU µs (process_time) | wall µs |")
    print("|---|---:|---:|")
    for name, fn in cases:
        cpu, wall = per_call(fn, args.calls, args.rounds)
        print(f"| {name} | {cpu:.0f} | {wall:.0f} |", flush=True)


if __name__ == "__main__":
    main()
