"""``shipagent check`` for Feishu: are the app's credentials good (the bot's own info)?

The check asks ``GET /open-apis/bot/v3/info`` with a tenant access token (which checks ``appId``
and ``appSecret``); it does not open the long connection, so a running agent is not disturbed.
The secret is never printed.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...._channels_config import FeishuConfig

__all__ = ["feishu_who"]


def feishu_who(feishu: FeishuConfig) -> tuple[str, str]:
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
    return f"{bot.get('app_name')} ({bot.get('open_id')})", ""
