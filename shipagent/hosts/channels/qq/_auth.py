"""The bot's access token: AppID and AppSecret in, a token valid for ``expires_in`` seconds out.

QQ's token endpoint (``POST https://bots.qq.com/app/getAppAccessToken``) hands out a token that
every API request and the gateway's IDENTIFY carry as ``QQBot <token>``. It expires (7,200 s);
QQ accepts asking for a new one during the last 60 s, when the old one still works. So the token
is asked for again once less than a margin (60 s, or a quarter of its life when that is shorter)
is left: a request never goes out with a token about to lapse. A 401 from the API drops the token
so the retry asks again (the platform may revoke a token early).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio
import httpx

__all__ = ["AccessToken", "CredentialsRefused"]

log = logging.getLogger("shipagent.hosts.channels.qq")


class CredentialsRefused(Exception):
    """The token endpoint refused the AppID and AppSecret (a person must fix ship.json)."""


class AccessToken:
    """The current access token, asked for again before it expires (concurrent callers share one)."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        app_id: str,
        secret: str,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._url = url
        self._app_id = app_id
        self._secret = secret
        self._clock = clock
        self._token = ""
        self._renew_at = float("-inf")
        self._lock = anyio.Lock()
        self.fetched = 0
        """How many tokens were asked for (health shows it)."""

    @property
    def current(self) -> str:
        """The token last fetched (``""`` before the first); for redacting it from text."""
        return self._token

    def invalidate(self) -> None:
        """Forget the token (the API refused it): the next :meth:`get` asks for a new one."""
        self._renew_at = float("-inf")

    async def get(self) -> str:
        """A token with more than the margin left, fetched if needed."""
        async with self._lock:
            if self._clock() < self._renew_at:
                return self._token
            body = {"appId": self._app_id, "clientSecret": self._secret}
            try:
                response = await self._client.post(self._url, json=body, timeout=15)
            except httpx.HTTPError as exc:
                raise OSError(f"the token endpoint could not be reached: {type(exc).__name__}") from None
            try:
                data = response.json()
            except ValueError:
                data = {}
            token = data.get("access_token") if isinstance(data, dict) else None
            if response.status_code >= 500:
                raise OSError(f"the token endpoint failed: HTTP {response.status_code}")
            if not token:
                said = data.get("message") if isinstance(data, dict) else None
                code = data.get("code") if isinstance(data, dict) else None
                text = f"QQ refused channels.qq.appId / clientSecret (HTTP {response.status_code}"
                text += f", {code}: {said})" if said or code else ")"
                raise CredentialsRefused(text.replace(self._secret, "[secret]"))
            try:
                life = float(data.get("expires_in", 7200))
            except (TypeError, ValueError):
                life = 7200.0
            margin = min(60.0, life / 4)
            self._token = str(token)
            self._renew_at = self._clock() + life - margin
            self.fetched += 1
            log.debug("qq: access token fetched, valid for %g s", life)
            return self._token
