"""Channel overhead: turns through the local Telegram Bot API server against the same turns over HTTP.

``--chats`` chats each send ``--messages`` messages (one after another per chat, all chats at
once) to one agent with an instant streaming model, through the Telegram channel (PTB long-polling
the local test server in ``tests/support/telegram_server.py``, over real sockets). Measured per
message, on the server's clock: inbound → the first visible text (the first ``sendMessage``) and
inbound → the final message. The same turns then go over the HTTP API (``POST
/v1/chats/{key}/messages`` as SSE, served by uvicorn): request → first ``text_delta`` and → ``done``.

With ``streaming: edit`` the final text is the formatted edit, paced to one edit per second per
chat (Telegram's own limit), so "final" includes that pacing by design; ``--streaming off`` sends
the answer once, which is the like-for-like comparison with HTTP.

A chat's messages are ``--gap`` seconds apart (default 1 s: Telegram allows about one message per
second per chat, and the channel paces its sends and edits to that, across turns too), in both
runs, so msg/s is bounded by the gap and the latencies are what compare.

Run: ``python bench/channels.py [--chats 50] [--messages 10] [--streaming off|edit] [--gap 1]``.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1]))
import anyio
import httpx
import uvicorn
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent import ShipAgent
from shipagent.hosts.channels import ChannelHost, channels_from_config
from shipagent.hosts.serve._app import create_app
from tests.support.telegram_server import TOKEN, telegram_server

ANSWER = "The answer is **forty-two**, as computed."


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    for start in range(0, len(ANSWER), 12):
        yield ANSWER[start : start + 12]


def _model() -> FunctionModel:
    return FunctionModel(
        lambda m, i: ModelResponse(parts=[TextPart(ANSWER)]), stream_function=_stream, model_name="instant"
    )


def _project(root: Path, ship: dict[str, Any]) -> None:
    root.mkdir(parents=True)
    (root / "ship.json").write_text(json.dumps(ship), encoding="utf-8")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def telegram_run(root: Path, chats: int, messages: int, streaming: str, gap: float) -> dict[str, Any]:
    async with telegram_server() as fake:
        ship = {
            "channels": {
                "telegram": {
                    "enabled": True,
                    "botToken": TOKEN,
                    "apiRoot": fake.url,
                    "dmPolicy": "open",
                    "streaming": streaming,
                    "rateLimitPerMinute": 0,
                }
            }
        }
        _project(root, ship)
        agent = ShipAgent.from_project(root, model=_model())
        channels = channels_from_config(agent, agent.config.channels, poll_timeout=1.0)
        first: list[float] = []
        final: list[float] = []
        async with agent, ChannelHost(agent, channels):
            started = time.monotonic()

            async def chat(n: int) -> None:
                chat_id = 1000 + n
                for m in range(messages):
                    before = len(fake.shown(chat_id))
                    fake.user_message(f"question {m}", chat_id=chat_id, user_id=chat_id)
                    sent = time.monotonic()
                    await fake.wait_for(lambda b=before: len(fake.shown(chat_id)) > b, within=120)
                    mine = [c for c in fake.calls if c.params.get("chat_id") == chat_id and c.at >= sent]
                    first.append(min(c.at for c in mine if c.method == "sendMessage") - sent)
                    await fake.wait_for(
                        lambda: fake.shown(chat_id)[-1].text.endswith("computed."), within=120
                    )
                    done = [
                        c.at
                        for c in fake.calls
                        if c.params.get("chat_id") == chat_id
                        and c.method in ("sendMessage", "editMessageText")
                    ]
                    final.append(max(done) - sent)
                    await anyio.sleep(gap)  # Telegram allows one message per second per chat: so do we

            async with anyio.create_task_group() as tasks:
                for n in range(chats):
                    tasks.start_soon(chat, n)
            elapsed = time.monotonic() - started
    return {"first": first, "final": final, "rate": chats * messages / elapsed}


async def http_run(root: Path, chats: int, messages: int, gap: float) -> dict[str, Any]:
    _project(root, {})
    agent = ShipAgent.from_project(root, model=_model())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(agent), log_level="warning", access_log=False))
    first: list[float] = []
    final: list[float] = []
    async with anyio.create_task_group() as outer:
        outer.start_soon(lambda: server.serve(sockets=[sock]))
        while not server.started:  # noqa: ASYNC110 - uvicorn offers a flag
            await anyio.sleep(0.01)
        started = time.monotonic()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:

            async def chat(n: int) -> None:
                for m in range(messages):
                    if m:
                        await anyio.sleep(gap)  # the same spacing as the Telegram run
                    sent = time.monotonic()
                    seen_first = False
                    async with client.stream(
                        "POST", f"/v1/chats/http:{n}/messages", json={"text": f"question {m}", "stream": True}
                    ) as response:
                        async for line in response.aiter_lines():
                            if line.startswith("event: text_delta") and not seen_first:
                                first.append(time.monotonic() - sent)
                                seen_first = True
                            elif line.startswith("event: done"):
                                final.append(time.monotonic() - sent)

            async with anyio.create_task_group() as tasks:
                for n in range(chats):
                    tasks.start_soon(chat, n)
        elapsed = time.monotonic() - started
        server.should_exit = True
    return {"first": first, "final": final, "rate": chats * messages / elapsed}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--streaming", choices=["off", "edit"], default="off")
    parser.add_argument("--gap", type=float, default=1.0, help="seconds between a chat's messages")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tg = await telegram_run(Path(tmp) / "tg", args.chats, args.messages, args.streaming, args.gap)
        web = await http_run(Path(tmp) / "http", args.chats, args.messages, args.gap)
    print(
        f"{args.chats} chats x {args.messages} messages, instant model, telegram streaming={args.streaming}"
    )
    print(f"{'':10} {'first p50':>10} {'first p99':>10} {'final p50':>10} {'final p99':>10} {'msg/s':>8}")
    for name, row in (("telegram", tg), ("http", web)):
        print(
            f"{name:10} {_pct(row['first'], 0.5):9.1f}ms {_pct(row['first'], 0.99):9.1f}ms "
            f"{_pct(row['final'], 0.5):9.1f}ms {_pct(row['final'], 0.99):9.1f}ms {row['rate']:8.1f}"
        )
    ratio = statistics.median(tg["final"]) / statistics.median(web["final"])
    print(f"telegram final p50 / http final p50 = {ratio:.2f}")


if __name__ == "__main__":
    anyio.run(main)
