"""``shipagent check`` for Slack: are both tokens good (``auth.test``, ``apps.connections.open``)?

The bot token is checked by asking Slack who the bot is; the app-level token by asking for a
Socket Mode URL (the URL is not connected to, so a running agent is not disturbed). Neither token
is ever printed. In HTTP mode there is no app-level token, and the signing secret cannot be checked
from here (only Slack's requests prove it): the check names where the listener will be.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import anyio
import typer
from rich.markup import escape

if TYPE_CHECKING:
    from ...._channels_config import SlackConfig

__all__ = ["check_slack"]


class _Printer(Protocol):
    def print(self, *objects: object, highlight: bool = ...) -> None: ...


def _access(slack: SlackConfig) -> str:
    channels = slack.channels
    where = {
        "allowlist": f"{len(channels.allow)} allowed channel(s)",
        "open": "any channel the bot is in",
        "disabled": "no channels",
    }[channels.policy]
    mention = ", mention needed" if channels.require_mention and channels.policy != "disabled" else ""
    return f"direct messages: {slack.dm_policy} ({len(slack.allow_from)} in allowFrom); {where}{mention}"


async def _ask(slack: SlackConfig) -> str:
    """Who the bot is; ``ValueError`` naming the ship.json key whose token Slack refused."""
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
    return f"@{auth.get('user')} (user {auth.get('user_id')}, team {auth.get('team_id')})"


def check_slack(slack: SlackConfig, console: _Printer) -> None:
    """Print the Slack bot and its access rules; exit 1 if Slack refuses a token."""
    try:
        who = anyio.run(_ask, slack)
    except ValueError as exc:
        console.print(
            f"[red]slack: the Web API at {escape(slack.api_root)} did not accept {escape(str(exc))}[/]",
            highlight=False,
        )
        raise typer.Exit(1) from None
    how = (
        "Socket Mode ready"
        if slack.mode == "socket"
        else f"Events API over HTTP on {slack.http_listen}{slack.http_path}"
    )
    console.print(escape(f"slack: {who} via {slack.api_root}, {how}; {_access(slack)}"), highlight=False)
