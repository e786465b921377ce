"""Running the Telegram channel against the local Bot API server, with a scripted model."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from shipagent import ShipAgent
from shipagent.hosts.channels import ChannelHost, channels_from_config
from shipagent.hosts.channels.telegram import TelegramChannel
from tests.support.core import make_project
from tests.support.telegram_server import TOKEN, FakeTelegram


def ship_json(fake: FakeTelegram, **telegram: Any) -> dict[str, Any]:
    """A ship.json with Telegram on, pointed at ``fake`` (``telegram``: more channel keys)."""
    return {
        "channels": {
            "telegram": {
                "enabled": True,
                "botToken": TOKEN,
                "apiRoot": fake.url,
                "dmPolicy": "open",
                **telegram,
            }
        }
    }


@asynccontextmanager
async def running(
    root: Path,
    fake: FakeTelegram,
    model: Any,
    *,
    edit_interval: float = 0.05,
    poll: float = 1.0,
    **telegram: Any,
) -> AsyncIterator[tuple[ShipAgent, TelegramChannel]]:
    """The agent of a project at ``root`` on Telegram (polls of ``poll`` seconds) for the block."""
    if not (root / "ship.json").exists():
        make_project(root, ship_json(fake, **telegram))
    agent = ShipAgent.from_project(root, model=model)
    channels = channels_from_config(
        agent, agent.config.channels, poll_timeout=poll, watchdog_margin=1.0, edit_interval=edit_interval
    )
    async with agent, ChannelHost(agent, channels) as host:
        channel = host.channels[0]
        assert isinstance(channel, TelegramChannel)
        yield agent, channel
