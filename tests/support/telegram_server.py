"""A local server speaking the Telegram Bot API over HTTP, for testing the Telegram channel for real.

PTB is pointed at it through its ``base_url`` (ship.json ``apiRoot``), so every request goes over a
socket, through PTB's HTTP layer, to here. The server keeps what Telegram keeps: pending updates
until a ``getUpdates`` offset confirms them, the bot's messages and their current text. It checks
what Telegram checks (HTML must parse, a message is at most 4,096 characters, an edit must change
something) and records every call with its arrival time (``time.monotonic``) for the tests.

Tests inject user messages (:meth:`FakeTelegram.user_message`), failures
(:meth:`FakeTelegram.fail_next`: a 429 with ``retry_after``, a 409), stalled polls and rejected
markup. A webhook set with ``setWebhook`` is kept as Telegram keeps it (``getUpdates`` is a 409
meanwhile); :meth:`FakeTelegram.deliver` posts an update to it the way Telegram does. Files the
bot sends (``sendDocument``, ``sendPhoto``) are recorded with their bytes.
"""

from __future__ import annotations

import html
import json
import socket
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import anyio
import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

TOKEN = "123456:TEST-token-do-not-log"
BOT_ID = 123456
BOT_USERNAME = "ship_bot"

_INTS = {"chat_id", "message_id", "message_thread_id", "offset", "timeout", "limit", "reply_to_message_id"}
_JSON = {"allowed_updates", "commands", "reply_markup", "link_preview_options", "reply_parameters"}
_TAGS = {
    "b",
    "strong",
    "i",
    "em",
    "u",
    "ins",
    "s",
    "strike",
    "del",
    "code",
    "pre",
    "a",
    "blockquote",
    "tg-spoiler",
    "span",
}


@dataclass(frozen=True, slots=True)
class Call:
    """One request the bot made: the method, its parameters, when it arrived."""

    method: str
    params: dict[str, Any]
    at: float


@dataclass(slots=True)
class BotMessage:
    """A message the bot sent, as Telegram shows it now."""

    chat_id: int
    message_id: int
    text: str
    thread_id: int | None
    parse_mode: str | None
    deleted: bool = False
    versions: list[str] = field(default_factory=list)
    buttons: list[dict[str, Any]] = field(default_factory=list)
    """The inline buttons under the message now (an edit without ``reply_markup`` removes them)."""
    markup: str = ""
    """The text as the bot last sent it (HTML before parsing, when ``parse_mode`` is HTML)."""


