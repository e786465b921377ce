"""What the server's routes share, apart from the app that builds it and the routes that use it.

:mod:`._app` creates one :class:`ServeState` and hands it to :class:`._routes.Api`; both import it
from here, so neither imports the other for it.
"""

from __future__ import annotations

import logging

import anyio
from starlette.requests import Request

from ...agent._agent import ShipAgent
from ...config import ServeConfig
from ..channels import ChannelHost
from ._auth import ApiKey, Auth, is_loopback
from ._idempotency import IdempotencyKeys
from ._wire import ApiError

__all__ = ["ServeState"]

log = logging.getLogger("shipagent.hosts.serve")


class ServeState:
    """What the routes share: the agent, keys, limits, open approvals and the running turns."""

    def __init__(self, agent: ShipAgent, auth: Auth, settings: ServeConfig) -> None:
        self.agent = agent
        self.auth = auth
        self.settings = settings
        self.approvals: dict[str, tuple[int | None, str]] = {}
        """approval id → (index of the key whose turn asked, chat key)."""
        self.idempotency = IdempotencyKeys(enabled=not agent.config.durable.enabled)
        """Plain mode: a reused ``Idempotency-Key`` is a 409 (durable mode: the queue dedupes)."""
        self.channels: ChannelHost | None = None
        """The chat channels ship.json enables, started beside the HTTP API (``/healthz`` reports them)."""
        self.closing = False
        self.active = 0
        self._idle = anyio.Event()
        self._idle.set()

    def check_open(self) -> None:
        """503 once shutdown began: running turns finish, new ones go elsewhere."""
        if self.closing:
            raise ApiError(503, "shutting_down", "the server is shutting down; retry on another instance")

    def turn_started(self) -> None:
        self.check_open()
        self.active += 1
        self._idle = anyio.Event() if self.active == 1 else self._idle

    def turn_ended(self) -> None:
        self.active -= 1
        if self.active == 0:
            self._idle.set()

    async def drain(self, grace: float) -> None:
        """Refuse new turns and wait up to ``grace`` seconds for the running ones."""
        self.closing = True
        with anyio.move_on_after(grace):
            await self._idle.wait()
        if self.active:
            log.warning("stopping with %d turn(s) still running after %.0f s", self.active, grace)

    def caller(self, request: Request, chat_key: str | None = None) -> ApiKey | None:
        """The caller's key (401 without a valid one), checked against ``chat_key`` (403)."""
        if not self.auth.enabled:
            host = request.client.host if request.client else None
            if not is_loopback(host):
                raise ApiError(
                    403,
                    "forbidden",
                    "this server has no serve.apiKeys configured and answers local clients only",
                )
            return None
        key = self.auth.authenticate(request.headers.get("authorization"))
        if key is None:
            raise ApiError(401, "unauthorized", "send a valid API key as 'Authorization: Bearer <key>'")
        if chat_key is not None and not key.allows(chat_key):
            raise ApiError(403, "forbidden", f"this API key may not use chat {chat_key!r}")
        return key
