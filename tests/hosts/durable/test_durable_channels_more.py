"""Slack and Discord in durable mode: the receiving process enqueues, a worker process replies.

As for Telegram (``test_durable_channels``): the receiving side is the channel host in this
process with the durable executor in client mode (it takes the message from the local platform
server, enqueues the turn and marks the message done); the answering side is a ``shipagent
worker`` subprocess with the scripted model of ``tests.support.durable_worker``. The receiving
host is stopped while the turn still runs, so whatever reaches the platform afterwards was sent by
the worker through its own sender, built from ship.json: Slack's Web API with the bot token (no
Socket Mode), Discord's REST API (no gateway).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from shipagent import ShipAgent
from shipagent.hosts.channels import Channel, ChannelHost, channels_from_config
from tests.support.discord_server import DM_CHANNEL, TOKEN, discord_server
from tests.support.durable import Worker, durable_project, read_jsonl, wait_for
from tests.support.slack_server import APP_TOKEN, BOT_TOKEN, slack_server

pytestmark = pytest.mark.anyio


def with_channel(root: Path, name: str, config: dict[str, Any]) -> Path:
    """A durable project (SQLite) with channel ``name`` on, configured by ``config``."""
    durable_project(root, "sqlite")
    ship = json.loads((root / "ship.json").read_text(encoding="utf-8"))
    ship["channels"] = {name: {"enabled": True, "dmPolicy": "open", **config}}
    (root / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    return root


@asynccontextmanager
async def receiving(project: Path) -> AsyncIterator[Channel]:
    """The channel host of ``project`` in this process, enqueuing only (no worker here)."""
    agent = ShipAgent.from_project(project)
    agent.turn_executor_options = {"worker": False}
    channels = channels_from_config(agent, agent.config.channels, discord={"guild_ready_timeout": 0.1})
    async with agent, ChannelHost(agent, channels) as host:
        yield host.channels[0]


def done_count(project: Path, channel: str, message_id: str) -> int:
    rows = read_jsonl(project / ".ship" / "channels" / f"{channel}-seen.jsonl")
    return sum(1 for row in rows if row.get("message") == message_id and row.get("done"))


async def started(worker: Worker) -> Worker:
    return await anyio.to_thread.run_sync(worker.wait_ready)


async def test_a_slack_message_is_enqueued_here_and_answered_by_a_worker_process(tmp_path: Path) -> None:
    async with slack_server() as fake:
        config = {"botToken": BOT_TOKEN, "appToken": APP_TOKEN, "apiRoot": f"{fake.url}/api"}
        project = with_channel(tmp_path / "p", "slack", config)
        signals = project / "signals"
        worker = await started(Worker(project, "worker-slack"))
        try:
            async with receiving(project) as channel:
                assert channel.name == "slack"
                ts = str(fake.user_message("block:s1").payload["event"]["ts"])
                await anyio.to_thread.run_sync(wait_for, signals / "running-s1")  # the worker runs it
                await fake.wait_for(lambda: done_count(project, "slack", ts) == 1)  # queued: done here
            # the receiving process's socket is closed before the turn can finish: the answer is the worker's
            assert fake.called("chat.postMessage") == []
            (signals / "release-s1").touch()
            await fake.wait_for(lambda: [m.text for m in fake.shown()] == ["finished s1"], within=60)
            assert [r["pid"] for r in read_jsonl(signals / "requests.jsonl")] == [worker.pid] * 2
            request = f"slack:D0DM:{ts}"
            await fake.wait_for(lambda: any(f"request={request} outcome=ok" in line for line in worker.lines))
        finally:
            worker.stop()
        assert [m.text for m in fake.shown()] == ["finished s1"]
        assert len(fake.called("chat.postMessage")) == 1
        assert not any(BOT_TOKEN in line or APP_TOKEN in line for line in worker.lines)


async def test_a_discord_message_is_enqueued_here_and_answered_by_a_worker_process(tmp_path: Path) -> None:
    async with discord_server() as fake:
        project = with_channel(tmp_path / "p", "discord", {"botToken": TOKEN, "apiRoot": fake.api_root})
        signals = project / "signals"
        worker = await started(Worker(project, "worker-discord"))
        try:
            async with receiving(project) as channel:
                assert channel.name == "discord"
                message_id = fake.user_message("block:d1")["id"]
                await anyio.to_thread.run_sync(wait_for, signals / "running-d1")
                await fake.wait_for(lambda: done_count(project, "discord", str(message_id)) == 1)
            assert fake.called("POST", f"/channels/{DM_CHANNEL}/messages") == []
            identified = fake.identified
            (signals / "release-d1").touch()
            await fake.wait_for(lambda: [m.content for m in fake.shown()] == ["finished d1"], within=60)
            assert fake.called("POST", f"/channels/{DM_CHANNEL}/typing"), (
                "the worker shows the typing indicator"
            )
            assert fake.identified == identified, "the worker answers by REST, without a gateway session"
            assert [r["pid"] for r in read_jsonl(signals / "requests.jsonl")] == [worker.pid] * 2
            request = f"discord:{DM_CHANNEL}:{message_id}"
            await fake.wait_for(lambda: any(f"request={request} outcome=ok" in line for line in worker.lines))
        finally:
            worker.stop()
        assert [m.content for m in fake.shown()] == ["finished d1"]
        assert len(fake.called("POST", f"/channels/{DM_CHANNEL}/messages")) == 1
        assert not any(TOKEN in line for line in worker.lines)
