"""QQ's gateway over a WebSocket: identify, heartbeat, dispatch, resume, reconnect with backoff.

The protocol (QQ's bot gateway, shaped like Discord's): the server says HELLO (op 10) with a
heartbeat interval; the bot sends IDENTIFY (op 2: ``QQBot <token>``, the intents, the shard) or,
on a new connection of a session it had, RESUME (op 6: the session id and the last sequence seen).
READY (op 0 ``t=READY``) gives the session id; each dispatch (op 0) carries a sequence ``s``. The
bot sends a heartbeat (op 1, the last sequence) every interval and expects an ACK (op 11) before
the next: none means the connection is dead (closed, then resumed). RECONNECT (op 7) asks for a
new connection (resumed at once); INVALID SESSION (op 9) means the session is gone: identified
again after the backoff, which a session ended by op 9 does not reset (a gateway answering every
IDENTIFY with op 9 is asked less and less often). A lost connection is resumed after a backoff of
1 s, doubling to 60 s; close codes that need a person (the bot banned, intents not granted) stop
the channel, except 4014 (an intent not granted) for an intent the channel can do without
(``optional``, the guild channels): the gateway is identified again without it and the listener
told once (:meth:`GatewayListener.intents_refused`).

After a RESUME the server sends what the session missed; it may send again what the bot had
already seen, so the channel dedupes by message id, not here.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from ._auth import AccessToken, CredentialsRefused

__all__ = ["Gateway", "GatewayListener", "GatewayStopped"]

log = logging.getLogger("shipagent.hosts.channels.qq")

_FATAL = {
    4010: "invalid shard",
    4011: "too many guilds for one shard",
    4012: "invalid gateway version",
    4013: "invalid intents",
    4014: "intents not granted to this bot (QQ Open Platform → the bot → event subscriptions)",
    4914: "the bot is offline: only its sandbox may talk to it (set channels.qq.sandbox)",
    4915: "the bot is banned",
}
_NEW_SESSION = {4006, 4007}  # resume impossible: identify again (others: resume, e.g. 4009, 4900-4913)


class GatewayStopped(Exception):
    """The gateway refused the bot for a reason retrying will not fix."""


class GatewayListener(Protocol):
    """What the gateway tells the channel."""

    def ready(self, data: dict[str, Any]) -> None:
        """READY: a new session (``data``: ``session_id``, ``user``)."""

    def resumed(self) -> None:
        """RESUMED: the old session goes on."""

    def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Any other event, in arrival order (must not block)."""

    def lost(self, reason: str) -> None:
        """The connection went; it is being made again."""

    def intents_refused(self, dropped: int) -> None:
        """QQ refused the optional ``dropped`` intents (4014); the gateway goes on without them."""


