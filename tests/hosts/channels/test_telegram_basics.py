"""The Telegram channel end to end: PTB talks HTTP to a local Bot API server; the model is scripted."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.hosts.channels._support import running
from tests.support.stream import StreamScript
from tests.support.telegram_server import TOKEN, telegram_server

pytestmark = pytest.mark.anyio


async def test_dm_round_trip_registers_commands_and_never_logs_the_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    script = StreamScript()
    async with telegram_server() as fake, running(tmp_path / "p", fake, script.model) as (agent, channel):
        fake.user_message("hello there")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == "echo: hello there")
        assert channel.health.connected and channel.health.last_inbound_at is not None
        assert fake.called("deleteWebhook") and fake.called("setMyCommands")
        names = {c["command"] for c in fake.called("setMyCommands")[0].params["commands"]}
        assert names == {"start", "help", "new", "status", "stop", "pin", "unpin"}
    assert len(fake.shown()) == 1  # one message, edited into the answer: never a duplicate
    assert agent.paths.transcript("telegram:chat:42").exists()
    assert any("getUpdates" in r.getMessage() for r in caplog.records)  # the HTTP log was there…
    assert TOKEN not in caplog.text  # …without the token
    stored = [p for p in (tmp_path / "p" / ".ship").rglob("*") if p.is_file()]
    assert stored and not [p for p in stored if TOKEN.encode() in p.read_bytes()]  # nor in any store


async def test_the_host_starts_what_ship_json_enables_and_reports_its_health(tmp_path: Path) -> None:
    from shipagent import ShipAgent
    from shipagent.hosts.channels import ChannelHost
    from tests.hosts.channels._support import ship_json
    from tests.support.core import make_project

    async with telegram_server() as fake:
        root = make_project(tmp_path / "on", ship_json(fake))
        agent = ShipAgent.from_project(root, model=StreamScript().model)
        async with agent, ChannelHost(agent) as host:
            await fake.wait_for(lambda: host.health["telegram"].connected)
            health = host.health["telegram"]
            assert health.details["bot"] == "@ship_bot" and health.backlog == 0 and not health.stopped
        assert not host.health["telegram"].connected  # stopped with the block
    off = ShipAgent.from_project(make_project(tmp_path / "off", {}), model=StreamScript().model)
    assert ChannelHost(off).channels == []


async def test_the_model_is_told_it_is_on_telegram_in_telegram_chats_only(tmp_path: Path) -> None:
    script = StreamScript()
    async with telegram_server() as fake, running(tmp_path / "p", fake, script.model) as (agent, _):
        fake.user_message("hello")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == "echo: hello")
        told = script.requests[-1][-1].instructions or ""  # type: ignore[union-attr]
        assert "This chat is on Telegram" in told and "4,000 characters" in told
        await agent.run("api:other", "hi")  # another host's chat of the same agent
        assert "Telegram" not in (script.requests[-1][-1].instructions or "")  # type: ignore[union-attr]
    assert not agent.instruction_sources or all(
        getattr(s, "__name__", "") != "_where_it_is" for s in agent.instruction_sources
    )  # removed when the channel stopped
