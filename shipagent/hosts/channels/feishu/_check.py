"""``shipagent check`` for Feishu: are the app's credentials good (the bot's own info)?

The check asks ``GET /open-apis/bot/v3/info`` with a tenant access token (which checks ``appId``
and ``appSecret``); it does not open the long connection, so a running agent is not disturbed.
The secret is never printed.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Protocol

import anyio
import anyio.to_thread
import typer
from rich.markup import escape

if TYPE_CHECKING:
    from ...._channels_config import FeishuConfig

__all__ = ["check_feishu"]


class _Printer(Protocol):
    def print(self, *objects: object, highlight: bool = ...) -> None: ...


def _access(feishu: FeishuConfig) -> str:
    groups = feishu.groups
    where = {
        "allowlist": f"{len(groups.allow)} allowed group(s)",
        "open": "any group the bot is in",
        "disabled": "no groups",
    }[groups.policy]
    mention = ", @mention needed" if groups.require_mention and groups.policy != "disabled" else ""
    return f"direct messages: {feishu.dm_policy} ({len(feishu.allow_from)} in allowFrom); {where}{mention}"


def _ask(feishu: FeishuConfig) -> str:
    """Who the bot is (blocking: lark-oapi uses requests); ``ValueError`` without the secret."""
    import lark_oapi as lark  # type: ignore[import-untyped]

    secret = feishu.app_secret or ""
    client = (
        lark.Client.builder()
        .app_id(feishu.app_id)
        .app_secret(secret)
        .domain(feishu.base_url)
        .timeout(15)
        .log_level(lark.LogLevel.ERROR)
        .build()
    )
    request = (
        lark.BaseRequest.builder()
        .http_method(lark.HttpMethod.GET)
        .uri("/open-apis/bot/v3/info")
        .token_types({lark.AccessTokenType.TENANT})
        .build()
    )
    try:
        response = client.request(request)
        body = json.loads((response.raw.content if response.raw is not None else b"") or b"{}")
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        raise ValueError(text.replace(secret, "[secret]") if secret else text) from None
    bot = body.get("bot") if isinstance(body, dict) else None
    if not response.success() or not isinstance(bot, dict):
        text = f"{response.code} {response.msg}"
        raise ValueError(text.replace(secret, "[secret]") if secret else text)
    return f"{bot.get('app_name')} ({bot.get('open_id')})"


def check_feishu(feishu: FeishuConfig, console: _Printer) -> None:
    """Print the Feishu bot and its access rules; exit 1 if Feishu refuses the credentials."""
    try:
        who = anyio.run(anyio.to_thread.run_sync, _ask, feishu)
    except ValueError as exc:
        console.print(
            f"[red]feishu: {escape(feishu.base_url)} did not accept channels.feishu.appId / appSecret: "
            f"{escape(str(exc))}[/]",
            highlight=False,
        )
        raise typer.Exit(1) from None
    console.print(escape(f"feishu: {who} via {feishu.base_url}; {_access(feishu)}"), highlight=False)
