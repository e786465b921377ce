"""The conformance project of one driver: its server, the agent on the channel, the scripted model.

Scenarios share one running project per driver (starting a platform's client is the slow part);
they stay independent by writing in their own direct chat, or by counting only the messages that
came after they wrote.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipagent import ShipAgent
from shipagent.hosts.channels import Channel, ChannelHost
from tests.support.channels.base import KNOWN, ChannelDriver, Place, Shown
from tests.support.channels.model import ScenarioModel
from tests.support.core import make_project

__all__ = ["Bot", "conformance_bot"]


@dataclass(slots=True)
class Bot:
    """A running conformance project and what the scenarios ask of it."""

    driver: ChannelDriver
    agent: ShipAgent
    channel: Channel
    model: ScenarioModel
    root: Path

    async def until(self, condition: Callable[[], Any], within: float = 20.0) -> None:
        await self.driver.wait_for(condition, within)

    async def answered(self, token: str) -> None:
        """Wait until the model saw ``token`` and the channel has nothing left to answer."""
        await self.until(lambda: self.model.saw(token) and self.channel.health.backlog == 0)

    def after(self, place: Place, before: int, *, with_deleted: bool = False) -> list[Shown]:
        """The bot's messages at ``place`` after the first ``before``."""
        return self.driver.shown(place, with_deleted=with_deleted)[before:]

    def transcript(self, place: Place) -> str:
        """The stored transcript of the chat at ``place`` (``""``: there is none)."""
        path = self.agent.paths.transcript(self.driver.chat_key(place))
        return path.read_text(encoding="utf-8") if path.exists() else ""


@asynccontextmanager
async def conformance_bot(driver: ChannelDriver, root: Path) -> AsyncIterator[Bot]:
    """Start ``driver``'s server and a project at ``root`` on its channel, for the block."""
    async with driver.serve():
        make_project(root, driver.ship_json(KNOWN))
        model = ScenarioModel()
        agent = ShipAgent.from_project(root, model=model.model)
        async with agent, ChannelHost(agent, driver.channels(agent)) as host:
            (channel,) = host.channels
            yield Bot(driver, agent, channel, model, root)
