"""``shipagent check`` for Discord: is the token good (``GET /users/@me``), and who may talk to the bot.

A plain HTTPS request rather than discord.py's login: the check must not change discord.py's
process-wide REST root, and it needs nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import aiohttp
import anyio

if TYPE_CHECKING:
    from ...._channels_config import DiscordConfig

__all__ = ["discord_who"]


async def discord_who(config: DiscordConfig) -> tuple[str, str]:
    """The bot's name and id, asked from Discord; ``ValueError`` saying why not (never the token)."""
    headers = {"Authorization": f"Bot {config.bot_token or ''}"}
    try:
        with anyio.fail_after(15):
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"{config.api_root}/users/@me", headers=headers) as response,
            ):
                if response.status == 401:
                    raise ValueError(
                        "401 Unauthorized: the token was refused (reset it in the Developer Portal)"
                    )
                if response.status >= 400:
                    raise ValueError(f"HTTP {response.status}")
                me = await response.json(content_type=None)
    except TimeoutError:
        raise ValueError("no answer within 15 s") from None
    except aiohttp.ClientError as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}") from None
    return f"{me.get('username', '?')} (id {me.get('id', '?')})", ""
