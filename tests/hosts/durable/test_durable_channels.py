"""Channels in durable mode: the receiving process enqueues, a worker process runs the turn and replies.

The receiving side is the channel host in this process with the durable executor in client mode
(``serve --no-worker``'s role): it polls the local Telegram server, accepts, enqueues and marks
the message done. The answering side is a ``shipagent worker`` subprocess with the scripted model of
``tests.support.durable_worker``: it sends the typing indicator and the answer through the same
Telegram server with its own HTTP client, built from ship.json.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from shipagent import ShipAgent
from shipagent.hosts.channels import ChannelHost, channels_from_config
from shipagent.hosts.channels.telegram import TelegramChannel
from tests.support.durable import SHIPAGENT, Worker, durable_project, read_jsonl, wait_for, worker_env
from tests.support.telegram_server import TOKEN, FakeTelegram, telegram_server

pytestmark = pytest.mark.anyio


def channel_project(root: Path, database: str, fake: FakeTelegram) -> Path:
    """A durable project with Telegram on, pointed at ``fake``."""
    durable_project(root, database)
    ship = json.loads((root / "ship.json").read_text(encoding="utf-8"))
    ship["channels"] = {
        "telegram": {"enabled": True, "botToken": TOKEN, "apiRoot": fake.url, "dmPolicy": "open"}
    }
    (root / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    return root


@asynccontextmanager
async def receiving(project: Path) -> AsyncIterator[TelegramChannel]:
    """The channel host of ``project`` in this process, enqueuing only (no worker here)."""
    agent = ShipAgent.from_project(project)
    agent.turn_executor_options = {"worker": False}
    channels = channels_from_config(agent, agent.config.channels, poll_timeout=1.0, watchdog_margin=1.0)
    async with agent, ChannelHost(agent, channels) as host:
        channel = host.channels[0]
        assert isinstance(channel, TelegramChannel)
        yield channel


def start_channels(project: Path, log: Path) -> subprocess.Popen[bytes]:
    """``shipagent channels run`` on ``project`` (a worker itself: no ``--no-worker``), output to ``log``."""
    command = [SHIPAGENT, "channels", "run", "-C", str(project)]
    command += ["--model-factory", "tests.support.durable_worker:scripted_model"]
    with open(log, "wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=worker_env(project))


async def started(worker: Worker) -> Worker:
    return await anyio.to_thread.run_sync(worker.wait_ready)


def seen_rows(project: Path) -> list[dict[str, object]]:
    return read_jsonl(project / ".ship" / "channels" / "telegram-seen.jsonl")


def done_count(project: Path, message_id: int) -> int:
    return sum(1 for row in seen_rows(project) if row.get("message") == str(message_id) and row.get("done"))


def texts(fake: FakeTelegram) -> list[str]:
    return [m.text for m in fake.shown()]


async def test_the_receiving_process_enqueues_and_a_worker_process_replies(
    tmp_path: Path, database: str
) -> None:
    async with telegram_server() as fake:
        project = channel_project(tmp_path / "p", database, fake)
        signals = project / "signals"
        worker = await started(Worker(project, "worker-tg"))
        try:
            async with receiving(project):
                update = fake.user_message("block:dm1")
                message_id = update["message"]["message_id"]
                await anyio.to_thread.run_sync(wait_for, signals / "running-dm1")  # the worker runs it
                await fake.wait_for(lambda: done_count(project, message_id) == 1)  # queued: done here
            # the receiving process is gone before the turn can finish: whatever is sent now is the worker's
            assert fake.called("sendMessage") == []
            (signals / "release-dm1").touch()
            await fake.wait_for(lambda: texts(fake) == ["finished dm1"], within=60)
            assert fake.called("sendChatAction"), "the worker shows the typing indicator"
            assert [r["pid"] for r in read_jsonl(signals / "requests.jsonl")] == [worker.pid] * 2
            request = f"telegram:42:{message_id}"
            await fake.wait_for(
                lambda: any(f"answered message {message_id}" in line for line in worker.lines)
            )
            await fake.wait_for(lambda: any(f"request={request} outcome=ok" in line for line in worker.lines))
        finally:
            worker.stop()
        assert texts(fake) == ["finished dm1"]
        assert len(fake.called("sendMessage")) == 1


async def test_the_same_message_twice_is_enqueued_once_and_answered_once(tmp_path: Path) -> None:
    async with telegram_server() as fake:
        project = channel_project(tmp_path / "p", "sqlite", fake)
        worker = await started(Worker(project, "worker-twice"))
        try:
            async with receiving(project):
                fake.user_message("hello", message_id=5)
                await fake.wait_for(lambda: texts(fake) == ["echo: hello"], within=60)
                fake.user_message("hello", message_id=5)  # redelivered: the dedupe record knows it
                fake.user_message("next", message_id=6)
                await fake.wait_for(lambda: texts(fake) == ["echo: hello", "echo: next"], within=60)
            # As if the process had been killed after enqueuing message 5 and before marking it
            # done: its record is open again, so the next start enqueues it again (same workflow id).
            seen = project / ".ship" / "channels" / "telegram-seen.jsonl"
            rows = [r for r in seen_rows(project) if not (r.get("message") == "5" and r.get("done"))]
            seen.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
            async with receiving(project):
                await fake.wait_for(lambda: done_count(project, 5) == 1)  # enqueued again, marked done
                fake.user_message("last", message_id=7)  # same chat, so queued behind any second turn
                await fake.wait_for(lambda: "echo: last" in texts(fake), within=60)
                fake.user_message("/new", message_id=8)  # the receiving process clears the context …
                await fake.wait_for(lambda: any("afresh" in t for t in texts(fake)), within=60)
                fake.user_message("fresh", message_id=9)  # … and the worker's next turn starts empty
                await fake.wait_for(lambda: "echo: fresh" in texts(fake), within=60)
                fake.user_message("sendfail:f1", message_id=10)  # chat_send, then the model fails
                await fake.wait_for(lambda: texts(fake)[-1].startswith("⚠️"), within=60)
                assert texts(fake)[-2] == "sent f1"  # said by the worker as the model said it
        finally:
            worker.stop()
        assert [t for t in texts(fake) if t.startswith("echo")] == [
            "echo: hello",
            "echo: next",
            "echo: last",
            "echo: fresh",
        ]
        requests = read_jsonl(project / "signals" / "requests.jsonl")
        assert [r["text"] for r in requests][:4] == ["hello", "next", "last", "fresh"]  # once per message
        assert requests[2]["said"][:2] == ["user: hello", "assistant: echo: hello"]
        assert requests[3]["said"] == ["user: fresh"]


async def test_a_worker_killed_mid_turn_is_replaced_and_the_answer_is_sent_once(tmp_path: Path) -> None:
    async with telegram_server() as fake:
        project = channel_project(tmp_path / "p", "sqlite", fake)
        signals = project / "signals"
        first = await started(Worker(project, "worker-k"))
        second: Worker | None = None
        try:
            async with receiving(project):
                fake.user_message("block:k1")
                await anyio.to_thread.run_sync(wait_for, signals / "running-k1")
                first.kill9()  # in the middle of the turn's tool call
                (signals / "running-k1").unlink()
                (signals / "release-k1").touch()
                second = await started(Worker(project, "worker-k"))  # resumes the turn at start
                await fake.wait_for(lambda: texts(fake) == ["finished k1"], within=60)
            await fake.wait_for(lambda: any("answered message" in line for line in second.lines))
        finally:
            first.stop()
            if second is not None:
                second.stop()
        assert texts(fake) == ["finished k1"]
        assert len(fake.called("sendMessage")) == 1
        effects = read_jsonl(signals / "effects.jsonl")
        assert [e["tag"] for e in effects] == ["k1"]  # the tool finished once, in the second worker
        assert second is not None and effects[0]["pid"] == second.pid


async def test_channels_run_is_its_own_worker_a_failed_delivery_never_reruns_the_turn_and_nothing_asks(
    tmp_path: Path,
) -> None:
    """``shipagent channels run`` without ``--no-worker``: one process receives, runs and replies.

    A send refused for a passing reason (429) is tried again; one refused for good (403) is given
    up and logged, and the turn is not run again for it: the model was asked once per message. A
    shell command that needs approval is refused at once (a queued turn cannot show buttons).
    """
    async with telegram_server() as fake:
        project = channel_project(tmp_path / "p", "sqlite", fake)
        signals = project / "signals"
        log = tmp_path / "channels.log"
        process = start_channels(project, log)
        try:
            await fake.wait_for(lambda: fake.called("getUpdates"), within=90)
            fake.fail_next("sendMessage", 429, "Too Many Requests: retry after 1", retry_after=1)
            fake.user_message("hello")
            await fake.wait_for(lambda: texts(fake) == ["echo: hello"], within=60)
            assert len(fake.called("sendMessage")) == 2  # refused once, sent once
            fake.fail_next("sendMessage", 403, "Forbidden: bot was blocked by the user")
            gone = fake.user_message("gone")["message"]["message_id"]
            await fake.wait_for(lambda: "could not deliver" in log.read_text(encoding="utf-8"), within=60)
            fake.user_message("after")
            await fake.wait_for(lambda: texts(fake) == ["echo: hello", "echo: after"], within=60)
            fake.user_message("shell:touch made-by-shell")  # ask mode: no buttons here, so refused
            await fake.wait_for(lambda: len(texts(fake)) == 3, within=60)
            assert "needs approval" in texts(fake)[2]
            assert not (project / "made-by-shell").exists()
            assert not any(m.buttons for m in fake.messages)
        finally:
            process.send_signal(signal.SIGTERM)
            await anyio.to_thread.run_sync(lambda: process.wait(60))
        said = [r["text"] for r in read_jsonl(signals / "requests.jsonl")]
        assert said == ["hello", "gone", "after", "shell:touch made-by-shell", "shell:touch made-by-shell"]
        assert {r["pid"] for r in read_jsonl(signals / "requests.jsonl")} == {process.pid}
        output = log.read_text(encoding="utf-8")
        assert output.count("answered message") == 3
        assert f"request=telegram:42:{gone} outcome=ok" in output  # the undelivered turn still finished