class _Parse(HTMLParser):
    """Telegram's HTML check: known tags only, balanced; collects the visible text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.text: list[str] = []
        self.error: str | None = None

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag not in _TAGS:
            self.error = self.error or f'unsupported start tag "{tag}"'
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.error = self.error or f'unexpected end tag "{tag}"'
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def visible_text(body: str, parse_mode: str | None) -> tuple[str, str | None]:
    """The text a user sees, and the parse error Telegram would give (``None``: it parses)."""
    if parse_mode != "HTML":
        return body, None
    parser = _Parse()
    parser.feed(body)
    parser.close()
    if parser.error is None and parser.stack:
        parser.error = f'can\'t find end tag corresponding to start tag "{parser.stack[-1]}"'
    return "".join(parser.text), parser.error


class FakeTelegram:
    """The server's state and its Starlette app."""

    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.url = ""
        self.calls: list[Call] = []
        self.updates: list[dict[str, Any]] = []
        self.messages: list[BotMessage] = []
        self.reject_html = False
        self.redeliver_confirmed = False  # as if the bot crashed before its next poll confirmed them
        self.stall_polls = 0
        self.longest_poll: float | None = None
        """Answer a long poll with no updates after at most this many seconds (Telegram may return
        before the timeout the bot asked for): a test that waits for the next poll need not wait
        out the bot's 30-second one."""
        self.webhook: dict[str, Any] | None = None  # setWebhook's parameters while one is set
        self.webhook_error: tuple[int, str] | None = None  # (Unix time, text) getWebhookInfo reports
        self._failures: dict[str, deque[tuple[int, str, int | None]]] = defaultdict(deque)
        self._next_update = 1
        self._next_message = {}  # chat id -> next message id
        self._changed = anyio.Event()
        self._closing = anyio.Event()
        self._confirmed = 0
        self.replays: list[dict[str, Any]] = []  # updates to send again in the next poll's answer
        self.files: dict[str, bytes] = {}  # file id -> content, served by getFile and /file/bot…
        self.app = Starlette(
            routes=[
                Route("/bot{token}/{method}", self._endpoint, methods=["GET", "POST"]),
                Route("/file/bot{token}/{path:path}", self._file, methods=["GET"]),
            ]
        )

    # -- what tests do ----------------------------------------------------------------------------

    def _msg_id(self, chat_id: int) -> int:
        n = self._next_message.get(chat_id, 1000)
        self._next_message[chat_id] = n + 1
        return n

    def user_message(
        self,
        text: str,
        *,
        chat_id: int = 42,
        user_id: int = 7,
        name: str = "Ada",
        chat_type: str = "private",
        thread_id: int | None = None,
        reply_to: BotMessage | None = None,
        is_bot: bool = False,
        message_id: int | None = None,
        document: tuple[str, bytes] | None = None,
    ) -> dict[str, Any]:
        """Queue an update carrying a user's message (mentions and commands get their entities)."""
        chat: dict[str, Any] = {"id": chat_id, "type": chat_type}
        if chat_type != "private":
            chat["title"] = "Team"
            if thread_id is not None:
                chat["is_forum"] = True
        else:
            chat["first_name"] = name
        message: dict[str, Any] = {
            "message_id": message_id if message_id is not None else self._msg_id(chat_id),
            "date": int(time.time()),
            "chat": chat,
            "from": {"id": user_id, "is_bot": is_bot, "first_name": name},
            "text": text,
        }
        entities = []
        if text.startswith("/"):
            entities.append({"type": "bot_command", "offset": 0, "length": len(text.split()[0])})
        at = text.find("@")
        while at != -1:
            end = at + 1
            while end < len(text) and (text[end].isalnum() or text[end] == "_"):
                end += 1
            if end - at > 1 and not (entities and entities[0]["offset"] == 0 and at < entities[0]["length"]):
                entities.append({"type": "mention", "offset": at, "length": end - at})
            at = text.find("@", end)
        if entities:
            message["entities"] = entities
        if document is not None:  # a file with a caption
            name, content = document
            file_id = f"doc{len(self.files) + 1}"
            self.files[file_id] = content
            message["document"] = {
                "file_id": file_id,
                "file_unique_id": f"u{file_id}",
                "file_name": name,
                "file_size": len(content),
                "mime_type": "text/plain",
            }
            caption = message.pop("text")
            if caption:  # Telegram leaves out the caption of a file sent without one
                message["caption"] = caption
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        if reply_to is not None:
            message["reply_to_message"] = {
                "message_id": reply_to.message_id,
                "date": int(time.time()),
                "chat": chat,
                "from": {"id": BOT_ID, "is_bot": True, "first_name": "Ship", "username": BOT_USERNAME},
                "text": reply_to.text,
            }
        update = {"update_id": self._next_update, "message": message}
        self._next_update += 1
        self.updates.append(update)
        self._wake()
        return update

    def press(self, message: BotMessage, data: str, *, user_id: int = 7, name: str = "Ada") -> dict[str, Any]:
        """Queue an update: a user pressed the inline button with ``data`` under ``message``."""
        query = {
            "id": f"cb{self._next_update}",
            "from": {"id": user_id, "is_bot": False, "first_name": name},
            "chat_instance": "ci",
            "data": data,
            "message": self._message_json(message),
        }
        update = {"update_id": self._next_update, "callback_query": query}
        self._next_update += 1
        self.updates.append(update)
        self._wake()
        return update

    def replay(self, update: dict[str, Any]) -> None:
        """Send ``update`` again (same update id) in the next poll's answer, as Telegram does when
        the offset that confirmed it never reached it; ``replays`` is empty once it went out."""
        self.replays.append(update)
        self._wake()

    async def deliver(self, update: dict[str, Any], *, secret: str | None = None) -> int:
        """POST ``update`` to the webhook as Telegram does (its secret header unless ``secret``)."""
        assert self.webhook is not None, "no webhook is set"
        token = self.webhook.get("secret_token") if secret is None else secret
        headers = {"X-Telegram-Bot-Api-Secret-Token": token} if token else {}
        async with httpx.AsyncClient(timeout=20) as client:
            response = await client.post(self.webhook["url"], json=update, headers=headers)
        return response.status_code

    def fail_next(
        self, method: str, status: int, description: str, *, retry_after: int | None = None
    ) -> None:
        """The next call of ``method`` fails with this status (and ``retry_after`` for a 429)."""
        self._failures[method].append((status, description, retry_after))

    def called(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    def shown(self, chat_id: int = 42) -> list[BotMessage]:
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

    # -- the Bot API ------------------------------------------------------------------------------

    async def _endpoint(self, request: Request) -> JSONResponse:
        if request.path_params["token"] != self.token:
            return _error(401, "Unauthorized")
        method = request.path_params["method"]
        raw: dict[str, Any] = {}
        if request.headers.get("content-type", "").startswith("application/json"):
            raw = await request.json()
        else:
            raw = dict(await request.form())
        params = {
            k: (int(v) if k in _INTS else json.loads(v) if k in _JSON and isinstance(v, str) else v)
            for k, v in raw.items()
        }
        self.calls.append(Call(method, params, time.monotonic()))
        self._wake()
        if self._failures[method]:
            status, description, retry_after = self._failures[method].popleft()
            return _error(status, description, retry_after)
        handler = getattr(self, f"_{method}", None)
        if handler is None:
            return _error(404, "Not Found: method not found")
        return await handler(params)  # type: ignore[no-any-return]

    async def _getMe(self, params: dict[str, Any]) -> JSONResponse:
        return _ok(
            {
                "id": BOT_ID,
                "is_bot": True,
                "first_name": "Ship",
                "username": BOT_USERNAME,
                "can_join_groups": True,
                "can_read_all_group_messages": False,
                "supports_inline_queries": False,
            }
        )

    async def _deleteWebhook(self, params: dict[str, Any]) -> JSONResponse:
        self.webhook = None
        return _ok(True)

    async def _setWebhook(self, params: dict[str, Any]) -> JSONResponse:
        drop = params.get("drop_pending_updates")
        self.webhook = {**params, "drop_pending_updates": json.loads(drop) if isinstance(drop, str) else drop}
        return _ok(True)

    async def _getWebhookInfo(self, params: dict[str, Any]) -> JSONResponse:
        url = self.webhook["url"] if self.webhook else ""
        info: dict[str, Any] = {"url": url, "has_custom_certificate": False, "pending_update_count": 0}
        if self.webhook_error is not None:
            info["last_error_date"], info["last_error_message"] = self.webhook_error
        return _ok(info)

    async def _setMyCommands(self, params: dict[str, Any]) -> JSONResponse:
        return _ok(True)

    async def _sendChatAction(self, params: dict[str, Any]) -> JSONResponse:
        return _ok(True)

    async def _answerCallbackQuery(self, params: dict[str, Any]) -> JSONResponse:
        return _ok(True)

    async def _getFile(self, params: dict[str, Any]) -> JSONResponse:
        file_id = params.get("file_id", "")
        if file_id not in self.files:
            return _error(400, "Bad Request: invalid file_id")
        size = len(self.files[file_id])
        path = f"documents/{file_id}"
        return _ok(
            {"file_id": file_id, "file_unique_id": f"u{file_id}", "file_size": size, "file_path": path}
        )

    async def _file(self, request: Request) -> Response:
        if request.path_params["token"] != self.token:
            return Response(status_code=401)
        self.calls.append(Call("download", {"path": request.path_params["path"]}, time.monotonic()))
        file_id = request.path_params["path"].rpartition("/")[2]
        if file_id not in self.files:
            return Response(status_code=404)
        return Response(self.files[file_id], media_type="application/octet-stream")

    async def _getUpdates(self, params: dict[str, Any]) -> JSONResponse:
        if self.webhook is not None:
            return _error(409, "Conflict: can't use getUpdates method while webhook is active")
        offset = params.get("offset")
        if offset is not None and not self.redeliver_confirmed:
            self._confirmed = max(self._confirmed, offset - 1)
        if self.stall_polls > 0:
            self.stall_polls -= 1
            with anyio.move_on_after(60):
                await self._closing.wait()
            return _ok([])
        timeout = float(params.get("timeout", 0))
        if self.longest_poll is not None:
            timeout = min(timeout, self.longest_poll)
        with anyio.move_on_after(timeout):
            while not self._pending() and not self._closing.is_set():
                await self._changed.wait()
        batch = self._pending()[: int(params.get("limit", 100))]
        self.replays = [u for u in self.replays if u not in batch]
        return _ok(batch)

    def _pending(self) -> list[dict[str, Any]]:
        return [*self.replays, *(u for u in self.updates if u["update_id"] > self._confirmed)]

    def _check(self, params: dict[str, Any]) -> tuple[str, JSONResponse | None]:
        mode = params.get("parse_mode") or None
        if mode == "HTML" and self.reject_html:
            return "", _error(
                400, 'Bad Request: can\'t parse entities: unsupported start tag "b" at byte offset 0'
            )
        text, problem = visible_text(params.get("text", ""), mode)
        if problem is not None:
            return "", _error(400, f"Bad Request: can't parse entities: {problem}")
        if not text.strip():
            return "", _error(400, "Bad Request: message text is empty")
        if len(text) > 4096:
            return "", _error(400, "Bad Request: message is too long")
        return text, None

    async def _sendMessage(self, params: dict[str, Any]) -> JSONResponse:
        text, problem = self._check(params)
        if problem is not None:
            return problem
        chat_id = params["chat_id"]
        message = BotMessage(
            chat_id, self._msg_id(chat_id), text, params.get("message_thread_id"), params.get("parse_mode")
        )
        message.versions.append(text)
        message.markup = params.get("text", "")
        message.buttons = [
            b for row in (params.get("reply_markup") or {}).get("inline_keyboard", []) for b in row
        ]
        self.messages.append(message)
        return _ok(self._message_json(message))

    async def _editMessageText(self, params: dict[str, Any]) -> JSONResponse:
        text, problem = self._check(params)
        if problem is not None:
            return problem
        found = [
            m
            for m in self.messages
            if m.chat_id == params["chat_id"] and m.message_id == params["message_id"] and not m.deleted
        ]
        if not found:
            return _error(400, "Bad Request: message to edit not found")
        message = found[0]
        mode = params.get("parse_mode")
        if message.text == text and message.parse_mode == mode:
            return _error(
                400,
                "Bad Request: message is not modified: specified new message content and reply markup are exactly the same",
            )
        message.text, message.parse_mode = text, mode
        message.versions.append(text)
        message.markup = params.get("text", "")
        message.buttons = [
            b for row in (params.get("reply_markup") or {}).get("inline_keyboard", []) for b in row
        ]
        return _ok(self._message_json(message))

    async def _sendDocument(self, params: dict[str, Any]) -> JSONResponse:
        """sendDocument and sendPhoto: the upload becomes ``(file name, bytes)`` in the recorded call's
        params; the message shows the caption (checked like a text, at most 1,024 characters)."""
        kind = "photo" if "photo" in params else "document"
        upload = params.get(kind)
        if not hasattr(upload, "read"):
            return _error(400, f"Bad Request: there is no {kind} in the request")
        params[kind] = (upload.filename, await upload.read())
        caption, problem = visible_text(params.get("caption", ""), params.get("parse_mode") or None)
        if problem is not None or len(caption) > 1024:
            return _error(
                400,
                f"Bad Request: can't parse entities: {problem}"
                if problem
                else "Bad Request: caption is too long",
            )
        chat_id = params["chat_id"]
        message = BotMessage(
            chat_id, self._msg_id(chat_id), caption, params.get("message_thread_id"), params.get("parse_mode")
        )
        self.messages.append(message)
        body = self._message_json(message)
        body["caption"] = body.pop("text")
        sent = {
            "file_id": f"sent{message.message_id}",
            "file_unique_id": f"u{message.message_id}",
            "file_size": len(params[kind][1]),
        }
        body[kind] = (
            [{**sent, "width": 1, "height": 1}] if kind == "photo" else {**sent, "file_name": upload.filename}
        )
        return _ok(body)

    _sendPhoto = _sendDocument

    async def _deleteMessage(self, params: dict[str, Any]) -> JSONResponse:
        for m in self.messages:
            if m.chat_id == params["chat_id"] and m.message_id == params["message_id"]:
                m.deleted = True
        return _ok(True)

    def _message_json(self, message: BotMessage) -> dict[str, Any]:
        body: dict[str, Any] = {
            "message_id": message.message_id,
            "date": int(time.time()),
            "chat": {"id": message.chat_id, "type": "private" if message.chat_id > 0 else "supergroup"},
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "Ship", "username": BOT_USERNAME},
            "text": message.text,
        }
        if message.thread_id is not None:
            body["message_thread_id"] = message.thread_id
            body["is_topic_message"] = True
        return body


def _ok(result: Any) -> JSONResponse:
    return JSONResponse({"ok": True, "result": result})


def _error(status: int, description: str, retry_after: int | None = None) -> JSONResponse:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if retry_after is not None:
        body["parameters"] = {"retry_after": retry_after}
    return JSONResponse(body, status_code=status)


@asynccontextmanager
async def telegram_server() -> AsyncIterator[FakeTelegram]:
    """Serve a :class:`FakeTelegram` on 127.0.0.1 (a free port) in the current event loop."""
    fake = FakeTelegram()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        fake.app, log_level="warning", lifespan="off", access_log=False, timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: server.serve(sockets=[sock]))
        with anyio.fail_after(20):
            while not server.started:  # noqa: ASYNC110 - uvicorn offers a flag, not an event
                await anyio.sleep(0.01)
        fake.url = f"http://127.0.0.1:{port}"
        try:
            yield fake
        finally:
            fake._closing.set()
            fake._wake()
            server.should_exit = True
    sock.close()


__all__ = [
    "BOT_ID",
    "BOT_USERNAME",
    "TOKEN",
    "BotMessage",
    "Call",
    "FakeTelegram",
    "html",
    "telegram_server",
    "visible_text",
]
