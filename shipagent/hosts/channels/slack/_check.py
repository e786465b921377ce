"""``shipagent check`` for Slack: are both tokens good (``auth.test``, ``apps.connections.open``)?

The bot token is checked by asking Slack who the bot is; the app-level token by asking for a
Socket Mode URL (the URL is not connected to, so a running agent is not disturbed). Neither token
is ever printed. In HTTP mode there is no app-level token, and the signing secret cannot be checked
from here (only Slack's requests prove it): the check names where the listener will be.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from ...._channels_config import SlackConfig

__all__ = ["slack_who"]


async def slack_who(slack: SlackConfig) -> tuple[str, str]:
    """Who the bot is, and how events will arrive; ``ValueError`` naming the ship.json key whose
    token Slack refused."""
    from slack_sdk.web.async_client import AsyncWebClient

    from ._wire import send_error

    def clean(text: str) -> str:
        for token in (slack.bot_token or "", slack.app_token or ""):
            text = text.replace(token, "<token>") if token else text
        return text

    root = slack.api_root + "/"
    key = "botToken"
    try:
        with anyio.fail_after(15):
            auth = await AsyncWebClient(token=slack.bot_token, base_url=root).auth_test()
            key = "appToken"
            if slack.mode == "socket":
                await AsyncWebClient(base_url=root).apps_connections_open(app_token=slack.app_token or "")
    except TimeoutError:
        raise ValueError(f"channels.slack.{key}: no answer within 15 s") from None
    except Exception as exc:
        raise ValueError(f"channels.slack.{key}: {send_error(exc, clean)}") from None
    who = f"@{auth.get('user')} (user {auth.get('user_id')}, team {auth.get('team_id')})"
    if slack.mode == "socket":
        return who, ", Socket Mode ready"
    return who, f", Events API over HTTP on {slack.http_listen}{slack.http_path}"
