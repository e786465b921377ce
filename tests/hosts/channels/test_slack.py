"""The Slack channel end to end: slack-sdk talks HTTP and Socket Mode to a local Slack server.

The Web API client and the Socket Mode client are slack-sdk's own, pointed at the server with
``apiRoot``; the server hands out its own ``ws://`` URL, sends envelopes and records the acks.
The model is scripted.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from shipagent import ShipAgent
from shipagent.hosts.channels import ChannelHost
from shipagent.hosts.channels.slack import SlackChannel
from tests.support.core import last_user_text, make_project
from tests.support.slack_server import APP_TOKEN, BOT_TOKEN, TEAM, FakeSlack, slack_server
from tests.support.stream import StreamScript

pytestmark = pytest.mark.anyio


def ship_json(fake: FakeSlack, **slack: Any) -> dict[str, Any]:
    """A ship.json with Slack on, pointed at ``fake`` (``slack``: more channel keys)."""
    return {
        "channels": {
            "slack": {
                "enabled": True,
                "botToken": BOT_TOKEN,
                "appToken": APP_TOKEN,
                "apiRoot": f"{fake.url}/api",
                "dmPolicy": "open",
                **slack,
            }
        }
    }


@asynccontextmanager
async def running(
    root: Path, fake: FakeSlack, model: Any, *, edit_interval: float = 0.05, **slack: Any
) -> AsyncIterator[tuple[ShipAgent, SlackChannel]]:
    """The agent of a project at ``root`` on Slack for the block."""
    make_project(root, ship_json(fake, **slack))
    agent = ShipAgent.from_project(root, model=model)
    channel = SlackChannel(
        agent,
        agent.config.channels.slack,
        state_dir=agent.paths.ship_dir / "channels",
        edit_interval=edit_interval,
        ping_interval=1.0,
    )
    async with agent, ChannelHost(agent, [channel]):
        yield agent, channel


async def test_dm_round_trip_acks_the_envelope_and_never_logs_a_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    script = StreamScript()
    async with slack_server() as fake, running(tmp_path / "p", fake, script.model) as (agent, channel):
        envelope = fake.user_message("hello there")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == "echo: hello there")
        assert envelope.acked
        assert channel.health.connected and channel.health.details["bot"] == "@ship"
    assert len(fake.shown()) == 1  # one message, updated into the answer: never a duplicate
    assert agent.paths.transcript(f"slack:{TEAM}:D0DM").exists()
    assert [last_user_text(r) for r in script.requests] == ["hello there"]
    assert fake.called("auth.test") and fake.called("apps.connections.open")
    assert BOT_TOKEN not in caplog.text and APP_TOKEN not in caplog.text
