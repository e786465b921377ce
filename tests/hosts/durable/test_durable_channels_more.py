"""Slack, Discord and Feishu in durable mode: the receiving process enqueues, a worker process replies.

As for Telegram (``test_durable_channels``): the receiving side is the channel host in this
process with the durable executor in client mode (it takes the message from the local platform
server, enqueues the turn and marks the message done); the answering side is a ``shipagent
worker`` subprocess with the scripted model of ``tests.support.durable_worker``. The receiving
host is stopped while the turn still runs, so whatever reaches the platform afterwards was sent by
the worker through its own sender, built from ship.json: Slack's Web API with the bot token (no
Socket Mode), Discord's REST API (no gateway), Feishu's REST API (no long connection).
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
from shipagent.config import parse_config
from shipagent.hosts.channels import (
    Attachment,
    Button,
    ButtonPress,
    Channel,
    ChannelHost,
    InboundMessage,
    PermanentSendError,
    channels_from_config,
)
from shipagent.hosts.channels.discord._sender import DiscordSender
from shipagent.hosts.channels.slack._sender import SlackSender
from shipagent.hosts.durable._channel_turn import _tell_where
from tests.support.discord_server import DM_CHANNEL, TOKEN, discord_server
from tests.support.durable import Worker, durable_project, read_jsonl, wait_for
from tests.support.feishu_server import APP_ID, APP_SECRET, feishu_server
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


async def test_a_feishu_message_is_enqueued_here_and_answered_by_a_worker_process(tmp_path: Path) -> None:
    async with feishu_server() as fake:
        config = {"appId": APP_ID, "appSecret": APP_SECRET, "domain": fake.url}
        project = with_channel(tmp_path / "p", "feishu", config)
        signals = project / "signals"
        worker = await started(Worker(project, "worker-feishu"))
        try:
            async with receiving(project) as channel:
                assert channel.name == "feishu"
                message_id = fake.user_message("block:f1")["event"]["message"]["message_id"]
                await anyio.to_thread.run_sync(wait_for, signals / "running-f1")
                await fake.wait_for(lambda: done_count(project, "feishu", message_id) == 1)
            assert fake.called("POST", "/im/v1/messages") == []  # the receiving side sent nothing
            (signals / "release-f1").touch()
            await fake.wait_for(lambda: [m.text for m in fake.shown()] == ["finished f1"], within=60)
            assert [r["pid"] for r in read_jsonl(signals / "requests.jsonl")] == [worker.pid] * 2
            await fake.wait_for(lambda: any(f"{message_id} outcome=ok" in line for line in worker.lines))
        finally:
            worker.stop()
        assert [m.text for m in fake.shown()] == ["finished f1"]
        assert not any(APP_SECRET in line for line in worker.lines)


CHAT = {"chat_key": "x", "message_id": "1", "sender_id": "7", "sender_name": "Ada", "text": "hi"}


async def test_a_worker_sender_refuses_what_only_the_receiving_process_can_do(tmp_path: Path) -> None:
    """Buttons (their presses go to the receiving process), downloads and press answers are refused
    by a worker's sender before anything reaches the platform; plain sends go out."""
    press = ButtonPress("slack", "slack:T:D0DM", "D0DM", "p1", "U7", "Ada", "yes")
    buttons = (Button("Approve", "yes"),)
    async with slack_server() as fake:
        config = parse_config({"channels": {"slack": {"botToken": BOT_TOKEN, "apiRoot": f"{fake.url}/api"}}})
        async with SlackSender(config.channels.slack) as outbound:
            assert not outbound.capabilities.buttons
            chat = InboundMessage(channel="slack", chat_id="D0DM", **CHAT)
            with pytest.raises(PermanentSendError, match="receives"):
                await outbound.send(chat, "approve?", formatted=True, buttons=buttons)
            with pytest.raises(PermanentSendError, match="receives"):
                await outbound.download(Attachment("F1", "document"), tmp_path / "f")
            with pytest.raises(PermanentSendError, match="receives"):
                await outbound.acknowledge(press, "done")
            assert fake.calls == []
            sent = await outbound.send(chat, "plain", formatted=True)
        assert [(m.ts, m.text) for m in fake.shown()] == [(sent.message_id, "plain")]
    async with discord_server() as discord_fake:
        found = parse_config({"channels": {"discord": {"botToken": TOKEN, "apiRoot": discord_fake.api_root}}})
        async with DiscordSender(found.channels.discord) as discord_outbound:
            assert not discord_outbound.capabilities.buttons
            chat = InboundMessage(channel="discord", chat_id=str(DM_CHANNEL), **CHAT)
            with pytest.raises(PermanentSendError, match="receives"):
                await discord_outbound.send(chat, "approve?", formatted=True, buttons=buttons)
            with pytest.raises(PermanentSendError, match="receives"):
                await discord_outbound.download(Attachment("1-2-3", "document"), tmp_path / "f")
            with pytest.raises(PermanentSendError, match="receives"):
                await discord_outbound.acknowledge(press, "done")
            assert discord_fake.called("POST") == []
            await discord_outbound.send(chat, "plain", formatted=True)
        assert [m.content for m in discord_fake.shown()] == ["plain"]
    assert not (tmp_path / "f").exists()


async def test_a_worker_without_the_bot_token_says_which_key_is_missing() -> None:
    with pytest.raises(PermanentSendError, match=r"channels\.slack\.botToken"):
        SlackSender(parse_config({}).channels.slack)
    with pytest.raises(PermanentSendError, match=r"channels\.discord\.botToken"):
        DiscordSender(parse_config({}).channels.discord)


@pytest.mark.parametrize("name", ["slack", "discord"])
def test_the_worker_tells_the_model_which_platform_once(tmp_path: Path, name: str) -> None:
    """The worker adds the platform's paragraph once, only for that platform's chats, and not when
    the channel itself runs in the process (its own paragraph is there already)."""
    project = with_channel(
        tmp_path / "p",
        name,
        {"botToken": BOT_TOKEN, "appToken": APP_TOKEN} if name == "slack" else {"botToken": TOKEN},
    )
    agent = ShipAgent.from_project(project)
    before = list(agent.instruction_sources)
    _tell_where(agent, name)
    _tell_where(agent, name)
    added = [s for s in agent.instruction_sources if s not in before]
    assert len(added) == 1
    assert f"This chat is on {name.capitalize()}" in added[0].text
    assert added[0].channel == name
    other = ShipAgent.from_project(project)
    channel = channels_from_config(other, other.config.channels)[0]
    other.instruction_sources.append(channel._where_it_is)  # as the started channel does
    count = len(other.instruction_sources)
    _tell_where(other, name)
    assert len(other.instruction_sources) == count
