"""Channel overhead: turns through every platform's local protocol server against the same turns over HTTP.

For each platform (Telegram, Slack, Discord, Feishu, QQ), ``--chats`` direct chats each send
``--messages`` messages (one after another per chat, all chats at once) to one agent with an
instant streaming model, through that platform's channel talking to the local server the tests
use (``tests/support/<platform>_server.py``, driven through the conformance drivers of
``tests/support/channels``): the platform's own client library over real sockets — PTB long-polling
the Bot API, slack-sdk's Socket Mode WebSocket, discord.py's gateway, lark-oapi's long connection,
the QQ gateway. These are local servers that speak the protocols, not the platforms: the
figures are shipagent's own cost per message, not a platform's network.

Measured per message, from the moment the user's message is handed to the server (which then
delivers it to the bot as the platform would: a poll's answer, a WebSocket event): inbound → the
first visible text of the answer, and inbound → the final answer as the platform shows it (the
text a warm-up message's answer ended with), both seen through the server's record of the bot's
messages. Then the same turns over the HTTP API (``POST /v1/chats/{key}/messages`` as SSE, served
by uvicorn in this process): request → first ``text_delta`` and → ``done``. Every path runs
``--rounds`` times in a rotating order, so a busy minute of the machine falls on all of them;
CPU per message is this process's CPU time over the measured messages (the local server, the
platform's client library and the agent together, or the HTTP client and server).

``--streaming off`` (the default) sends each answer once: the like-for-like comparison with HTTP.
With ``--streaming edit`` the first text is the streamed start and "final" includes the
formatted last edit, paced as the conformance drivers build the channels (0.05 s between edits;
QQ cannot edit and always sends once).

QQ's numbers: QQ cannot edit, so its answer is one passive reply sent when the answer is done
(``streaming`` makes no difference there, and "first text" is the final answer). Its channel is
paced like the others, by the ``edit_interval`` its conformance driver passes (0.05 s between two
sends in one chat; the default is 1 s), so a small ``--gap`` does not add a pacing the others do
not have. The answer here fits one reply, so QQ's limit of five replies to one message never
comes into it.

A chat's messages are ``--gap`` seconds apart (default 1 s: Telegram allows about one message per
second per chat, and the channels pace sends per chat), in every run, and the chats start
staggered across the first gap, so messages arrive evenly (not ``--chats`` at once every
second); msg/s is bounded by the gap and the latencies are what compare.

Run: ``python bench/channels.py [--chats 10] [--messages 10] [--rounds 3] [--streaming off|edit]
[--gap 1] [--platforms telegram,slack,discord,feishu,qq]`` (prints a markdown table).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import socket
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
from shipagent.hosts.channels import ChannelHost
from shipagent.hosts.serve._app import create_app
from tests.support.channels import DRIVERS
from tests.support.channels.base import ChannelDriver, Person, Place

ANSWER = "The answer is **forty-two**, as computed."
PLATFORMS = ["telegram", "slack", "discord", "feishu", "qq"]


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


def _person(n: int) -> Person:
    """The ``n``-th chat's user (numbers past the conformance cast, so ids never collide)."""
    return Person(f"bench{n}", f"Bench {n}", 1000 + n)


async def _wait(driver: ChannelDriver, condition: Any) -> float:
    """Wait until ``condition()`` holds; the moment it was seen (``time.monotonic``)."""
    await driver.wait_for(condition, within=120)
    return time.monotonic()


