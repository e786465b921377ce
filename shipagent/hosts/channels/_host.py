"""The channel host: starts every channel enabled in ship.json beside the agent, and reports health.

``async with ChannelHost(agent):`` starts the channels (each returns once it is polling) and stops
them on exit, answering what was already accepted first. A host process (``shipagent channels
run``; ``shipagent serve``, beside the HTTP API) keeps the block open for as long as it runs and reads
:attr:`ChannelHost.health` for its health endpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from pydantic.alias_generators import to_camel

from ._types import Channel, ChannelHealth

if TYPE_CHECKING:
    from ..._channels_config import ChannelsConfig
    from ...agent._agent import ShipAgent

__all__ = ["ChannelHost", "channels_from_config"]


def channels_from_config(
    agent: ShipAgent,
    config: ChannelsConfig,
    *,
    discord: dict[str, Any] | None = None,
    feishu: dict[str, Any] | None = None,
    **telegram: Any,
) -> list[Channel]:
    """The channels ``config`` enables, built for ``agent`` (``telegram``, ``discord``, ``feishu``:
    adapter options)."""
    found: list[Channel] = []
    if config.telegram.enabled:
        from .telegram import TelegramChannel  # PTB loads only when Telegram is on

        state = agent.paths.ship_dir / "channels"
        found.append(TelegramChannel(agent, config.telegram, state_dir=state, **telegram))
    if config.slack.enabled:
        from .slack import SlackChannel  # slack-sdk loads only when Slack is on

        found.append(SlackChannel(agent, config.slack, state_dir=agent.paths.ship_dir / "channels"))
    if config.discord.enabled:
        from .discord import DiscordChannel  # discord.py loads only when Discord is on

        state = agent.paths.ship_dir / "channels"
        found.append(DiscordChannel(agent, config.discord, state_dir=state, **(discord or {})))
    if config.feishu.enabled:
        from .feishu import FeishuChannel  # lark-oapi loads only when Feishu is on

        state = agent.paths.ship_dir / "channels"
        found.append(FeishuChannel(agent, config.feishu, state_dir=state, **(feishu or {})))
    if config.qq.enabled:
        from .qq import QQChannel  # websockets loads only when QQ is on

        found.append(QQChannel(agent, config.qq, state_dir=agent.paths.ship_dir / "channels"))
    return found


class ChannelHost:
    """Runs channels for the life of an ``async with`` block.

    Args:
        agent: the agent the channels talk to (entered by the caller: ``async with agent:``).
        channels: the channels to run; by default those ship.json ``channels`` enables.
    """

    def __init__(self, agent: ShipAgent, channels: Sequence[Channel] | None = None) -> None:
        self.agent = agent
        self.channels = (
            list(channels) if channels is not None else channels_from_config(agent, agent.config.channels)
        )
        self._started: list[Channel] = []

    @property
    def health(self) -> dict[str, ChannelHealth]:
        """Each channel's health by name (connected, last inbound, last error, backlog, restarts)."""
        return {channel.name: channel.health for channel in self.channels}

    def health_json(self) -> dict[str, dict[str, Any]]:
        """:attr:`health` as ``/healthz`` shows it: every field camelCased, ``details`` left out."""
        return {
            name: {to_camel(f.name): getattr(h, f.name) for f in fields(h) if f.name != "details"}
            for name, h in self.health.items()
        }

    async def __aenter__(self) -> Self:
        try:
            for channel in self.channels:
                await channel.start()
                self._started.append(channel)
        except BaseException:
            await self._stop_all()
            raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stop_all()

    async def _stop_all(self) -> None:
        while self._started:
            await self._started.pop().stop()
