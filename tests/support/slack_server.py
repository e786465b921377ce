"""A local server speaking the Slack Web API over HTTP and Socket Mode over a WebSocket.

slack-sdk is pointed at it through its ``base_url`` (ship.json ``apiRoot``); ``apps.connections.open``
hands out this server's own ``ws://127.0.0.1`` URL, so the Socket Mode client really connects,
receives ``hello``, envelopes and ``disconnect`` notices, pings, and acknowledges each envelope by its
``envelope_id``. The server keeps what Slack keeps: the bot's messages (text, blocks, thread) and
their versions, which envelopes were acknowledged (an unacknowledged one is sent again on the next
connection, with ``retry_attempt`` raised, as Slack does), uploaded files behind their private URLs
(served only with the bot token). It checks the tokens (bot token for the Web API, the app token
for ``apps.connections.open``) and Slack's length limit, and records every call with its arrival
time (``time.monotonic``).
"""

from __future__ import annotations

import itertools
import json
import time
from collections import defaultdict, deque
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import anyio
from aiohttp import WSMsgType, web

from tests.support.net import serve_fake

BOT_TOKEN = "xoxb-1-TEST-bot-token-do-not-log"
APP_TOKEN = "xapp-1-TEST-app-token-do-not-log"
TEAM = "T0TEAM"
BOT_USER = "U0SHIPBOT"
BOT_NAME = "ship"
TEXT_LIMIT = 40_000  # Slack refuses longer text (msg_too_long)
USERS = {"U7": "Ada", "U8": "Mallory", "U9": "Admin", "U99": "Eve"}


@dataclass(frozen=True, slots=True)
class Call:
    """One Web API request: the method, its parameters, when it arrived."""

    method: str
    params: dict[str, Any]
    at: float


@dataclass(slots=True)
class BotMessage:
    """A message the bot posted, as Slack shows it now."""

    channel: str
    ts: str
    text: str
    thread_ts: str | None
    blocks: list[dict[str, Any]] = field(default_factory=list)
    deleted: bool = False
    versions: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # names of the files shared with it

    @property
    def buttons(self) -> list[dict[str, Any]]:
        """The buttons under the message now (an update with ``blocks: []`` removes them)."""
        return [e for b in self.blocks if b.get("type") == "actions" for e in b.get("elements", [])]


@dataclass(slots=True)
class Envelope:
    """A Socket Mode envelope and what became of it."""

    envelope_id: str
    type: str
    payload: dict[str, Any]
    retry_attempt: int = 0
    sent_on: set[int] = field(default_factory=set)  # the connections it went out on
    acked: bool = False

    def frame(self) -> str:
        return json.dumps(
            {
                "envelope_id": self.envelope_id,
                "type": self.type,
                "payload": self.payload,
                "accepts_response_payload": False,
                "retry_attempt": self.retry_attempt,
                "retry_reason": "timeout" if self.retry_attempt else "",
            }
        )


