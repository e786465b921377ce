"""``shipagent check`` for QQ: are AppID and AppSecret good (a token, then ``GET /gateway``), and
who may talk to the bot. The secret and the token are never printed."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import httpx

from ._auth import AccessToken, CredentialsRefused

if TYPE_CHECKING:
    from ...._channels_config import QQConfig

__all__ = ["qq_who"]


async def qq_who(config: QQConfig) -> tuple[str, str]:
    """The app and its gateway, asked from QQ; ``ValueError`` saying why not (never a secret)."""
    secret = config.client_secret or ""
    try:
        with anyio.fail_after(15):
            async with httpx.AsyncClient(base_url=config.api_base, timeout=15) as client:
                token = await AccessToken(client, config.token_url, config.app_id or "", secret).get()
                headers = {"Authorization": f"QQBot {token}", "X-Union-Appid": config.app_id or ""}
                response = await client.get("/gateway", headers=headers)
                if response.status_code >= 400:
                    raise ValueError(f"GET /gateway: HTTP {response.status_code}")
    except CredentialsRefused as exc:
        raise ValueError(str(exc)) from None
    except TimeoutError:
        raise ValueError("no answer within 15 s") from None
    except (OSError, httpx.HTTPError) as exc:
        raise ValueError(
            f"{type(exc).__name__}: {exc}".replace(secret, "[secret]") if secret else str(exc)
        ) from None
    return f"app {config.app_id}", ""
