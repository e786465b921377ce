"""A local server speaking Discord's REST API and gateway, for testing the Discord channel for real.

discord.py is pointed at it through ship.json's ``apiRoot`` (the REST base, ``…/api/v10``); the
gateway URL comes from this server's ``GET /gateway/bot`` (its own ``ws://127.0.0.1`` URL), so
every request and every gateway frame goes over a socket through discord.py's own code.

The gateway does what Discord's does: HELLO with a heartbeat interval, ACK for every heartbeat,
IDENTIFY checked (token, intents) and answered with READY (a session id and a
``resume_gateway_url``) then a GUILD_CREATE per guild (its channels and threads), dispatches with a
sequence number, RECONNECT (op 7) on request, and RESUME answered by replaying the dispatches after
the client's sequence, then RESUMED. :meth:`FakeDiscord.reconnect` can also replay dispatches the
client already had, as Discord does when it has not seen them acknowledged.

REST keeps what Discord keeps (the bot's messages and their current content and buttons), checks
what Discord checks (content of 1 to 2,000 characters, a token), and records every call with its
arrival time (``time.monotonic``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import anyio
from aiohttp import BodyPartReader, WSMsgType, web

from tests.support.discord_payloads import (
    APP_ID,
    BOT_ID,
    BOT_NAME,
    TOKEN,
    USER,
    BotMessage,
    application,
    bot_user,
    guild_json,
    member,
    message_json,
    partial_channel,
    user,
)
from tests.support.net import serve_fake

GUILD = 700_000_000_000_000_001
GUILD_CHANNEL = 710_000_000_000_000_001
THREAD = 720_000_000_000_000_001
OTHER_GUILD = 700_000_000_000_000_009
OTHER_CHANNEL = 710_000_000_000_000_009
DM_CHANNEL = 730_000_000_000_000_001


@dataclass(frozen=True, slots=True)
class Call:
    """One REST request the bot made: method, path, JSON body, when it arrived."""

    method: str
    path: str
    body: dict[str, Any]
    at: float


def _snowflakes() -> Callable[[], int]:
    state = {"n": 1_000_000_000_000_000_000}

    def take() -> int:
        state["n"] += 1
        return state["n"]

    return take


class FakeDiscord:
    """The server's state: REST routes, the gateway, and what tests inject."""

    def __init__(self) -> None:
        self.url = ""
        self.calls: list[Call] = []
        self.messages: list[BotMessage] = []
        self.files: dict[str, bytes] = {}
        self.frames: list[dict[str, Any]] = []  # every frame the client sent to the gateway
        self.sent: list[dict[str, Any]] = []  # every dispatch this server sent, replays included
        self.identified = 0
        self.resumed = 0
        self.refuse_intents = False  # close IDENTIFY with 4014, as when Message Content Intent is off
        self.replay_on_resume = 0  # dispatches to send again on RESUME even if the client had them
        self._dispatched: list[dict[str, Any]] = []  # (this session's) dispatches, in order
        self._seq = 0
        self._session = ""
        self._ws: web.WebSocketResponse | None = None
        self._pending: list[dict[str, Any]] = []  # dispatches not yet sent on the open socket
        self._next_id = _snowflakes()
        self._changed = anyio.Event()
        self.commands: list[dict[str, Any]] = []  # the application's global commands (the last PUT)
        self.guild_commands: dict[int, list[dict[str, Any]]] = {}
        self.responses: dict[str, list[dict[str, Any]]] = {}  # interaction id -> its callbacks
        self.followups: dict[str, list[BotMessage]] = {}  # interaction id -> its followup messages
        self.refuse_commands = False  # answer a command registration with 403 (Missing Access)
        self._interaction_types: dict[str, int] = {}
        self.guilds: dict[int, dict[str, Any]] = {
            GUILD: {"channels": [GUILD_CHANNEL], "threads": [THREAD]},
            OTHER_GUILD: {"channels": [OTHER_CHANNEL], "threads": []},
        }
        app = web.Application()
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/attachments/{name}", self._attachment)
        app.router.add_route("*", "/api/v10/{path:.*}", self._rest)
        self.app = app

    async def close_sockets(self) -> None:
        """Close the gateway connection, if one is open (the server is going away)."""
        if self._ws is not None:
            await self._ws.close()

    @property
    def api_root(self) -> str:
        return f"{self.url}/api/v10"

    # -- what tests do ----------------------------------------------------------------------------

    def user_message(
        self,
        content: str,
        *,
        channel_id: int = DM_CHANNEL,
        guild_id: int | None = None,
        user_id: int = USER,
        name: str = "Ada",
        bot: bool = False,
        mention: bool = False,
        reply_to: BotMessage | None = None,
        attachment: tuple[str, bytes] | None = None,
        message_id: int | None = None,
    ) -> dict[str, Any]:
        """Dispatch a MESSAGE_CREATE from a user (``mention``: ``<@bot>`` first, as Discord writes it)."""
        data = message_json(
            message_id or self._next_id(),
            channel_id,
            user(user_id, name, bot=bot),
            f"<@{BOT_ID}> {content}" if mention else content,
            mentions=[bot_user()] if mention else [],
            type=19 if reply_to is not None else 0,
        )
        if guild_id is not None:
            data["guild_id"] = str(guild_id)
            data["member"] = member()
        if reply_to is not None:
            data["message_reference"] = {"message_id": str(reply_to.id), "channel_id": str(channel_id)}
            data["referenced_message"] = self._message_json(reply_to)
        if attachment is not None:
            filename, content_bytes = attachment
            attachment_id = str(self._next_id())
            self.files[attachment_id] = content_bytes
            data["attachments"] = [
                {
                    "id": attachment_id,
                    "filename": filename,
                    "size": len(content_bytes),
                    "url": f"{self.url}/attachments/{attachment_id}",
                    "proxy_url": f"{self.url}/attachments/{attachment_id}",
                    "content_type": "text/plain",
                }
            ]
        self._queue("MESSAGE_CREATE", data)
        return data

    def press(
        self,
        message: BotMessage,
        custom_id: str,
        *,
        user_id: int = USER,
        name: str = "Ada",
        guild_id: int | None = None,
    ) -> str:
        """Dispatch an INTERACTION_CREATE: a user pressed the button ``custom_id`` under ``message``."""
        interaction_id = str(self._next_id())
        presser = user(user_id, name)
        data: dict[str, Any] = {
            "id": interaction_id,
            "application_id": str(APP_ID),
            "type": 3,
            "token": f"itoken-{interaction_id}",
            "version": 1,
            "channel_id": str(message.channel_id),
            "channel": partial_channel(message.channel_id, guild_id, self._parent_of(message.channel_id)),
            "message": self._message_json(message),
            "data": {"custom_id": custom_id, "component_type": 2},
            "locale": "en-US",
            "app_permissions": "0",
            "entitlements": [],
            "authorizing_integration_owners": {},
            "attachment_size_limit": 10 * 1024 * 1024,
        }
        if guild_id is not None:
            data["guild_id"] = str(guild_id)
            data["member"] = member(presser)
        else:
            data["user"] = presser
        self._queue("INTERACTION_CREATE", data)
        return interaction_id

    def slash(
        self,
        name: str,
        *,
        options: dict[str, str] | None = None,
        user_id: int = USER,
        user_name: str = "Ada",
        channel_id: int = DM_CHANNEL,
        guild_id: int | None = None,
    ) -> str:
        """Dispatch an INTERACTION_CREATE: a user ran the slash command ``/name`` (with string
        ``options``) in ``channel_id``; the command must be registered (else Discord offers none)."""
        registered = self.guild_commands.get(guild_id, []) if guild_id is not None else []
        command = next((c for c in [*self.commands, *registered] if c["name"] == name), None)
        assert command is not None, f"/{name} is not registered with the application"
        interaction_id = str(self._next_id())
        caller = user(user_id, user_name)
        data: dict[str, Any] = {
            "id": interaction_id,
            "application_id": str(APP_ID),
            "type": 2,
            "token": f"itoken-{interaction_id}",
            "version": 1,
            "channel_id": str(channel_id),
            "channel": partial_channel(channel_id, guild_id, self._parent_of(channel_id)),
            "data": {
                "id": command["id"],
                "name": name,
                "type": 1,
                "options": [{"name": k, "type": 3, "value": v} for k, v in (options or {}).items()],
            },
            "locale": "en-US",
            "app_permissions": "0",
            "entitlements": [],
            "authorizing_integration_owners": {},
            "context": 0 if guild_id is not None else 1,
            "attachment_size_limit": 10 * 1024 * 1024,
        }
        if guild_id is not None:
            data["guild_id"] = str(guild_id)
            data["member"] = member(caller)
        else:
            data["user"] = caller
        self._interaction_types[interaction_id] = 2
        self._queue("INTERACTION_CREATE", data)
        return interaction_id

    async def reconnect(self, *, replay: int = 0) -> None:
        """Ask the client to reconnect (op 7); on its RESUME, send the last ``replay`` dispatches again."""
        self.replay_on_resume = replay
        if self._ws is not None:
            await self._ws.send_json({"op": 7, "d": None})

    def called(self, method: str, path_start: str = "") -> list[Call]:
        return [c for c in self.calls if c.method == method and c.path.startswith(path_start)]

    def shown(self, channel_id: int = DM_CHANNEL) -> list[BotMessage]:
        """The bot's messages in ``channel_id`` that a user sees now, oldest first."""
        return [m for m in self.messages if m.channel_id == channel_id and not m.deleted]

    async def wait_for(self, condition: Callable[[], Any], within: float = 20.0) -> None:
        """Wait until ``condition()`` holds (checked at every change and every 20 ms)."""
        with anyio.fail_after(within):
            while not condition():
                with anyio.move_on_after(0.02):
                    await self._changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    # -- the gateway ------------------------------------------------------------------------------

    def _queue(self, event: str, data: dict[str, Any]) -> None:
        self._seq += 1
        frame = {"op": 0, "t": event, "s": self._seq, "d": data}
        self._dispatched.append(frame)
        if self._ws is not None and not self._ws.closed:
            self._pending.append(frame)
        self._wake()

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._ws = ws
        self._pending = []
        await ws.send_json({"op": 10, "d": {"heartbeat_interval": 41250}})
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._pump, ws)
            async for raw in ws:
                if raw.type is not WSMsgType.TEXT:
                    break
                frame = json.loads(raw.data)
                self.frames.append(frame)
                self._wake()
                await self._op(ws, frame)
            tasks.cancel_scope.cancel()
        if self._ws is ws:
            self._ws = None
        return ws

    async def _pump(self, ws: web.WebSocketResponse) -> None:
        """Send queued dispatches (in order) once the session is up."""
        while not ws.closed:
            while self._pending and self._session:
                frame = self._pending.pop(0)
                await ws.send_json(frame)
                self.sent.append(frame)
            with anyio.move_on_after(0.02):
                await self._changed.wait()

    async def _op(self, ws: web.WebSocketResponse, frame: dict[str, Any]) -> None:
        op, data = frame.get("op"), frame.get("d") or {}
        if op == 1:
            await ws.send_json({"op": 11})
        elif op == 2:
            if data.get("token") != TOKEN:
                await ws.close(code=4004, message=b"Authentication failed.")
                return
            if self.refuse_intents:
                await ws.close(code=4014, message=b"Disallowed intent(s).")
                return
            self.identified += 1
            self._session = f"session-{self.identified}"
            self._dispatched = []
            self._seq = 0
            self._pending = []
            ready = {
                "v": 10,
                "user": {**bot_user(), "verified": True, "mfa_enabled": False, "flags": 0},
                "guilds": [{"id": str(g), "unavailable": True} for g in self.guilds],
                "session_id": self._session,
                "resume_gateway_url": f"{self.gateway_url}",
                "application": {"id": str(APP_ID), "flags": 0},
            }
            self._queue("READY", ready)
            for guild_id, guild in self.guilds.items():
                self._queue("GUILD_CREATE", guild_json(guild_id, guild["channels"], guild["threads"]))
        elif op == 6:
            if data.get("token") != TOKEN or data.get("session_id") != self._session:
                await ws.send_json({"op": 9, "d": False})
                return
            self.resumed += 1
            after = int(data.get("seq") or 0)
            start = max(0, min(after, len(self._dispatched)) - self.replay_on_resume)
            self.replay_on_resume = 0
            self._pending = list(self._dispatched[start:])  # what the client missed (and any replay)
            self._queue("RESUMED", {})

    def _parent_of(self, channel_id: int) -> int | None:
        """The channel a thread is in (``None``: not a thread)."""
        for guild in self.guilds.values():
            if channel_id in guild["threads"]:
                return int(guild["channels"][0])
        return None

    @property
    def gateway_url(self) -> str:
        return "ws" + self.url.removeprefix("http") + "/gateway"

    # -- REST -------------------------------------------------------------------------------------

    async def _attachment(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.calls.append(Call("GET", f"/attachments/{name}", {}, time.monotonic()))
        if name not in self.files:
            return web.Response(status=404)
        return web.Response(body=self.files[name], content_type="application/octet-stream")

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["path"]
        body: dict[str, Any] = {}
        if request.can_read_body and request.content_type == "application/json":
            data = await request.json()
            body = data if isinstance(data, dict) else {"items": data}  # a bulk command update
        elif request.can_read_body and request.content_type == "multipart/form-data":  # an upload
            body = {"files": []}
            async for part in await request.multipart():
                if isinstance(part, BodyPartReader) and part.name == "payload_json":
                    body.update(json.loads(await part.text()))
                elif isinstance(part, BodyPartReader):
                    body["files"].append((part.filename, bytes(await part.read())))
        self.calls.append(Call(request.method, path, body, time.monotonic()))
        self._wake()
        webhook = path.startswith(("/interactions/", "/webhooks/"))  # the interaction token is the key
        if request.headers.get("Authorization") != f"Bot {TOKEN}" and not webhook:
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        parts = path.strip("/").split("/")
        if path == "/users/@me":
            return _json({**bot_user(), "verified": True, "flags": 0})
        if path == "/oauth2/applications/@me":
            return _json(application())
        if path == "/gateway/bot":
            limit = {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
            return _json({"url": self.gateway_url, "shards": 1, "session_start_limit": limit})
        if parts[0] == "applications" and parts[-1] == "commands" and request.method == "PUT":
            return self._register(parts, body.get("items") or [])
        if parts[0] == "webhooks" and len(parts) == 3 and request.method == "POST":  # a followup
            if parts[1] != str(APP_ID) or not parts[2].startswith("itoken-"):
                return _json({"message": "Unknown Webhook", "code": 10015}, status=404)
            if (problem := self._invalid(body.get("content") or "")) is not None:
                return problem
            notice = BotMessage(0, self._next_id(), body.get("content") or "", int(body.get("flags") or 0))
            self.followups.setdefault(parts[2].removeprefix("itoken-"), []).append(notice)
            return _json({**self._message_json(notice), "webhook_id": str(APP_ID)})
        if parts[0] == "interactions" and parts[-1] == "callback":
            self.responses.setdefault(parts[1], []).append(body)
            kind = self._interaction_types.get(parts[1], 3)
            flags = int((body.get("data") or {}).get("flags") or 0)
            answer = {
                "id": parts[1],
                "type": kind,
                "response_message_loading": body.get("type") == 5,
                "response_message_ephemeral": bool(flags & 64) or kind == 3,
            }
            return _json({"interaction": answer})
        if parts[0] == "channels" and len(parts) >= 3:
            channel_id = int(parts[1])
            if parts[2] == "typing":
                return web.Response(status=204)
            if parts[2] == "messages" and len(parts) == 3 and request.method == "POST":
                return self._send(channel_id, body)
            if parts[2] == "messages" and len(parts) == 4:
                return self._message(request.method, channel_id, int(parts[3]), body)
        return _json({"message": "404: Not Found", "code": 0}, status=404)

    def _register(self, parts: list[str], commands: list[dict[str, Any]]) -> web.Response:
        """``PUT /applications/{id}/commands`` (or ``…/guilds/{guild}/commands``): the new list."""
        if parts[1] != str(APP_ID):
            return _json({"message": "Unknown Application", "code": 10002}, status=404)
        if self.refuse_commands:
            return _json({"message": "Missing Access", "code": 50001}, status=403)
        made = [
            {
                **command,
                "id": str(self._next_id()),
                "application_id": str(APP_ID),
                "version": str(self._next_id()),
                "type": command.get("type", 1),
                "options": command.get("options", []),
            }
            for command in commands
        ]
        if len(parts) == 5:
            self.guild_commands[int(parts[3])] = made
        else:
            self.commands = made
        return _json(made)

    @staticmethod
    def _invalid(content: str) -> web.Response | None:
        if not content.strip() or len(content) > 2000:
            error = {
                "content": {
                    "_errors": [
                        {"code": "BASE_TYPE_BAD_LENGTH", "message": "Must be 2000 or fewer in length."}
                    ]
                }
            }
            return _json({"message": "Invalid Form Body", "code": 50035, "errors": error}, status=400)
        return None

    def _send(self, channel_id: int, body: dict[str, Any]) -> web.Response:
        content = body.get("content") or ""
        if not body.get("files") and (problem := self._invalid(content)) is not None:
            return problem  # (a message with a file may have no text)
        message = BotMessage(channel_id, self._next_id(), content, int(body.get("flags") or 0))
        message.files = list(body.get("files", []))
        message.versions.append(content)
        message.buttons = [c for row in body.get("components") or [] for c in row.get("components", [])]
        self.messages.append(message)
        return _json(self._message_json(message))

    def _message(self, method: str, channel_id: int, message_id: int, body: dict[str, Any]) -> web.Response:
        found = [
            m for m in self.messages if m.channel_id == channel_id and m.id == message_id and not m.deleted
        ]
        if not found:
            return _json({"message": "Unknown Message", "code": 10008}, status=404)
        message = found[0]
        if method == "DELETE":
            message.deleted = True
            return web.Response(status=204)
        if method == "PATCH":
            if "content" in body:
                if (problem := self._invalid(body["content"] or "")) is not None:
                    return problem
                message.content = body["content"]
                message.versions.append(message.content)
            if "components" in body:
                message.buttons = [c for row in body["components"] or [] for c in row.get("components", [])]
        return _json(self._message_json(message))

    @staticmethod
    def _message_json(message: BotMessage) -> dict[str, Any]:
        rows = [{"type": 1, "components": message.buttons}] if message.buttons else []
        return message_json(
            message.id, message.channel_id, bot_user(), message.content, flags=message.flags, components=rows
        )


def _json(data: Any, status: int = 200) -> web.Response:
    """JSON as Discord sends it: ``Content-Type: application/json`` exactly (discord.py checks that)."""
    return web.Response(
        body=json.dumps(data).encode(), status=status, headers={"Content-Type": "application/json"}
    )


def discord_server() -> AbstractAsyncContextManager[FakeDiscord]:
    """Serve a :class:`FakeDiscord` on 127.0.0.1 (a free port) in the current event loop."""
    return serve_fake(FakeDiscord())


__all__ = [
    "APP_ID",
    "BOT_ID",
    "BOT_NAME",
    "DM_CHANNEL",
    "GUILD",
    "GUILD_CHANNEL",
    "OTHER_CHANNEL",
    "OTHER_GUILD",
    "THREAD",
    "TOKEN",
    "USER",
    "BotMessage",
    "Call",
    "FakeDiscord",
    "discord_server",
]