class FakeSlack:
    """The server's state and its aiohttp application."""

    def __init__(self) -> None:
        self.url = ""
        self.calls: list[Call] = []
        self.messages: list[BotMessage] = []
        self.ephemeral: list[dict[str, Any]] = []
        self.envelopes: list[Envelope] = []
        self.files: dict[str, tuple[str, bytes]] = {}  # file id -> (name, content)
        self.connections = 0
        self._sockets: dict[int, web.WebSocketResponse] = {}
        self._failures: dict[str, deque[tuple[int, str, int | None]]] = defaultdict(deque)
        self._ts = itertools.count(1)
        self._ids = itertools.count(1)
        self._changed = anyio.Event()
        self.app = web.Application()
        self.app.router.add_post("/api/{method}", self._endpoint)
        self.app.router.add_get("/api/{method}", self._endpoint)  # users.info, files.info: GET
        self.app.router.add_get("/link/", self._socket)
        self.app.router.add_get("/files-pri/{file_id}/{name}", self._file)
        self.app.router.add_post("/upload/{file_id}", self._upload)
        self.uploads: dict[str, tuple[str, bytes | None]] = {}  # file id -> (name, bytes once uploaded)

    # -- what tests do ----------------------------------------------------------------------------

    async def close_sockets(self) -> None:
        """Close every open Socket Mode connection (the server is going away)."""
        for ws in list(self._sockets.values()):
            await ws.close()

    def next_ts(self) -> str:
        return f"{1_800_000_000 + next(self._ts)}.{next(self._ts):06d}"

    def user_message(
        self,
        text: str,
        *,
        channel: str = "D0DM",
        user: str = "U7",
        channel_type: str = "im",
        thread_ts: str | None = None,
        parent_user: str | None = None,
        mention: bool = False,
        bot_id: str | None = None,
        ts: str | None = None,
        file: tuple[str, bytes] | None = None,
    ) -> Envelope:
        """Send the event(s) of a user's message: ``message``, and with ``mention`` also ``app_mention``
        (Slack sends both when the app subscribes to both; they share the message's ``ts``)."""
        ts = ts or self.next_ts()
        body = f"<@{BOT_USER}> {text}" if mention else text
        event: dict[str, Any] = {
            "type": "message",
            "channel": channel,
            "channel_type": channel_type,
            "user": user,
            "text": body,
            "ts": ts,
            "event_ts": ts,
            "team": TEAM,
            "client_msg_id": f"cm-{ts}",
        }
        if thread_ts is not None:
            event["thread_ts"] = thread_ts
            event["parent_user_id"] = parent_user or "U1"  # who wrote the thread's first message
        if bot_id is not None:
            event["bot_id"] = bot_id
        if file is not None:
            name, content = file
            file_id = f"F{len(self.files) + 1:04d}"
            self.files[file_id] = (name, content)
            event["subtype"] = "file_share"
            event["files"] = [self._file_json(file_id)]
        first = self.event(event)
        if mention:
            mentioned = {k: v for k, v in event.items() if k not in ("channel_type", "subtype")}
            self.event({**mentioned, "type": "app_mention"})
        return first

    def event(self, event: dict[str, Any]) -> Envelope:
        """Send an Events API envelope carrying ``event``."""
        n = next(self._ids)
        payload = {
            "token": "verification",
            "team_id": TEAM,
            "api_app_id": "A0APP",
            "event": event,
            "type": "event_callback",
            "event_id": f"Ev{n:06d}",
            "event_time": int(time.time()),
        }
        return self._queue(Envelope(f"env-{n}", "events_api", payload))

    def click(self, message: BotMessage, value: str, *, user: str = "U7") -> Envelope:
        """Send a ``block_actions`` envelope: ``user`` clicked the button with ``value`` under ``message``."""
        button = next(b for b in message.buttons if b["value"] == value)
        container = {"type": "message", "message_ts": message.ts, "channel_id": message.channel}
        payload = {
            "type": "block_actions",
            "team": {"id": TEAM, "domain": "team"},
            "user": {"id": user, "username": USERS.get(user, user).lower(), "name": USERS.get(user, user)},
            "channel": {"id": message.channel, "name": "general"},
            "container": {**container, **({"thread_ts": message.thread_ts} if message.thread_ts else {})},
            "message": {
                "ts": message.ts,
                "text": message.text,
                **({"thread_ts": message.thread_ts} if message.thread_ts else {}),
            },
            "trigger_id": f"trig-{next(self._ids)}",
            "actions": [
                {
                    "type": "button",
                    "action_id": button["action_id"],
                    "block_id": "shipagent-buttons",
                    "value": value,
                    "action_ts": f"{time.time():.6f}-{next(self._ids)}",
                }
            ],
        }
        return self._queue(Envelope(f"env-{next(self._ids)}", "interactive", payload))

    def slash(
        self, text: str, *, channel: str = "D0DM", user: str = "U7", command: str = "/ship"
    ) -> Envelope:
        """Send a ``slash_commands`` envelope: ``user`` typed ``command text`` in ``channel``."""
        n = next(self._ids)
        payload = {
            "team_id": TEAM,
            "channel_id": channel,
            "user_id": user,
            "user_name": USERS.get(user, user).lower(),
            "command": command,
            "text": text,
            "api_app_id": "A0APP",
            "response_url": f"{self.url}/response/{n}",
            "trigger_id": f"trig-{n}",
        }
        return self._queue(Envelope(f"env-{n}", "slash_commands", payload))

    def replay(self, envelope: Envelope) -> Envelope:
        """Slack sends ``envelope``'s payload again (a retry after a reconnect): a new envelope id."""
        again = Envelope(
            f"env-{next(self._ids)}", envelope.type, envelope.payload, envelope.retry_attempt + 1
        )
        return self._queue(again)

    async def disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask the client to reconnect, as Slack does every few hours (``type: disconnect``)."""
        for ws in list(self._sockets.values()):
            await ws.send_str(json.dumps({"type": "disconnect", "reason": reason}))

    async def drop(self) -> None:
        """Close every socket without notice (a network failure): the client must reconnect itself."""
        for ws in list(self._sockets.values()):
            await ws.close()

    def fail_next(self, method: str, status: int, error: str, *, retry_after: int | None = None) -> None:
        """The next call of ``method`` fails (``ok: false`` with ``error``; ``Retry-After`` for a 429)."""
        self._failures[method].append((status, error, retry_after))

    def called(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    def shown(self, channel: str = "D0DM", thread_ts: str | None = None) -> list[BotMessage]:
        """The bot's messages a user sees now in ``channel`` (in ``thread_ts``: that thread), oldest first."""
        return [
            m for m in self.messages if m.channel == channel and m.thread_ts == thread_ts and not m.deleted
        ]

    async def wait_for(self, condition: Callable[[], Any], within: float = 20.0) -> None:
        """Wait until ``condition()`` holds (checked at every change and every 20 ms)."""
        with anyio.fail_after(within):
            while not condition():
                with anyio.move_on_after(0.02):
                    await self._changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def _queue(self, envelope: Envelope) -> Envelope:
        self.envelopes.append(envelope)
        self._wake()
        return envelope

    def _file_json(self, file_id: str) -> dict[str, Any]:
        name, content = self.files[file_id]
        return {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": "text/plain",
            "filetype": "text",
            "size": len(content),
            "mode": "hosted",
            "url_private": f"{self.url}/files-pri/{file_id}/{name}",
            "url_private_download": f"{self.url}/files-pri/{file_id}/{name}",
        }

    # -- Socket Mode ------------------------------------------------------------------------------

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self.connections += 1
        number = self.connections
        self._sockets[number] = ws
        await ws.send_str(
            json.dumps({"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A0APP"}})
        )
        self._wake()
        async with anyio.create_task_group() as tasks:

            async def send() -> None:  # every envelope not acknowledged and not sent on this socket
                while not ws.closed:
                    for envelope in list(self.envelopes):
                        if not envelope.acked and number not in envelope.sent_on:
                            envelope.sent_on.add(number)
                            if envelope.sent_on != {number}:
                                envelope.retry_attempt += 1
                            await ws.send_str(envelope.frame())
                    with anyio.move_on_after(0.05):
                        await self._changed.wait()

            tasks.start_soon(send)
            async for frame in ws:
                if frame.type != WSMsgType.TEXT:
                    continue
                data = json.loads(frame.data)
                for envelope in self.envelopes:
                    if envelope.envelope_id == data.get("envelope_id"):
                        envelope.acked = True
                self._wake()
            tasks.cancel_scope.cancel()
        self._sockets.pop(number, None)
        return ws

    # -- the Web API ------------------------------------------------------------------------------

    async def _endpoint(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params: dict[str, Any] = dict(request.query)
        if request.content_type == "application/json":
            params.update(await request.json())
        elif request.method == "POST":
            params.update(await request.post())
        for key in ("blocks", "attachments", "files"):
            if isinstance(params.get(key), str):
                params[key] = json.loads(params[key])
        self.calls.append(Call(method, params, time.monotonic()))
        self._wake()
        want = APP_TOKEN if method == "apps.connections.open" else BOT_TOKEN
        if request.headers.get("Authorization") != f"Bearer {want}":
            return _error(200, "invalid_auth")
        if self._failures[method]:
            status, error, retry_after = self._failures[method].popleft()
            return _error(status, error, retry_after)
        handler = getattr(self, "_" + method.replace(".", "_"), None)
        if handler is None:
            return _error(200, "unknown_method")
        return await handler(params)  # type: ignore[no-any-return]

    async def _auth_test(self, params: dict[str, Any]) -> web.Response:
        return _ok(
            url="https://team.slack.com/",
            team="Team",
            user=BOT_NAME,
            team_id=TEAM,
            user_id=BOT_USER,
            bot_id="B0BOT",
        )

    async def _apps_connections_open(self, params: dict[str, Any]) -> web.Response:
        return _ok(url=f"{self.url.replace('http://', 'ws://')}/link/?ticket={next(self._ids)}")

    async def _users_info(self, params: dict[str, Any]) -> web.Response:
        user = params.get("user", "")
        name = USERS.get(user, user)
        return _ok(
            user={"id": user, "name": name.lower(), "profile": {"display_name": name, "real_name": name}}
        )

    async def _files_info(self, params: dict[str, Any]) -> web.Response:
        file_id = params.get("file", "")
        if file_id not in self.files:
            return _error(200, "file_not_found")
        return _ok(file=self._file_json(file_id))

    async def _file(self, request: web.Request) -> web.Response:
        self.calls.append(Call("download", {"path": request.path}, time.monotonic()))
        if request.headers.get("Authorization") != f"Bearer {BOT_TOKEN}":
            return web.Response(status=302, headers={"Location": "/login"})  # Slack's answer without a token
        found = self.files.get(request.match_info["file_id"])
        if found is None:
            return web.Response(status=404)
        return web.Response(body=found[1], content_type="application/octet-stream")

    async def _files_getUploadURLExternal(self, params: dict[str, Any]) -> web.Response:
        file_id = f"F9{next(self._ids):04d}"
        self.uploads[file_id] = (str(params.get("filename")), None)
        return _ok(upload_url=f"{self.url}/upload/{file_id}", file_id=file_id)

    async def _upload(self, request: web.Request) -> web.Response:
        file_id = request.match_info["file_id"]
        if file_id not in self.uploads:
            return web.Response(status=404)
        self.uploads[file_id] = (self.uploads[file_id][0], await request.read())
        self._wake()
        return web.Response(text=f"OK - {len(self.uploads[file_id][1] or b'')}")

    async def _files_completeUploadExternal(self, params: dict[str, Any]) -> web.Response:
        done = [f for f in params.get("files") or [] if self.uploads.get(f["id"], ("", None))[1] is not None]
        if not done or len(done) != len(params.get("files") or []):
            return _error(200, "file_not_found")  # completed before the bytes were uploaded
        comment = str(params.get("initial_comment") or "")
        message = BotMessage(
            channel=params["channel_id"],
            ts=self.next_ts(),
            text=comment,
            thread_ts=params.get("thread_ts") or None,
            versions=[comment],
            files=[self.uploads[f["id"]][0] for f in done],
        )
        self.messages.append(message)
        return _ok(files=[{"id": f["id"], "title": f.get("title")} for f in done])

    def _text(self, params: dict[str, Any]) -> tuple[str, web.Response | None]:
        text = str(params.get("text") or "")
        if not text.strip() and not params.get("blocks"):
            return "", _error(200, "no_text")
        if len(text) > TEXT_LIMIT:
            return "", _error(200, "msg_too_long")
        return text, None

    async def _chat_postMessage(self, params: dict[str, Any]) -> web.Response:
        text, problem = self._text(params)
        if problem is not None:
            return problem
        message = BotMessage(
            channel=params["channel"],
            ts=self.next_ts(),
            text=text,
            thread_ts=params.get("thread_ts") or None,
            blocks=list(params.get("blocks") or []),
            versions=[text],
        )
        self.messages.append(message)
        return _ok(channel=message.channel, ts=message.ts, message={"text": text, "ts": message.ts})

    async def _chat_update(self, params: dict[str, Any]) -> web.Response:
        text, problem = self._text(params)
        if problem is not None:
            return problem
        found = [m for m in self.messages if m.channel == params.get("channel") and m.ts == params.get("ts")]
        if not found or found[0].deleted:
            return _error(200, "message_not_found")
        message = found[0]
        message.text = text
        if "blocks" in params:  # Slack keeps the blocks unless the update names them
            message.blocks = list(params["blocks"] or [])
        message.versions.append(text)
        return _ok(channel=message.channel, ts=message.ts, text=text)

    async def _chat_delete(self, params: dict[str, Any]) -> web.Response:
        for m in self.messages:
            if m.channel == params.get("channel") and m.ts == params.get("ts"):
                m.deleted = True
        return _ok(channel=params.get("channel"), ts=params.get("ts"))

    async def _chat_postEphemeral(self, params: dict[str, Any]) -> web.Response:
        self.ephemeral.append(params)
        return _ok(message_ts=self.next_ts())


def _ok(**fields: Any) -> web.Response:
    return web.json_response({"ok": True, **fields})


def _error(status: int, error: str, retry_after: int | None = None) -> web.Response:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return web.json_response({"ok": False, "error": error}, status=status, headers=headers)


def slack_server() -> AbstractAsyncContextManager[FakeSlack]:
    """Serve a :class:`FakeSlack` on 127.0.0.1 (a free port) in the current event loop."""
    return serve_fake(FakeSlack(), access_log=None)


__all__ = [
    "APP_TOKEN",
    "BOT_NAME",
    "BOT_TOKEN",
    "BOT_USER",
    "TEAM",
    "BotMessage",
    "Call",
    "Envelope",
    "FakeSlack",
    "slack_server",
]
