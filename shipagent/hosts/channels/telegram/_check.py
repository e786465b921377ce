"""``shipagent check`` for Telegram: is the token good (``getMe``), and in webhook mode, is the
webhook ours. The token is never printed (a Bot API error that quotes it is cleaned first)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
from telegram import Bot
from telegram.error import TelegramError

from ._redact import TokenFilter

if TYPE_CHECKING:
    from ...._channels_config import TelegramConfig

__all__ = ["telegram_who"]


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


async def telegram_who(telegram: TelegramConfig) -> tuple[str, str]:
    """The bot (``@name (id …)``) and, in webhook mode, the webhook's state; ``ValueError`` saying
    why not."""
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