async def platform_run(
    name: str, root: Path, chats: int, messages: int, streaming: str, gap: float
) -> dict[str, Any]:
    driver = DRIVERS[name]()
    warm = _person(chats)
    people = [_person(n) for n in range(chats)]
    first: list[float] = []
    final: list[float] = []
    async with driver.serve():
        ship = driver.ship_json([*people, warm])
        config = ship["channels"][name]
        if "edits" not in driver.lacks:
            config["streaming"] = streaming
        _project(root, ship)
        agent = ShipAgent.from_project(root, model=_model())
        async with agent, ChannelHost(agent, driver.channels(agent)) as host:
            await driver.wait_for(lambda: host.health[name].connected, within=60)
            # warm-up: connections open, and the final answer as this platform shows it
            here = Place.dm(warm)
            driver.say(here, warm, "warm up")
            await driver.wait_for(lambda: driver.shown(here) and host.health[name].backlog == 0, within=60)
            done_text = driver.shown(here)[-1].text
            started, cpu = time.monotonic(), time.process_time()

            async def chat(n: int) -> None:
                where, who = Place.dm(people[n]), people[n]
                await anyio.sleep(gap * n / chats)  # staggered: messages arrive evenly, not in bursts
                for m in range(messages):
                    if m:
                        await anyio.sleep(gap)  # the platforms allow about one message a second per chat
                    before = len(driver.shown(where))
                    sent = time.monotonic()
                    driver.say(where, who, f"question {m}")
                    seen = await _wait(
                        driver, lambda b=before: any(s.text.strip() for s in driver.shown(where)[b:])
                    )
                    first.append(seen - sent)
                    shown = await _wait(
                        driver,
                        lambda b=before: (
                            len(driver.shown(where)) > b and driver.shown(where)[-1].text == done_text
                        ),
                    )
                    final.append(shown - sent)

            async with anyio.create_task_group() as tasks:
                for n in range(chats):
                    tasks.start_soon(chat, n)
            elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
    return {"first": first, "final": final, "elapsed": elapsed, "cpu": cpu, "count": chats * messages}


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
        started, cpu = time.monotonic(), time.process_time()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:

            async def chat(n: int) -> None:
                await anyio.sleep(gap * n / chats)  # staggered as in the channel runs
                for m in range(messages):
                    if m:
                        await anyio.sleep(gap)  # the same spacing as the channel runs
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
        elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
        server.should_exit = True
    return {"first": first, "final": final, "elapsed": elapsed, "cpu": cpu, "count": chats * messages}


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--chats", type=int, default=10)
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="runs of every path, in a rotating order")
    parser.add_argument("--streaming", choices=["off", "edit"], default="off")
    parser.add_argument("--gap", type=float, default=1.0, help="seconds between a chat's messages")
    parser.add_argument("--platforms", default=",".join(PLATFORMS), help="comma-separated")
    args = parser.parse_args()
    paths: list[str] = []
    for name in [p.strip() for p in args.platforms.split(",") if p.strip()]:
        requires = DRIVERS[name]().requires
        if importlib.util.find_spec(requires) is None:
            print(f"{name}: skipped, {requires} is not installed (pip install 'shipagent[{name}]')")
        else:
            paths.append(name)
    paths.append("http")
    totals: dict[str, dict[str, Any]] = {
        p: {"first": [], "final": [], "elapsed": 0.0, "cpu": 0.0, "count": 0} for p in paths
    }
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):  # rotated, so a machine's slow minutes fall on every path alike
            for path in paths[r % len(paths) :] + paths[: r % len(paths)]:
                print(f"round {r + 1}: {path}", file=sys.stderr)
                root = Path(tmp) / f"{path}-{r}"
                if path == "http":
                    row = await http_run(root, args.chats, args.messages, args.gap)
                else:
                    row = await platform_run(path, root, args.chats, args.messages, args.streaming, args.gap)
                total = totals[path]
                for key in ("first", "final"):
                    total[key] += row[key]
                for key in ("elapsed", "cpu", "count"):
                    total[key] += row[key]
    print(
        f"{args.chats} chats x {args.messages} messages x {args.rounds} rounds, {args.gap:g} s apart per "
        f"chat, instant model, channel streaming={args.streaming}\n"
    )
    http_final = _pct(totals["http"]["final"], 0.5)
    print(
        "| path | first text p50 | first text p99 | final p50 | final p99 | msg/s "
        "| CPU per message | final p50 vs HTTP |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for path in paths:
        row = totals[path]
        label = "HTTP API (SSE)" if path == "http" else path
        print(
            f"| {label} | {_pct(row['first'], 0.5):.1f} ms | {_pct(row['first'], 0.99):.1f} ms "
            f"| {_pct(row['final'], 0.5):.1f} ms | {_pct(row['final'], 0.99):.1f} ms "
            f"| {row['count'] / row['elapsed']:.1f} | {row['cpu'] / row['count'] * 1000:.1f} ms "
            f"| {_pct(row['final'], 0.5) / http_final:.2f}× |"
        )


if __name__ == "__main__":
    anyio.run(main)
