"""``shipagent check`` for channels: does each enabled platform accept its credentials, and who may
talk to the bot.

Each platform's ``_check`` module has only its platform call (who the bot is, asked with the
configured credentials, ``ValueError`` saying why not, never a secret); the line printed, the
access summary and the exit on a refusal are the same for all of them and live here. A platform's
SDK is imported only when its channel is enabled.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import anyio
import anyio.to_thread
import typer
from rich.markup import escape

from ...errors import ConfigError
from ._host import platform_library

if TYPE_CHECKING:
    from ...config import ShipConfig
    from ._build import AccessKeys, GroupKeys

__all__ = ["access_line", "channels_check_hook", "report"]


class _Printer(Protocol):
    def print(self, *objects: object, highlight: bool = ...) -> None: ...


def access_line(
    config: AccessKeys,
    groups: GroupKeys,
    *,
    noun: str = "group",
    anywhere: str = "",
    mention: str | None = "mention needed",
) -> str:
    """The access rules in one line: ``dmPolicy`` and ``allowFrom``, the group section's policy
    (``noun`` names its chats; ``anywhere`` says what ``open`` lets in), whether a mention is needed
    (``mention``; ``None``: the platform's line says it another way)."""
    where = {
        "allowlist": f"{len(groups.allow)} allowed {noun}(s)",
        "open": anywhere or f"any {noun}",
        "disabled": f"no {noun}s",
    }[groups.policy]
    needed = f", {mention}" if mention and groups.require_mention and groups.policy != "disabled" else ""
    return f"direct messages: {config.dm_policy} ({len(config.allow_from)} in allowFrom); {where}{needed}"


def report(
    console: _Printer,
    name: str,
    *,
    root: str,
    ask: Callable[[], Awaitable[tuple[str, str]]],
    access: str,
    keys: str = "",
    api: str = "",
) -> None:
    """Ask the platform who the bot is (``ask``: the bot, and what to say after ``root``) and print
    it with the access rules; if the platform refuses, print which ``keys`` it refused (``""``: the
    error names them) and exit 1. ``api`` names the server before ``root`` (``the Bot API at``)."""
    try:
        who, more = anyio.run(ask)
    except ValueError as exc:
        refused = f"{keys}: " if keys else ""
        console.print(
            f"[red]{name}: {api}{escape(root)} did not accept {refused}{escape(str(exc))}[/]", highlight=False
        )
        raise typer.Exit(1) from None
    console.print(escape(f"{name}: {who} via {root}{more}; {access}"), highlight=False)


def channels_check_hook(project: Path, config: ShipConfig, console: _Printer) -> None:
    """Print each enabled channel: the bot it is (asked from the platform) and its access rules.

    Credentials a platform refuses, an unreachable API root, or a platform whose extra is not
    installed (``pip install 'shipagent[slack]'``) are an error (exit 1); a secret is never printed.
    """
    for platform, check in _CHECKS.items():
        if getattr(config.channels, platform).enabled:
            try:
                with platform_library(platform):
                    check(config, console)
            except ConfigError as exc:  # the extra is missing: one line, not a traceback
                console.print(f"[red]{escape(str(exc))}[/]", highlight=False)
                raise typer.Exit(1) from None


def _slack(config: ShipConfig, console: _Printer) -> None:
    from .slack._check import slack_who  # slack-sdk loads only when Slack is on

    slack = config.channels.slack
    access = access_line(slack, slack.channels, noun="channel", anywhere="any channel the bot is in")
    ask = partial(slack_who, slack)  # its error names the token refused
    report(console, "slack", root=slack.api_root, api="the Web API at ", ask=ask, access=access)


def _discord(config: ShipConfig, console: _Printer) -> None:
    from .discord._check import discord_who

    discord = config.channels.discord
    access = access_line(discord, discord.guilds, noun="guild")
    keys = "channels.discord.botToken"
    report(
        console, "discord", root=discord.api_root, keys=keys, ask=partial(discord_who, discord), access=access
    )


def _feishu(config: ShipConfig, console: _Printer) -> None:
    from .feishu._check import feishu_who  # lark-oapi loads only when Feishu is on

    feishu = config.channels.feishu
    access = access_line(feishu, feishu.groups, anywhere="any group the bot is in", mention="@mention needed")
    keys = "channels.feishu.appId / appSecret"
    ask = partial(anyio.to_thread.run_sync, feishu_who, feishu)  # lark-oapi blocks (requests)
    report(console, "feishu", root=feishu.base_url, keys=keys, ask=ask, access=access)


def _qq(config: ShipConfig, console: _Printer) -> None:
    from .qq._check import qq_who

    qq = config.channels.qq
    access = access_line(qq, qq.groups, mention=None) + ", @-messages only"
    keys = "channels.qq.appId / clientSecret"
    report(console, "qq", root=qq.api_base, keys=keys, ask=partial(qq_who, qq), access=access)


def _telegram(config: ShipConfig, console: _Printer) -> None:
    from .telegram._check import telegram_who  # python-telegram-bot loads only when Telegram is on

    telegram = config.channels.telegram
    keys, root = "channels.telegram.botToken", telegram.api_root
    ask, access = partial(telegram_who, telegram), access_line(telegram, telegram.groups)
    report(console, "telegram", root=root, api="the Bot API at ", keys=keys, ask=ask, access=access)


_CHECKS: dict[str, Callable[[ShipConfig, _Printer], None]] = {
    "slack": _slack,
    "discord": _discord,
    "feishu": _feishu,
    "qq": _qq,
    "telegram": _telegram,
}
"""The platform checks, in the order they are printed."""
