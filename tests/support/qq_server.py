"""A local server speaking QQ's bot API (token, HTTP, gateway), for testing the QQ channel for real.

The channel is pointed at it through ship.json's ``tokenUrl`` and ``apiRoot``; the gateway URL
comes from this server's ``GET /gateway`` (its own ``ws://127.0.0.1`` URL), so every request and
every gateway frame goes over a socket through the channel's own code.

What it does as QQ does: ``POST /app/getAppAccessToken`` checks AppID and AppSecret and hands out a
token valid for ``expires_in`` seconds (a string, as QQ sends it); every API request must carry a
token that is still valid (``QQBot <token>``), else 401. The gateway says HELLO with a heartbeat
interval, answers every heartbeat with an ACK, checks IDENTIFY (token; intents: 4013 for none or unknown ones, 4014 for ones the bot was not
granted, ``granted_intents``) and answers READY
(a session id, the bot), sends dispatches with a sequence number, RECONNECT (op 7) and INVALID
SESSION (op 9) on request, and answers RESUME by sending what the client missed after its
sequence (plus, on request, some it already had) then RESUMED. Replies are passive: each must name
an inbound message (``msg_id``) and, in groups and direct chats, a ``msg_seq`` not used before for
that message (else QQ's error 40054005), and at most five replies go to one message in groups and
direct chats (QQ's rule: a sixth is refused with its error 22009, ``msg limit exceed``; an HTTP 429,
as other clients report it). Files go in two steps, as QQ's rich media does: an upload
(``POST /v2/{groups|users}/{id}/files``, base64 ``file_data``) returns a ``file_info``, then a reply
of ``msg_type`` 7 carries it; a plain file (``file_type`` 4) is refused in groups.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import anyio
from aiohttp import WSMsgType, web

from tests.support.net import serve_fake

APP_ID = "102000042"
SECRET = "qq-secret-0123456789abcdef"
BOT_ID = "14200000000000000001"
BOT_NAME = "ship"
USER = "E1F2A3B4C5D6E7F8A9B0C1D2E3F4A5B6"  # a user_openid
GROUP = "G0A1B2C3D4E5F6A7B8C9D0E1F2A3B4C5"  # a group_openid
OTHER_GROUP = "G9F8E7D6C5B4A3F2E1D0C9B8A7F6E5D4"
MEMBER = "M1234567890ABCDEF1234567890ABCDE"  # a member_openid
CHANNEL = "6180001"  # a guild channel id
GUILD = "7190002"
GROUP_AND_C2C_EVENT = 1 << 25
PUBLIC_GUILD_MESSAGES = 1 << 30
KNOWN_INTENTS = (1 << 0) | (1 << 1) | (1 << 9) | (1 << 10) | (1 << 12) | (1 << 25) | (1 << 26) | (1 << 30)


@dataclass(frozen=True, slots=True)
class Call:
    """One HTTP request the bot made: method, path, JSON body, the token it carried, when."""

    method: str
    path: str
    body: dict[str, Any]
    token: str
    at: float


@dataclass(frozen=True, slots=True)
class Reply:
    """A reply QQ accepted: where (``groups``/``users``/``channels`` and the id), what, to which message."""

    where: str
    target: str
    content: str
    msg_id: str
    msg_seq: int | None
    media: Upload | None = None


@dataclass(frozen=True, slots=True)
class Upload:
    """A file uploaded with ``POST /v2/{groups|users}/{id}/files``: its ``file_type``, bytes, name."""

    where: str
    target: str
    file_type: int
    data: bytes
    file_name: str | None
    file_info: str


class FakeQQ:
    """The server's state: the token endpoint, the API, the gateway, and what tests inject."""

    def __init__(self) -> None:
        self.url = ""
        self.expires_in = 7200
        self.heartbeat_ms = 45_000
        self.calls: list[Call] = []
        self.replies: list[Reply] = []
        self.tokens: list[str] = []  # every token handed out, in order
        self.frames: list[dict[str, Any]] = []  # every frame the client sent to the gateway
        self.sent: list[dict[str, Any]] = []  # every dispatch this server sent, replays included
        self.files: dict[str, bytes] = {}
        self.uploads: list[Upload] = []
        self.identified = 0
        self.resumed = 0
        self.connections = 0
        self.replay_on_resume = 0
        self.reply_limit = 2000  # characters QQ takes in one message
        self.granted_intents = GROUP_AND_C2C_EVENT | PUBLIC_GUILD_MESSAGES  # more asked for: 4014
        self.invalid_identifies = 0  # IDENTIFYs answered with INVALID SESSION (op 9) before READY
        self.ack_heartbeats = True  # False: a zombie connection (heartbeats go unanswered)
        self.lose_answers = 0  # replies taken whose answer is then lost (a 502 instead)
        self.lose_after = 0  # replies answered normally before lose_answers starts
        self._valid: dict[str, float] = {}  # token -> monotonic time it lapses
        self._inbound: set[str] = set()  # message ids a reply may name
        self._seqs: set[tuple[str, int]] = set()
        self.max_replies = 5  # passive replies QQ takes to one message (groups and direct chats)
        self.refused_over_limit = 0  # replies refused because the message had max_replies already
        self._dispatched: list[dict[str, Any]] = []
        self._seq = 0
        self._session = ""
        self._ws: web.WebSocketResponse | None = None
        self._pending: list[dict[str, Any]] = []
        self._ids = 0
        self._changed = anyio.Event()
        app = web.Application()
        app.router.add_post("/app/getAppAccessToken", self._token)
        app.router.add_get("/websocket", self._gateway)
        app.router.add_get("/files/{name}", self._file)
        app.router.add_route("*", "/{path:.*}", self._api)
        self.app = app

    async def close_sockets(self) -> None:
        """Close the gateway connection, if one is open (the server is going away)."""
        if self._ws is not None:
            await self._ws.close()

    @property
    def token_url(self) -> str:
        return f"{self.url}/app/getAppAccessToken"

    @property
    def gateway_url(self) -> str:
        return "ws" + self.url.removeprefix("http") + "/websocket"

    # -- what tests do ----------------------------------------------------------------------------

    def _next_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}{self._ids:06d}"

    def c2c_message(
        self,
        content: str,
        *,
        user: str = USER,
        message_id: str | None = None,
        attachment: tuple[str, bytes] | None = None,
    ) -> dict[str, Any]:
        """Dispatch a C2C_MESSAGE_CREATE: ``user`` wrote to the bot directly."""
        data: dict[str, Any] = {
            "id": message_id or self._next_id("ROBOT1.0_c2c"),
            "author": {"id": user, "user_openid": user},
            "content": content,
            "timestamp": "2026-11-27T04:00:00+08:00",
        }
        if attachment is not None:
            data["attachments"] = [self._attachment_json(*attachment)]
        self._inbound.add(data["id"])
        self._queue("C2C_MESSAGE_CREATE", data)
        return data

    def group_message(
        self,
        content: str,
        *,
        group: str = GROUP,
        member: str = MEMBER,
        attachment: tuple[str, bytes] | None = None,
    ) -> dict[str, Any]:
        """Dispatch a GROUP_AT_MESSAGE_CREATE: ``member`` @-mentioned the bot in ``group``
        (QQ takes the mention out of the text and leaves a leading space)."""
        data: dict[str, Any] = {
            "id": self._next_id("ROBOT1.0_grp"),
            "author": {"id": member, "member_openid": member},
            "content": f" {content}",
            "group_id": group,
            "group_openid": group,
            "timestamp": "2026-11-27T04:00:00+08:00",
        }
        if attachment is not None:
            data["attachments"] = [self._attachment_json(*attachment)]
        self._inbound.add(data["id"])
        self._queue("GROUP_AT_MESSAGE_CREATE", data)
        return data

    def _attachment_json(self, name: str, body: bytes) -> dict[str, Any]:
        """A message's attachment as QQ describes it; the bytes are served at its ``url``."""
        key = self._next_id("f")
        self.files[key] = body
        return {"content_type": "file", "filename": name, "size": len(body), "url": f"{self.url}/files/{key}"}

    def channel_message(self, content: str, *, user: str = "9001", name: str = "Ada") -> dict[str, Any]:
        """Dispatch an AT_MESSAGE_CREATE: ``name`` @-mentioned the bot in a guild channel."""
        data = {
            "id": self._next_id("08a1b2c3"),
            "author": {"id": user, "username": name, "bot": False},
            "channel_id": CHANNEL,
            "guild_id": GUILD,
            "content": f"<@!{BOT_ID}> {content}",
            "mentions": [{"id": BOT_ID, "username": BOT_NAME, "bot": True}],
            "timestamp": "2026-11-27T04:00:00+08:00",
        }
        self._inbound.add(data["id"])
        self._queue("AT_MESSAGE_CREATE", data)
        return data

    def replied_before(self, message_id: str, *seqs: int) -> None:
        """``message_id`` came in earlier, and replies with ``seqs`` went to it (before a restart)."""
        self._inbound.add(message_id)
        self._seqs.update((message_id, seq) for seq in seqs)

    async def reconnect(self, *, replay: int = 0) -> None:
        """Ask the client to reconnect (op 7); on its RESUME, send the last ``replay`` dispatches again."""
        self.replay_on_resume = replay
        if self._ws is not None:
            await self._ws.send_json({"op": 7})

    async def invalidate_session(self) -> None:
        """Tell the client its session is gone (op 9): it must IDENTIFY again."""
        self._session = ""
        if self._ws is not None:
            await self._ws.send_json({"op": 9, "d": False})

    async def drop(self) -> None:
        """Close the connection abruptly (as a network failure would): the client resumes."""
        if self._ws is not None:
            await self._ws.close(code=4009, message=b"Session timed out")

    def to(self, where: str, target: str) -> list[Reply]:
        """The replies sent to one group (``groups``), user (``users``) or channel (``channels``)."""
        return [r for r in self.replies if r.where == where and r.target == target]

    def called(self, method: str, path_start: str = "") -> list[Call]:
        return [c for c in self.calls if c.method == method and c.path.startswith(path_start)]

    async def wait_for(self, condition: Callable[[], Any], within: float = 20.0) -> None:
        """Wait until ``condition()`` holds (checked at every change and every 20 ms)."""
        with anyio.fail_after(within):
            while not condition():
                with anyio.move_on_after(0.02):
                    await self._changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    # -- the token --------------------------------------------------------------------------------

    async def _token(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(Call("POST", "/app/getAppAccessToken", body, "", time.monotonic()))
        if body.get("appId") != APP_ID or body.get("clientSecret") != SECRET:
            return web.json_response({"code": 100016, "message": "invalid appid or secret"}, status=401)
        token = f"qqtoken-{len(self.tokens) + 1}-abcdef"
        self.tokens.append(token)
        self._valid[token] = time.monotonic() + self.expires_in
        self._wake()
        return web.json_response({"access_token": token, "expires_in": str(self.expires_in)})

    def _authorised(self, header: str | None) -> str | None:
        token = (header or "").removeprefix("QQBot ")
        lapses = self._valid.get(token)
        return token if lapses is not None and time.monotonic() < lapses else None

    # -- the gateway ------------------------------------------------------------------------------

    def _queue(self, event: str, data: dict[str, Any]) -> None:
        self._seq += 1
        frame = {"op": 0, "t": event, "s": self._seq, "d": data, "id": f"{event}:{self._seq}"}
        self._dispatched.append(frame)
        if self._ws is not None and not self._ws.closed:
            self._pending.append(frame)
        self._wake()

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._ws = ws
        self._pending = []
        self.connections += 1
        await ws.send_json({"op": 10, "d": {"heartbeat_interval": self.heartbeat_ms}})
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
        if op == 1 and self.ack_heartbeats:
            await ws.send_json({"op": 11})
        elif op == 2:
            if self._authorised(str(data.get("token"))) is None or not str(data.get("token")).startswith(
                "QQBot "
            ):
                await ws.close(code=4004, message=b"invalid token")
                return
            intents = int(data.get("intents") or 0)
            if not intents or intents & ~KNOWN_INTENTS:
                await ws.close(code=4013, message=b"invalid intent")
                return
            if intents & ~self.granted_intents:  # asks for events the bot was not granted
                await ws.close(code=4014, message=b"disallowed intent")
                return
            if self.invalid_identifies:
                self.invalid_identifies -= 1
                await ws.send_json({"op": 9, "d": False})
                return
            self.identified += 1
            self._session = f"session-{self.identified}"
            self._dispatched = []
            self._seq = 0
            self._pending = []
            user = {"id": BOT_ID, "username": BOT_NAME, "bot": True}
            self._queue("READY", {"version": 1, "session_id": self._session, "user": user, "shard": [0, 1]})
        elif op == 6:
            if self._authorised(str(data.get("token"))) is None or data.get("session_id") != self._session:
                await ws.send_json({"op": 9, "d": False})
                return
            self.resumed += 1
            after = int(data.get("seq") or 0)
            start = max(0, min(after, len(self._dispatched)) - self.replay_on_resume)
            self.replay_on_resume = 0
            self._pending = list(self._dispatched[start:])
            self._queue("RESUMED", {})

    # -- the API ----------------------------------------------------------------------------------

    async def _file(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.calls.append(Call("GET", f"/files/{name}", {}, "", time.monotonic()))
        if name not in self.files:
            return web.Response(status=404)
        return web.Response(body=self.files[name], content_type="application/octet-stream")

    async def _api(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["path"]
        body: dict[str, Any] = await request.json() if request.can_read_body else {}
        token = self._authorised(request.headers.get("Authorization"))
        self.calls.append(Call(request.method, path, body, token or "", time.monotonic()))
        self._wake()
        if token is None or request.headers.get("X-Union-Appid") != APP_ID:
            return web.json_response({"code": 11244, "message": "token not exist or expire"}, status=401)
        parts = path.strip("/").split("/")
        if path == "/gateway":
            return web.json_response({"url": self.gateway_url})
        if request.method == "POST" and len(parts) == 4 and parts[0] == "v2" and parts[3] == "files":
            return self._upload(parts[1], parts[2], body)
        if request.method == "POST" and len(parts) == 4 and parts[0] == "v2" and parts[3] == "messages":
            return self._reply(parts[1], parts[2], body)
        if request.method == "POST" and len(parts) == 3 and parts[0] == "channels" and parts[2] == "messages":
            return self._reply("channels", parts[1], body)
        return web.json_response({"code": 404, "message": "not found"}, status=404)

    def _upload(self, where: str, target: str, body: dict[str, Any]) -> web.Response:
        """Rich media, step one: take the file (``url`` or base64 ``file_data``), hand out a
        ``file_info``. QQ opens ``file_type`` 4 (a plain file) in direct chats only."""
        kind, data = body.get("file_type"), body.get("file_data")
        if where not in ("groups", "users") or kind not in (1, 2, 3, 4):
            return web.json_response({"code": 40034001, "message": "file_type invalid"}, status=400)
        if where == "groups" and kind == 4:
            return web.json_response({"code": 40034007, "message": "file_type not supported"}, status=400)
        if not isinstance(data, str) or not isinstance(body.get("srv_send_msg"), bool):
            return web.json_response({"code": 40034003, "message": "file_data invalid"}, status=400)
        upload = Upload(
            where,
            target,
            kind,
            base64.b64decode(data, validate=True),
            body.get("file_name"),
            self._next_id("fileinfo-"),
        )
        self.uploads.append(upload)
        self._wake()
        return web.json_response(
            {"file_uuid": upload.file_info[9:], "file_info": upload.file_info, "ttl": 3600}
        )

    def _reply(self, where: str, target: str, body: dict[str, Any]) -> web.Response:
        content, msg_id = str(body.get("content") or ""), str(body.get("msg_id") or "")
        media: Upload | None = None
        if body.get("msg_type") == 7:  # rich media: a file_info uploaded for this kind of chat
            info = (body.get("media") or {}).get("file_info")
            media = next((u for u in self.uploads if u.file_info == info and u.where == where), None)
            if media is None:
                return web.json_response({"code": 40034010, "message": "file_info invalid"}, status=400)
        elif not content.strip():
            return web.json_response({"code": 40034002, "message": "content length invalid"}, status=400)
        if len(content) > self.reply_limit:
            return web.json_response({"code": 40034002, "message": "content length invalid"}, status=400)
        if msg_id not in self._inbound:
            return web.json_response({"code": 40034024, "message": "msg_id invalid"}, status=400)
        seq = body.get("msg_seq")
        if where != "channels":
            if not isinstance(seq, int) or seq < 1:
                return web.json_response({"code": 40034025, "message": "msg_seq invalid"}, status=400)
            if (msg_id, seq) in self._seqs:
                return web.json_response({"code": 40054005, "message": "msg_seq duplicated"}, status=400)
            if sum(m == msg_id for m, _ in self._seqs) >= self.max_replies:
                self.refused_over_limit += 1
                self._wake()
                return web.json_response({"code": 22009, "message": "msg limit exceed"}, status=429)
            self._seqs.add((msg_id, seq))
        self.replies.append(
            Reply(where, target, content, msg_id, seq if isinstance(seq, int) else None, media)
        )
        self._wake()
        if self.lose_after:
            self.lose_after -= 1
        elif self.lose_answers:
            self.lose_answers -= 1
            return web.json_response({"code": 502, "message": "bad gateway"}, status=502)
        return web.json_response({"id": self._next_id("reply-"), "timestamp": "2026-11-27T04:00:01+08:00"})


def qq_server() -> AbstractAsyncContextManager[FakeQQ]:
    """Serve a :class:`FakeQQ` on 127.0.0.1 (a free port) in the current event loop."""
    return serve_fake(FakeQQ())


__all__ = [
    "APP_ID",
    "BOT_ID",
    "BOT_NAME",
    "CHANNEL",
    "GROUP",
    "GROUP_AND_C2C_EVENT",
    "MEMBER",
    "OTHER_GROUP",
    "PUBLIC_GUILD_MESSAGES",
    "SECRET",
    "USER",
    "Call",
    "FakeQQ",
    "Reply",
    "Upload",
    "qq_server",
]
