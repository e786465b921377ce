"""The channel host: starts every channel enabled in ship.json beside the agent, and reports health.

``async with ChannelHost(agent):`` starts the channels (each returns once it is polling) and stops
them on exit, answering what was already accepted first. A host process (``shipagent channels
run``; ``shipagent serve``, beside the HTTP API) keeps the block open for as long as it runs and reads
:attr:`ChannelHost.health` for its health endpoint.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from pydantic.alias_generators import to_camel

from ...errors import ConfigError
from ._types import Channel, ChannelHealth

if TYPE_CHECKING:
    from ..._channels_config import ChannelsConfig
    from ...agent._agent import ShipAgent

__all__ = ["ChannelHost", "channels_from_config", "platform_library", "require_platform_libraries"]

_EXTRAS: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "telegram": ("Telegram", (("telegram", "python-telegram-bot"),)),
    "slack": ("Slack", (("slack_sdk", "slack-sdk"), ("aiohttp", "aiohttp"))),
    "discord": ("Discord", (("discord", "discord.py"),)),
    "feishu": ("Feishu", (("lark_oapi", "lark-oapi"),)),
    "qq": ("QQ", (("websockets", "websockets"),)),
}
"""Each platform's name and the libraries (module, distribution) of its extra
(``pip install 'shipagent[<platform>]'``): a core install has none of them."""


def _missing(platform: str, library: str, why: str) -> ConfigError:
    name = _EXTRAS[platform][0]
    return ConfigError(
        f"channels.{platform}.enabled is true, but the {name} channel needs {library}, which {why}: "
        f"pip install 'shipagent[{platform}]'",
        path=f"channels.{platform}.enabled",
    )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None  # found, not imported (no slow import)
    except (ImportError, ValueError):  # a parent package that fails, or a module without a spec
        return False


def _failed_module(exc: ImportError) -> str:
    """The module that could not be found (``exc.name``), else the one whose import raised."""
    if exc.name:
        return exc.name
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return str(tb.tb_frame.f_globals.get("__name__", "")) if tb is not None else ""


@contextmanager
def platform_library(platform: str) -> Iterator[None]:
    """Run the block that imports ``platform``'s library (its adapter, its check), turning a missing
    or broken install of its extra into a :class:`ConfigError` that names the platform and the
    ``pip install`` line, instead of a ``ModuleNotFoundError`` traceback.

    An ``ImportError`` of shipagent's own modules is a bug, not a missing extra, and goes on as is.
    """
    for module, library in _EXTRAS[platform][1]:
        if not _installed(module):
            raise _missing(platform, library, "is not installed")
    try:
        yield
    except ImportError as exc:
        top = _failed_module(exc).partition(".")[0]
        if top in ("", "shipagent"):
            raise
        libraries = dict(_EXTRAS[platform][1])
        library = libraries.get(top) or " and ".join(libraries.values())
        raise _missing(platform, library, "could not be imported") from exc


def require_platform_libraries(config: ChannelsConfig) -> None:
    """Check, without importing them, that every enabled platform's library is installed.

    For a host that starts its channels later, inside a server's startup, where an error is a
    traceback: it says the missing extra first, in one line (:class:`ConfigError`).
    """
    for platform in _EXTRAS:
        if getattr(config, platform).enabled:
            with platform_library(platform):
                pass


def channels_from_config(
    agent: ShipAgent,
    config: ChannelsConfig,
    *,
    discord: dict[str, Any] | None = None,
    feishu: dict[str, Any] | None = None,
    **telegram: Any,
) -> list[Channel]:
    """The channels ``config`` enables, built for ``agent`` (``telegram``, ``discord``, ``feishu``:
    adapter options).

    Raises:
        ConfigError: an enabled platform's extra is not installed (the message says which
            ``pip install 'shipagent[…]'``).
    """
    found: list[Channel] = []
    if config.telegram.enabled:
        with platform_library("telegram"):
            from .telegram import TelegramChannel  # PTB loads only when Telegram is on

        state = agent.paths.ship_dir / "channels"
        found.append(TelegramChannel(agent, config.telegram, state_dir=state, **telegram))
    if config.slack.enabled:
        with platform_library("slack"):
            from .slack import SlackChannel  # slack-sdk loads only when Slack is on

        found.append(SlackChannel(agent, config.slack, state_dir=agent.paths.ship_dir / "channels"))
    if config.discord.enabled:
        with platform_library("discord"):
            from .discord import DiscordChannel  # discord.py loads only when Discord is on

        state = agent.paths.ship_dir / "channels"
        found.append(DiscordChannel(agent, config.discord, state_dir=state, **(discord or {})))
    if config.feishu.enabled:
        with platform_library("feishu"):
            from .feishu import FeishuChannel  # lark-oapi loads only when Feishu is on

        state = agent.paths.ship_dir / "channels"
        found.append(FeishuChannel(agent, config.feishu, state_dir=state, **(feishu or {})))
    if config.qq.enabled:
        with platform_library("qq"):
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
