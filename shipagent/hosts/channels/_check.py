"""``shipagent check`` for channels: is the token good (``getMe``), and who may talk to the bot."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import anyio
import typer
from rich.markup import escape

if TYPE_CHECKING:
    from telegram import Bot

    from ..._channels_config import TelegramConfig
    from ...config import ShipConfig

__all__ = ["channels_check_hook"]


class _Printer(Protocol):
    def print(self, *objects: object, highlight: bool = ...) -> None: ...


def _access(telegram: TelegramConfig) -> str:
    groups = telegram.groups
    where = {
        "allowlist": f"{len(groups.allow)} allowed group(s)",
        "open": "any group",
        "disabled": "no groups",
    }[groups.policy]
    mention = ", mention needed" if groups.require_mention and groups.policy != "disabled" else ""
    return (
        f"direct messages: {telegram.dm_policy} ({len(telegram.allow_from)} in allowFrom); {where}{mention}"
    )


async def _webhook_state(bot: Bot, telegram: TelegramConfig) -> str:
    """Webhook mode: whether Telegram's webhook is ours, and its last delivery error (URL not shown:
    its path may be a secret of its own)."""
    info = await bot.get_webhook_info()
    if info.url and info.url == telegram.webhook_url:
        state = "set to webhookUrl"
    elif not info.url:
        state = "not set yet (the channel sets it when it starts)"
    else:
        state = "pointing at another URL (the channel sets it to webhookUrl when it starts)"
    if info.last_error_message:
        state += f"; Telegram's last delivery error: {info.last_error_message}"
    return f"; webhook {state}; listening on {telegram.webhook_listen}"


async def _get_me(telegram: TelegramConfig) -> tuple[str, str]:
    from telegram import Bot
    from telegram.error import TelegramError

    from .telegram._redact import TokenFilter

    token = TokenFilter(telegram.bot_token or "")
    token.install()
    try:
        bot = Bot(
            token.token, base_url=f"{telegram.api_root}/bot", base_file_url=f"{telegram.api_root}/file/bot"
        )
        try:
            with anyio.fail_after(15):
                async with bot:
                    me = bot.bot
                    hook = await _webhook_state(bot, telegram) if telegram.mode == "webhook" else ""
            return f"@{me.username} (id {me.id})", hook
        except TelegramError as exc:
            raise ValueError(token.clean(f"{type(exc).__name__}: {exc}")) from None
        except TimeoutError:
            raise ValueError("no answer within 15 s") from None
    finally:
        token.remove()


def channels_check_hook(project: Path, config: ShipConfig, console: _Printer) -> None:
    """Print each enabled channel: the bot it is (asked from the Bot API) and its access rules.

    A token the Bot API refuses, or an unreachable ``apiRoot``, is an error (exit 1); the token
    itself is never printed.
    """
    if config.channels.slack.enabled:
        from .slack._check import check_slack  # slack-sdk loads only when Slack is on

        check_slack(config.channels.slack, console)
    if config.channels.discord.enabled:
        _check_discord(config, console)
    if config.channels.feishu.enabled:
        from .feishu._check import check_feishu  # lark-oapi loads only when Feishu is on

        check_feishu(config.channels.feishu, console)
    if config.channels.qq.enabled:
        _check_qq(config, console)
    telegram = config.channels.telegram
    if not telegram.enabled:
        return
    try:
        who, hook = anyio.run(_get_me, telegram)
    except ValueError as exc:
        console.print(
            f"[red]telegram: the Bot API at {escape(telegram.api_root)} did not accept channels.telegram.botToken: "
            f"{escape(str(exc))}[/]",
            highlight=False,
        )
        raise typer.Exit(1) from None
    console.print(
        escape(f"telegram: {who} via {telegram.api_root}{hook}; {_access(telegram)}"), highlight=False
    )


def _report(console: _Printer, name: str, root: str, keys: str, who: Callable[[], str], access: str) -> None:
    """Ask the platform who the bot is (``who``); say it with the access rules, or say which keys it refused."""
    try:
        found = who()
    except ValueError as exc:
        console.print(
            f"[red]{name}: {escape(root)} did not accept {keys}: {escape(str(exc))}[/]", highlight=False
        )
        raise typer.Exit(1) from None
    console.print(escape(f"{name}: {found} via {root}; {access}"), highlight=False)


def _check_discord(config: ShipConfig, console: _Printer) -> None:
    from .discord._check import discord_access, discord_who

    discord = config.channels.discord
    who = partial(anyio.run, discord_who, discord)
    _report(console, "discord", discord.api_root, "channels.discord.botToken", who, discord_access(discord))


def _check_qq(config: ShipConfig, console: _Printer) -> None:
    from .qq._check import qq_access, qq_who

    qq = config.channels.qq
    keys = "channels.qq.appId / clientSecret"
    _report(console, "qq", qq.api_base, keys, partial(anyio.run, qq_who, qq), qq_access(qq))
