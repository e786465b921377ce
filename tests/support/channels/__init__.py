"""Channel drivers for the conformance scenarios: one per platform, behind :class:`ChannelDriver`.

Adding a platform: write ``<platform>_driver.py`` (a class satisfying
:class:`~tests.support.channels.base.ChannelDriver` over the platform's local server) and add it to
:data:`DRIVERS`; every scenario of ``tests/hosts/channels/test_conformance.py`` then runs on it.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.support.channels.base import ChannelDriver
from tests.support.channels.discord_driver import DiscordDriver
from tests.support.channels.feishu_driver import FeishuDriver
from tests.support.channels.qq_driver import QQDriver
from tests.support.channels.slack_driver import SlackDriver, SlackHttpDriver
from tests.support.channels.telegram_driver import TelegramDriver

__all__ = ["DRIVERS"]

DRIVERS: dict[str, Callable[[], ChannelDriver]] = {
    "telegram": TelegramDriver,
    "slack": SlackDriver,
    "slack-http": SlackHttpDriver,
    "discord": DiscordDriver,
    "qq": QQDriver,
    "feishu": FeishuDriver,
}
"""Every driver by channel name (each made fresh for its module-wide project)."""
