"""A local server speaking Feishu's Open Platform REST API and its long connection, for testing the
Feishu channel for real.

lark-oapi is pointed at it through ship.json's ``domain`` (a URL): its REST client fetches a
``tenant_access_token`` here and calls the message endpoints; its long-connection client asks
``POST /callback/ws/endpoint`` for a WebSocket URL (this server's ``ws://127.0.0.1``) with the
reconnect and ping settings, and then speaks the protobuf frames of ``lark_oapi.ws.pb`` to it.

The long connection does what Feishu's does: each event is a DATA frame (headers ``type=event``,
``message_id``, ``trace_id``, ``sum``, ``seq``) whose payload is the event's JSON; the client
answers with the same frame carrying ``{"code": 200}`` (an acknowledgement, recorded here); a ping
(a CONTROL frame) is answered with a pong. :meth:`FakeFeishu.reconnect` closes the socket and, once
the client is back, sends the last events again, as Feishu does with events it did not see
acknowledged in time.

REST keeps what Feishu keeps (the bot's messages, their content and every version of it), checks
what it checks (the app's credentials, the bearer token, a message kind and JSON content, at most
20 edits of a message) and records every call. It also knows people's names (the contact API, which
answers only while the app has its scope: :attr:`FakeFeishu.contact_scope`), the files users sent
(``…/messages/:id/resources/:key``) and the images and files the bot uploaded (``/im/v1/images``,
``/im/v1/files``, multipart, with Feishu's size limits), which a bot's image or file message must
name.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import anyio
from aiohttp import WSMsgType, web
from lark_oapi.ws.pb.pbbp2_pb2 import Frame

from tests.support.feishu_server_files import FilesAndPeople, Upload
from tests.support.net import serve_fake

APP_ID = "cli_test_app"
APP_SECRET = "feishu-s3cret-never-shown"
TENANT_TOKEN = "t-tenant-token-1"
BOT_OPEN_ID = "ou_bot0000000000000001"
BOT_NAME = "ship"
USER = "ou_user000000000000001"
DM_CHAT = "oc_dm0000000000000001"
GROUP_CHAT = "oc_group00000000000001"
SERVICE_ID = 7
MAX_EDITS = 20


@dataclass(frozen=True, slots=True)
class Call:
    """One REST request the bot made: method, path, JSON body, when it arrived."""

    method: str
    path: str
    body: dict[str, Any]
    at: float


@dataclass(slots=True)
class BotMessage:
    """A message the bot sent: where, what it shows now, every version, what it replied to."""

    id: str
    chat_id: str
    msg_type: str
    content: str
    reply_to: str | None = None
    deleted: bool = False
    versions: list[str] = field(default_factory=list)
    """Every ``content`` the message had, the first one included."""

    @property
    def text(self) -> str:
        """The text a user sees (the elements of a ``post``, or a ``text`` message's text)."""
        data = json.loads(self.content)
        if self.msg_type == "interactive":
            return "\n".join(e["content"] for e in data["elements"] if e["tag"] == "markdown")
        if self.msg_type == "text":
            return str(data["text"])
        if self.msg_type in ("image", "file"):
            return f"[{self.msg_type} {data.get('image_key') or data.get('file_key')}]"
        body = data.get("zh_cn") or next(iter(data.values()))
        return "\n".join("".join(e.get("text", "") for e in line) for line in body["content"])


def buttons_of(message: BotMessage) -> list[dict[str, Any]]:
    """The buttons of an interactive card (none for other messages)."""
    if message.msg_type != "interactive":
        return []
    rows = [e["actions"] for e in json.loads(message.content)["elements"] if e["tag"] == "action"]
    return [button for row in rows for button in row]


def _frame(method: int, headers: dict[str, str], payload: bytes = b"", seq: int = 0) -> bytes:
    frame = Frame()
    frame.SeqID = seq
    frame.LogID = seq
    frame.service = SERVICE_ID
    frame.method = method
    for key, value in headers.items():
        header = frame.headers.add()
        header.key, header.value = key, value
    frame.payload = payload
    return frame.SerializeToString()


class FakeFeishu(FilesAndPeople):
    """The server's state: REST routes, the long connection, and what tests inject."""

    def __init__(self) -> None:
        self.url = ""
        self.calls: list[Call] = []
        self.messages: list[BotMessage] = []
        self.events: list[dict[str, Any]] = []  # every event queued, in order
        self.sent: list[str] = []  # frame message ids sent on the socket, replays included
        self.acked: dict[str, int] = {}  # frame message id -> the code the client answered
        self.answers: dict[str, dict[str, Any]] = {}  # frame message id -> a callback's answer
        self.presses: dict[str, str] = {}  # event id of a press -> its frame message id
        self._init_files()
        self.pings = 0
        self.connections = 0
        self.endpoint_asked = 0
        self._pending: list[dict[str, Any]] = []
        self._ws: web.WebSocketResponse | None = None
        self._replay = 0
        self._n = 0
        self._changed = anyio.Event()
        app = web.Application()
        app.router.add_post("/callback/ws/endpoint", self._endpoint)
        app.router.add_get("/ws", self._socket)
        app.router.add_route("*", "/open-apis/{path:.*}", self._rest)
        self.app = app

    # -- what tests do ----------------------------------------------------------------------------

    async def close_sockets(self) -> None:
        """Close the gateway connection, if one is open (the server is going away)."""
        if self._ws is not None:
            await self._ws.close()

    def _next(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n:08d}"

    def user_message(
        self,
        text: str,
        *,
        chat_id: str = DM_CHAT,
        group: bool = False,
        user: str = USER,
        mention: bool = False,
        message_id: str | None = None,
        post: bool = False,
        sender_type: str = "user",
    ) -> dict[str, Any]:
        """Queue an ``im.message.receive_v1`` event (``mention``: ``@ship`` first, as Feishu writes it)."""
        mentions = []
        if mention:
            text = f"@_user_1 {text}"
            mentions = [
                {"key": "@_user_1", "id": {"open_id": BOT_OPEN_ID}, "name": BOT_NAME, "tenant_key": "tk"}
            ]
        content = {"title": "", "content": [[{"tag": "text", "text": text}]]} if post else {"text": text}
        return self._queue(
            "post" if post else "text",
            content,
            chat_id=chat_id,
            group=group,
            user=user,
            mentions=mentions,
            message_id=message_id,
            sender_type=sender_type,
        )

    def user_file(
        self,
        data: bytes,
        *,
        kind: str = "file",
        name: str = "notes.txt",
        caption: str = "",
        chat_id: str = DM_CHAT,
        group: bool = False,
        user: str = USER,
        mention: bool = False,
    ) -> dict[str, Any]:
        """Queue a message carrying ``data``: an ``image`` message, a ``file`` message (``name``), or
        (``kind="post"``) a rich-text message with ``caption`` and the image inline, as Feishu sends
        a picture pasted into text. The bytes are served at ``…/messages/:id/resources/:key``."""
        message_id = self._next("om_user_")
        key = self._next("img_v3_" if kind in ("image", "post") else "file_v3_")
        self.resources[(message_id, key)] = ("file" if kind == "file" else "image", data, name)
        mentions = []
        at: list[dict[str, Any]] = []
        if mention:
            mentions = [
                {"key": "@_user_1", "id": {"open_id": BOT_OPEN_ID}, "name": BOT_NAME, "tenant_key": "tk"}
            ]
            at = [{"tag": "at", "user_id": "@_user_1", "user_name": BOT_NAME}]
        content: dict[str, Any]
        if kind == "image":
            content = {"image_key": key}
        elif kind == "file":
            content = {"file_key": key, "file_name": name}
        else:
            content = {
                "title": "",
                "content": [[*at, {"tag": "text", "text": caption}], [{"tag": "img", "image_key": key}]],
            }
        return self._queue(
            kind, content, chat_id=chat_id, group=group, user=user, mentions=mentions, message_id=message_id
        )

    def _queue(
        self,
        message_type: str,
        content: dict[str, Any],
        *,
        chat_id: str,
        group: bool,
        user: str,
        mentions: list[dict[str, Any]],
        message_id: str | None = None,
        sender_type: str = "user",
    ) -> dict[str, Any]:
        event = {
            "schema": "2.0",
            "header": {
                "event_id": self._next("ev_"),
                "event_type": "im.message.receive_v1",
                "create_time": "1700000000000",
                "token": "",
                "app_id": APP_ID,
                "tenant_key": "tk",
            },
            "event": {
                "sender": {"sender_id": {"open_id": user}, "sender_type": sender_type, "tenant_key": "tk"},
                "message": {
                    "message_id": message_id or self._next("om_user_"),
                    "create_time": "1700000000000",
                    "chat_id": chat_id,
                    "chat_type": "group" if group else "p2p",
                    "message_type": message_type,
                    "content": json.dumps(content),
                    "mentions": mentions,
                },
            },
        }
        self.events.append(event)
        self._pending.append(event)
        self._wake()
        return event

    def press(self, message: BotMessage, data: str, *, user: str = USER) -> str:
        """Queue a ``card.action.trigger`` callback: ``user`` pressed the button whose value is
        ``{"data": data}`` on the card ``message``; returns the callback's event id."""
        event_id = self._next("ev_press_")
        callback = {
            "schema": "2.0",
            "header": {
                "event_id": event_id,
                "event_type": "card.action.trigger",
                "create_time": "1700000000000",
                "token": "",
                "app_id": APP_ID,
                "tenant_key": "tk",
            },
            "event": {
                "operator": {"open_id": user, "tenant_key": "tk"},
                "token": f"c-{event_id}",
                "action": {"value": {"data": data}, "tag": "button"},
                "host": "im_message",
                "context": {"open_message_id": message.id, "open_chat_id": message.chat_id},
            },
        }
        self.events.append(callback)
        self._pending.append(callback)
        self._wake()
        return event_id

    def answer_to(self, event_id: str) -> dict[str, Any] | None:
        """What the client answered to the callback ``event_id`` (its toast), once it did."""
        frame = self.presses.get(event_id)
        return self.answers.get(frame) if frame is not None else None

    async def reconnect(self, *, replay: int = 0) -> None:
        """Drop the long connection; once the client is back, send the last ``replay`` events again."""
        self._replay = replay
        if self._ws is not None:
            await self._ws.close()

    def called(self, method: str, path_start: str = "") -> list[Call]:
        return [c for c in self.calls if c.method == method and c.path.startswith(path_start)]

    def shown(self, chat_id: str = DM_CHAT) -> list[BotMessage]:
        """The bot's messages in ``chat_id`` that a user sees now, oldest first."""
        return [m for m in self.messages if m.chat_id == chat_id and not m.deleted]

    async def wait_for(self, condition: Callable[[], Any], within: float = 20.0) -> None:
        """Wait until ``condition()`` holds (checked at every change and every 20 ms)."""
        with anyio.fail_after(within):
            while not condition():
                with anyio.move_on_after(0.02):
                    await self._changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    # -- the long connection ----------------------------------------------------------------------

    async def _endpoint(self, request: web.Request) -> web.Response:
        self.endpoint_asked += 1
        body = await request.json()
        if body.get("AppID") != APP_ID or body.get("AppSecret") != APP_SECRET:
            return web.json_response({"code": 1000040343 + 1, "msg": "invalid app credentials"})
        port = request.url.port
        return web.json_response(
            {
                "code": 0,
                "msg": "ok",
                "data": {
                    "URL": f"ws://127.0.0.1:{port}/ws?device_id=dev-{self.connections + 1}&service_id={SERVICE_ID}",
                    "ClientConfig": {
                        "ReconnectCount": -1,
                        "ReconnectInterval": 1,
                        "ReconnectNonce": 0,
                        "PingInterval": 1,
                    },
                },
            }
        )

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.connections += 1
        self._ws = ws
        if self._replay:
            self._pending[:0] = self.events[-self._replay :]
            self._replay = 0
        self._wake()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._pump, ws)
            async for raw in ws:
                if raw.type is not WSMsgType.BINARY:
                    break
                await self._received(ws, raw.data)
            tasks.cancel_scope.cancel()
        if self._ws is ws:
            self._ws = None
        self._wake()
        return ws

    async def _received(self, ws: web.WebSocketResponse, data: bytes) -> None:
        frame = Frame()
        frame.ParseFromString(data)
        headers = {h.key: h.value for h in frame.headers}
        if frame.method == 0 and headers.get("type") == "ping":
            self.pings += 1
            await ws.send_bytes(_frame(0, {"type": "pong"}))
        elif frame.method == 1:  # the acknowledgement of an event
            answer = json.loads(frame.payload)
            self.acked[headers["message_id"]] = int(answer["code"])
            if answer.get("data"):
                self.answers[headers["message_id"]] = json.loads(base64.b64decode(answer["data"]))
        self._wake()

    async def _pump(self, ws: web.WebSocketResponse) -> None:
        """Send queued events (in order) on the open socket."""
        while not ws.closed:
            while self._pending and not ws.closed:
                event = self._pending.pop(0)
                frame_id = self._next("frame_")
                headers = {
                    "type": "event",
                    "message_id": frame_id,
                    "trace_id": frame_id,
                    "sum": "1",
                    "seq": "0",
                }
                await ws.send_bytes(_frame(1, headers, json.dumps(event).encode(), seq=len(self.sent) + 1))
                self.sent.append(frame_id)
                self.presses[event["header"]["event_id"]] = frame_id
            with anyio.move_on_after(0.02):
                await self._changed.wait()

    # -- REST -------------------------------------------------------------------------------------

    async def _rest(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["path"]
        body: dict[str, Any] = {}
        files: dict[str, tuple[str, bytes]] = {}
        if request.content_type.startswith("multipart/"):
            for key, value in (await request.post()).items():
                if isinstance(value, web.FileField):
                    files[key] = (value.filename, value.file.read())
                    body[key] = {"filename": value.filename, "size": len(files[key][1])}
                else:
                    body[key] = value
        elif request.can_read_body:
            body = await request.json()
        self.calls.append(Call(request.method, path, body, time.monotonic()))
        self._wake()
        if path == "/auth/v3/tenant_access_token/internal":
            if body.get("app_id") != APP_ID or body.get("app_secret") != APP_SECRET:
                return web.json_response({"code": 10014, "msg": "app secret invalid"})
            return web.json_response(
                {"code": 0, "msg": "ok", "tenant_access_token": TENANT_TOKEN, "expire": 7200}
            )
        if request.headers.get("Authorization") != f"Bearer {TENANT_TOKEN}":
            return web.json_response({"code": 99991663, "msg": "invalid access token"}, status=400)
        if path == "/bot/v3/info":
            return web.json_response(
                {
                    "code": 0,
                    "msg": "ok",
                    "bot": {"open_id": BOT_OPEN_ID, "app_name": BOT_NAME, "activate_status": 2},
                }
            )
        parts = path.strip("/").split("/")  # im v1 messages [id [reply]]
        if parts[:3] == ["contact", "v3", "users"] and len(parts) == 4 and request.method == "GET":
            await anyio.sleep(self.contact_delay)
            return self._user(parts[3], request.query.get("user_id_type"))
        if parts[:2] == ["im", "v1"] and parts[2:] in (["images"], ["files"]) and request.method == "POST":
            return self._upload(parts[2], body, files)
        if parts[:3] == ["im", "v1", "messages"] and len(parts) == 6 and parts[4] == "resources":
            return self._resource(parts[3], parts[5], request.query.get("type"))
        if parts[:3] != ["im", "v1", "messages"]:
            return web.json_response({"code": 404, "msg": f"no such API: {path}"}, status=404)
        if len(parts) == 3 and request.method == "POST":
            if request.query.get("receive_id_type") != "chat_id":
                return web.json_response({"code": 99992402, "msg": "receive_id_type is required"}, status=400)
            return self._send(str(body.get("receive_id")), body, None)
        if len(parts) == 5 and parts[4] == "reply" and request.method == "POST":
            chat_id = self._chat_of(parts[3])
            if chat_id is None:
                return web.json_response({"code": 230011, "msg": "the message is not found"}, status=400)
            return self._send(chat_id, body, parts[3])
        found = next((m for m in self.messages if m.id == parts[3]), None)
        if found is None or found.deleted:
            return web.json_response(
                {"code": 230011, "msg": "the message was withdrawn or is not found"}, status=400
            )
        if len(parts) == 4 and request.method == "PUT":
            if body.get("msg_type") != found.msg_type:
                return web.json_response({"code": 230001, "msg": "msg_type does not match"}, status=400)
            if len(found.versions) > MAX_EDITS:
                return web.json_response(
                    {"code": 230072, "msg": "the message was edited too often"}, status=400
                )
            invalid = self._invalid(body)
            if invalid is not None:
                return invalid
            found.content = str(body["content"])
            found.versions.append(found.content)
            self._wake()
            return web.json_response({"code": 0, "msg": "success", "data": {"message_id": found.id}})
        if len(parts) == 4 and request.method == "PATCH":  # cards only
            if found.msg_type != "interactive":
                return web.json_response({"code": 230001, "msg": "only cards can be patched"}, status=400)
            found.content = str(body["content"])
            found.versions.append(found.content)
            self._wake()
            return web.json_response({"code": 0, "msg": "success", "data": {}})
        if len(parts) == 4 and request.method == "DELETE":
            found.deleted = True
            self._wake()
            return web.json_response({"code": 0, "msg": "success", "data": {}})
        return web.json_response({"code": 404, "msg": f"no such API: {request.method} {path}"}, status=404)

    def _chat_of(self, message_id: str) -> str | None:
        """The chat of a message (a user's or the bot's), ``None`` if there is none."""
        for event in self.events:
            if event["event"]["message"]["message_id"] == message_id:
                return str(event["event"]["message"]["chat_id"])
        return next((m.chat_id for m in self.messages if m.id == message_id and not m.deleted), None)

    def _invalid(self, body: dict[str, Any]) -> web.Response | None:
        kind = body.get("msg_type")
        if kind not in ("text", "post", "interactive", "image", "file"):
            return web.json_response({"code": 230001, "msg": "invalid msg_type"}, status=400)
        try:
            content = json.loads(str(body.get("content")))
        except json.JSONDecodeError:
            return web.json_response({"code": 230001, "msg": "content is not JSON"}, status=400)
        unknown = self._unknown_upload(str(kind), content)
        if unknown is not None:
            return web.json_response({"code": 230001, "msg": f"no uploaded {kind} {unknown}"}, status=400)
        return None

    def _send(self, chat_id: str, body: dict[str, Any], reply_to: str | None) -> web.Response:
        invalid = self._invalid(body)
        if invalid is not None:
            return invalid
        message = BotMessage(
            self._next("om_bot_"), chat_id, str(body["msg_type"]), str(body["content"]), reply_to
        )
        message.versions.append(message.content)
        self.messages.append(message)
        self._wake()
        return web.json_response(
            {
                "code": 0,
                "msg": "success",
                "data": {"message_id": message.id, "chat_id": chat_id, "msg_type": message.msg_type},
            }
        )


def feishu_server() -> AbstractAsyncContextManager[FakeFeishu]:
    """Serve a :class:`FakeFeishu` on 127.0.0.1 (a free port) in the current event loop."""
    return serve_fake(FakeFeishu())


__all__ = [
    "APP_ID",
    "APP_SECRET",
    "BOT_NAME",
    "BOT_OPEN_ID",
    "DM_CHAT",
    "GROUP_CHAT",
    "USER",
    "BotMessage",
    "Call",
    "FakeFeishu",
    "Upload",
    "buttons_of",
    "feishu_server",
]