class Gateway:
    """One bot's gateway session, kept up by :meth:`run` until it is cancelled."""

    def __init__(
        self,
        *,
        url_of: Callable[[], Awaitable[str]],
        token: AccessToken,
        intents: int,
        listener: GatewayListener,
        max_backoff: float = 60.0,
        optional: int = 0,
    ) -> None:
        self._url_of = url_of
        self._token = token
        self.intents = intents
        self.optional = optional & intents
        """Intents dropped, rather than the channel stopped, when QQ refuses them (4014)."""
        self._listener = listener
        self.max_backoff = max_backoff
        self.session_id: str | None = None
        self.seq: int | None = None
        self._acked = True
        self.connections = 0
        """Connections opened (the first plus every reconnect)."""
        self.min_backoff = min(1.0, max_backoff)
        """The first pause after a lost connection (doubling to ``max_backoff``)."""

    async def run(self) -> None:
        """Connect, and connect again whenever the connection is lost; raises :class:`GatewayStopped`."""
        backoff: float | None = None  # None: start again from min_backoff
        while True:
            try:
                began = time.monotonic()
                up, ended = await self._connection(await self._url_of())
                # an op 9 right after identifying backs off further; one ending a long session is
                # routine and starts from the shortest pause again
                if up and (ended != "invalid" or time.monotonic() - began > self.max_backoff):
                    backoff = None
                if ended == "reconnect":  # op 7, or identifying again without a refused intent
                    continue
                reason = "the session is invalid (op 9)" if ended == "invalid" else "the connection closed"
            except GatewayStopped:
                raise
            except CredentialsRefused as exc:
                raise GatewayStopped(str(exc)) from None
            except (OSError, TimeoutError, InvalidHandshake, InvalidURI, httpx.HTTPError) as exc:
                reason = f"{type(exc).__name__}: {exc}"
            except ValueError as exc:  # a frame that is not JSON
                reason = f"the gateway sent something unreadable ({exc})"
            pause = min(self.min_backoff if backoff is None else backoff, self.max_backoff)
            backoff = min(pause * 2, self.max_backoff)
            self._listener.lost(f"{reason}; again in {pause:g} s")
            await anyio.sleep(pause)

    async def _connection(self, url: str) -> tuple[bool, str]:
        """One connection, until it ends: whether a session was up, and how it ended: ``closed``,
        ``reconnect`` (op 7, or an optional intent refused: a new connection at once) or
        ``invalid`` (op 9: a new session, after the backoff)."""
        self.connections += 1
        async with connect(url, open_timeout=15, ping_interval=None, max_size=2**22) as ws:
            try:
                with anyio.fail_after(15):
                    hello = json.loads(await ws.recv())
            except ConnectionClosed:
                return False, "closed"
            if hello.get("op") != 10:
                raise ValueError(f"expected HELLO (op 10), got op {hello.get('op')}")
            interval = float((hello.get("d") or {}).get("heartbeat_interval", 45_000)) / 1000
            token = f"QQBot {await self._token.get()}"
            if self.session_id is not None:
                resume = {"token": token, "session_id": self.session_id, "seq": self.seq or 0}
                message = {"op": 6, "d": resume}
            else:
                identify = {
                    "token": token,
                    "intents": self.intents,
                    "shard": [0, 1],
                    "properties": {"$os": "linux", "$browser": "shipagent", "$device": "shipagent"},
                }
                message = {"op": 2, "d": identify}
            self._acked = True
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._beat, ws, interval)
                try:
                    await ws.send(json.dumps(message))
                    up, ended = await self._read(ws)
                except ConnectionClosed:
                    up, ended = False, "closed"
                finally:
                    tasks.cancel_scope.cancel()
            code = ws.close_code
        if code == 4014 and self.optional:  # identify again without what the bot may not have
            dropped, self.optional = self.optional, 0
            self.intents &= ~dropped
            self.session_id = self.seq = None
            self._listener.intents_refused(dropped)
            return False, "reconnect"
        if code is not None and code in _FATAL:
            raise GatewayStopped(f"the gateway closed with {code}: {_FATAL[code]}")
        if code == 4004:  # the token was refused: a fresh one, a fresh session
            self._token.invalidate()
            self.session_id = self.seq = None
        elif code in _NEW_SESSION:
            self.session_id = self.seq = None
        if code is not None and ended == "closed":
            log.info("qq: the gateway closed the connection with %s", code)
        return up, ended

    async def _read(self, ws: ClientConnection) -> tuple[bool, str]:
        """Frames until the connection ends or the server asks for a new one."""
        up = False
        try:
            async for raw in ws:
                frame = json.loads(raw)
                op = frame.get("op")
                if op == 0:
                    up = True
                    self._dispatch(frame)
                elif op == 11:
                    self._acked = True
                elif op == 1:  # the server asks for a heartbeat now
                    await ws.send(json.dumps({"op": 1, "d": self.seq}))
                elif op == 7:
                    log.info("qq: the gateway asked for a reconnect")
                    return up, "reconnect"
                elif op == 9:
                    log.info("qq: the gateway said the session is invalid; identifying again")
                    self.session_id = self.seq = None
                    return up, "invalid"
        except ConnectionClosed:
            pass
        return up, "closed"

    def _dispatch(self, frame: dict[str, Any]) -> None:
        if isinstance(frame.get("s"), int):
            self.seq = frame["s"]
        event, data = str(frame.get("t") or ""), frame.get("d") or {}
        if event == "READY":
            self.session_id = str(data.get("session_id") or "") or None
            self._listener.ready(data)
        elif event == "RESUMED":
            self._listener.resumed()
        else:
            self._listener.dispatch(event, data)

    async def _beat(self, ws: ClientConnection, interval: float) -> None:
        """A heartbeat every ``interval``; a missing ACK closes the connection (it is resumed)."""
        while True:
            await anyio.sleep(interval)
            if not self._acked:
                log.warning("qq: no heartbeat ACK from the gateway; reconnecting")
                await ws.close(code=4000, reason="no heartbeat ack")
                return
            self._acked = False
            try:
                await ws.send(json.dumps({"op": 1, "d": self.seq}))
            except ConnectionClosed:
                return  # the reader sees it too
