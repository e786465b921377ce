"""Throughput and latency of turns through ``shipagent serve`` against in-process ``agent.run``.

The same instant model everywhere (a ``FunctionModel`` that answers "ok" at once, streamed or
not); 100 chats run concurrently, each 10 turns one after another (turns of one chat queue
anyway). Rows:

* ``in-process agent.run``: the turns called directly on a started ``ShipAgent``;
* ``HTTP POST .../messages``: JSON request/response to ``shipagent serve`` (a real process, over
  127.0.0.1, keep-alive connections through ``httpx.AsyncClient``);
* ``HTTP POST .../messages (SSE)``: the same with ``"stream": true``; also the time from sending
  the request to the first byte of the event stream;
* ``HTTP /v1/chat/completions``: the OpenAI wire format, non-streamed.

Each row uses its own project directory, so every row starts from empty chats. The HTTP client
runs in this process and the server in its own, as they would in production; the client's cost
is part of the HTTP rows.

Run: ``python bench/serve.py [--chats 100] [--turns 10]`` (prints a markdown table).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import httpx

from shipagent import ShipAgent

MODEL_MODULE = """
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel


def respond(messages, info):
    return ModelResponse(parts=[TextPart("ok")])


async def stream(messages, info):
    yield "ok"


def build():
    return FunctionModel(respond, stream_function=stream, model_name="instant")
"""

Turn = Callable[[str, str], Awaitable[float | None]]
"""Runs one turn of (chat key, text); returns the time to the first byte when it measures one."""


def _project() -> Path:
    root = Path(tempfile.mkdtemp(prefix="ship-bench-serve-"))
    # every chat is one connection from 127.0.0.1: lift the per-client cap (64 by default) above them
    limits = {"maxConnectionsPerClient": 0}
    ship = {"name": "bench", "serve": {"limits": limits}}
    (root / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    (root / "bench_model.py").write_text(MODEL_MODULE, encoding="utf-8")
    return root


async def _drive(turn: Turn, chats: int, turns: int) -> tuple[float, list[float], list[float]]:
    latencies: list[float] = []
    first_bytes: list[float] = []
    await turn("bench:warm-up", "warm up")  # imports, thread pool, connections: not what is measured

    async def one_chat(n: int) -> None:
        for t in range(turns):
            start = time.perf_counter()
            first = await turn(f"bench:{n}", f"turn {t}")
            latencies.append(time.perf_counter() - start)
            if first is not None:
                first_bytes.append(first)

    start = time.perf_counter()
    async with anyio.create_task_group() as group:
        for n in range(chats):
            group.start_soon(one_chat, n)
    return time.perf_counter() - start, latencies, first_bytes


def _ms(values: list[float], q: float) -> str:
    if not values:
        return "–"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.1f}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_server(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    shipagent = str(Path(sys.executable).with_name("shipagent"))
    command = [shipagent, "serve", "-C", str(root), "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--model-factory", "bench_model:build"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("shipagent serve did not start")


async def main(chats: int, turns: int) -> None:
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    async def stream(messages: object, info: object) -> object:
        yield "ok"

    model = FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("ok")]), stream_function=stream)  # type: ignore[arg-type]
    rows: list[tuple[str, float, list[float], list[float]]] = []

    async with ShipAgent.from_project(_project(), model=model) as agent:

        async def in_process(key: str, text: str) -> None:
            result = await agent.run(key, text)
            assert result.success

        rows.append(("in-process agent.run", *await _drive(in_process, chats, turns)))

    for name in ("messages", "sse", "completions"):
        process, url = await anyio.to_thread.run_sync(_start_server, _project())
        limits = httpx.Limits(max_connections=chats, max_keepalive_connections=chats)
        try:
            async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:

                async def post(key: str, text: str) -> float | None:
                    response = await client.post(f"/v1/chats/{key}/messages", json={"text": text})
                    assert response.json().get("success"), response.text
                    return None

                async def sse(key: str, text: str) -> float | None:
                    start = time.perf_counter()
                    body = {"text": text, "stream": True}
                    async with client.stream("POST", f"/v1/chats/{key}/messages", json=body) as response:
                        first: float | None = None
                        data = b""
                        async for piece in response.aiter_bytes():
                            if first is None:
                                first = time.perf_counter() - start
                            data += piece
                    assert b"event: done" in data
                    return first

                async def completions(key: str, text: str) -> float | None:
                    body = {"model": "bench", "messages": [{"role": "user", "content": text}], "user": key}
                    response = await client.post("/v1/chat/completions", json=body)
                    assert response.json()["choices"][0]["message"]["content"] == "ok"
                    return None

                turn: Turn = {"messages": post, "sse": sse, "completions": completions}[name]
                label = {
                    "messages": "HTTP POST .../messages",
                    "sse": "HTTP POST .../messages (SSE)",
                    "completions": "HTTP /v1/chat/completions",
                }[name]
                rows.append((label, *await _drive(turn, chats, turns)))
        finally:
            process.terminate()
            await anyio.to_thread.run_sync(process.wait)

    base = len(rows[0][2]) / rows[0][1]
    print(f"{chats} chats × {turns} turns, all chats concurrently, instant model\n")
    print("| path | turns/s | vs in-process | p50 ms | p99 ms | first SSE byte p50 / p99 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, elapsed, latencies, first_bytes in rows:
        rate = len(latencies) / elapsed
        first = f"{_ms(first_bytes, 0.5)} / {_ms(first_bytes, 0.99)}" if first_bytes else "–"
        print(
            f"| {label} | {rate:.0f} | {rate / base:.2f}× | {_ms(latencies, 0.5)} | "
            f"{_ms(latencies, 0.99)} | {first} |"
        )
    print(f"\nmedian in-process turn: {statistics.median(rows[0][2]) * 1000:.1f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=100)
    parser.add_argument("--turns", type=int, default=10)
    args = parser.parse_args()
    anyio.run(main, args.chats, args.turns)
