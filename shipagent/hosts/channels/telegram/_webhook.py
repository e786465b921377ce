"""Webhook mode: Telegram POSTs each update to ``webhookUrl``; a small listener owned by the channel.

The listener answers 200 only after the channel handed the update to the pipeline and the
pipeline recorded it (the dedupe record is on disk, as the poll loop has it before it moves its
offset). Anything else is answered with an error status, and Telegram delivers the update again
later: a process killed before its 200 gets the update again after its restart, and the dedupe
record stops a second answer when the kill came between the record and the 200. A wrong or missing
``X-Telegram-Bot-Api-Secret-Token`` is a 403 (compared in constant time) and never reaches the
pipeline; a body over :data:`MAX_BODY_BYTES` is a 413 (an update is a few kilobytes).

On stop the webhook is left set on purpose: Telegram keeps the updates that arrive meanwhile and
delivers them when the listener answers again (a restart or a deploy loses nothing), a ``kill -9``
could not delete it anyway (so a stopped process and a crashed one behave the same), and a second
instance behind the same URL keeps receiving. Polling mode deletes the webhook when it starts.

A webhook fails silently from the bot's side (Telegram simply stops reaching it), so
:class:`WebhookMode` asks ``getWebhookInfo`` every ``check_interval`` seconds: a webhook removed or
pointed elsewhere by another process, and a delivery error Telegram reports after the last update
that reached us, turn the health to not connected with the reason.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.to_thread
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import Receive, Scope, Send
from telegram import Bot
from telegram.error import TelegramError

from .._listener import Listener
from .._types import ChannelHealth
from ._wire import ALLOWED_UPDATES

if TYPE_CHECKING:
    from ...._channels_config import TelegramConfig

__all__ = ["MAX_BODY_BYTES", "BadUpdate", "WebhookListener", "WebhookMode"]

log = logging.getLogger("shipagent.channels.telegram")

MAX_BODY_BYTES = 1024 * 1024
"""The largest request body the listener reads (Telegram's updates are a few kilobytes)."""
_SECRET_HEADER = b"x-telegram-bot-api-secret-token"


class BadUpdate(ValueError):
    """The body is not a Telegram update (answered 400: delivering it again would not help)."""


Handler = Callable[[dict[str, Any]], Awaitable[None]]
"""Takes one update (its JSON); returns once the pipeline recorded it, raises if it could not."""


class WebhookListener:
    """An ASGI app on its own uvicorn server: POSTs to ``path`` with the secret go to ``handle``.

    Args:
        path: the only path served (``webhookUrl``'s path); anything else is a 404.
        secret: the ``X-Telegram-Bot-Api-Secret-Token`` every request must carry.
        address: the host and port to bind.
        listen: the same as written in ship.json ``webhookListen`` (for messages).
        handle: called with each update's JSON (see :data:`Handler`).
        on_error: told what went wrong when ``handle`` fails (the channel's health).
    """

    def __init__(
        self,
        *,
        path: str,
        secret: str,
        address: tuple[str, int],
        listen: str,
        handle: Handler,
        on_error: Callable[[str], None],
    ) -> None:
        self.path = path
        self.address = address
        self.listen = listen
        self._secret = secret.encode()
        self._handle = handle
        self._on_error = on_error
        self._listener = Listener(
            self, address, listen=listen, key="channels.telegram.webhookListen", what="the webhook listener"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        response = await self._respond(Request(scope, receive), scope)
        await response(scope, receive, send)

    async def _respond(self, request: Request, scope: Scope) -> Response:
        raw_path = scope.get("raw_path") or scope["path"].encode()
        if raw_path != self.path.encode():
            return PlainTextResponse("not found", 404)
        if request.method != "POST":
            return PlainTextResponse("method not allowed", 405, headers={"Allow": "POST"})
        given = dict(scope["headers"]).get(_SECRET_HEADER, b"")
        if not hmac.compare_digest(given, self._secret):
            log.warning("telegram: a webhook request without the right secret token was refused (403)")
            return PlainTextResponse("forbidden", 403)
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return PlainTextResponse("request body too large", 413)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                return PlainTextResponse("request body too large", 413)
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("update_id"), int):
            log.warning("telegram: a webhook request was not a JSON update (400)")
            return PlainTextResponse("not a Telegram update", 400)
        try:
            await self._handle(data)
        except BadUpdate as exc:  # delivering it again would not help
            log.warning("telegram: webhook update %s refused: %s", data["update_id"], exc)
            return PlainTextResponse("not a Telegram update", 400)
        except Exception as exc:  # not recorded: a non-2xx makes Telegram deliver it again
            self._on_error(f"webhook update {data['update_id']} not accepted: {type(exc).__name__}: {exc}")
            return PlainTextResponse("not accepted; deliver again", 500)
        return PlainTextResponse("ok")

    async def start(self, tasks: anyio.abc.TaskGroup) -> None:
        """Bind ``listen`` and serve in ``tasks``; returns once requests are answered."""
        await self._listener.start(tasks)

    @property
    def port(self) -> int:
        """The port bound (known once :meth:`start` returned)."""
        return self._listener.port

    async def stop(self) -> None:
        """Stop taking requests; the ones in flight finish (uvicorn's graceful shutdown)."""
        await self._listener.stop()


class WebhookMode:
    """The webhook's life with the channel: listener up, ``setWebhook``, then ``getWebhookInfo`` checks.

    Args:
        bot: the started PTB bot.
        config: ``channels.telegram`` (``mode: webhook``, so its URL and secret are set).
        health: the channel's health (``connected``, ``last_error``, ``details["pending"]``).
        handle: takes one update's JSON (see :data:`Handler`).
        fail: the channel's way to report a problem (not connected, the reason, a log line).
        check_interval: seconds between two ``getWebhookInfo`` checks.
    """

    def __init__(
        self,
        bot: Bot,
        config: TelegramConfig,
        health: ChannelHealth,
        *,
        handle: Handler,
        fail: Callable[[str], None],
        check_interval: float = 60.0,
    ) -> None:
        assert config.webhook_url is not None and config.secret_token is not None  # the config checks
        self.bot = bot
        self.url = config.webhook_url
        self.secret = config.secret_token
        self.health = health
        self.check_interval = check_interval
        self._handle = handle
        self._fail = fail
        self._last_ok = 0.0  # wall-clock time of the last update accepted (compared with Telegram's)
        self._seen_error: datetime | None = None
        self.listener = WebhookListener(
            path=config.webhook_path,
            secret=config.secret_token,
            address=config.webhook_address,
            listen=config.webhook_listen,
            handle=self._accepted,
            on_error=fail,
        )

    async def _accepted(self, data: dict[str, Any]) -> None:
        await self._handle(data)
        self._last_ok = time.time()
        self.health.connected = True  # an update came through: the webhook works

    async def start(self, tasks: anyio.abc.TaskGroup) -> None:
        """Listen first (Telegram may post at once), then point the bot's webhook here."""
        await self.listener.start(tasks)
        try:
            await self.bot.set_webhook(
                self.url,
                secret_token=self.secret,
                allowed_updates=ALLOWED_UPDATES,
                drop_pending_updates=False,  # what arrived while nobody listened is still answered
            )
            info = await self.bot.get_webhook_info()
        except BaseException:
            await self.listener.stop()
            raise
        self._seen_error = info.last_error_date  # an error from before this start is history
        self.health.details["pending"] = str(info.pending_update_count)
        self.health.details["webhook"] = f"listening on {self.listener.listen}"
        tasks.start_soon(self._watch)

    async def stop(self) -> None:
        """Stop the listener; the webhook stays set (see the module's docstring for why)."""
        await self.listener.stop()

    async def _watch(self) -> None:
        while True:
            await anyio.sleep(self.check_interval)
            await self.check()

    async def check(self) -> None:
        """Ask Telegram how the webhook is doing and put the answer in the health."""
        try:
            info = await self.bot.get_webhook_info()
        except TelegramError as exc:
            self._fail(f"getWebhookInfo failed: {type(exc).__name__}: {exc}")
            return
        self.health.details["pending"] = str(info.pending_update_count)
        if info.url != self.url:
            now = "removed" if not info.url else "pointed at another URL"
            self._fail(
                f"the bot's webhook was {now} (another process runs this bot?); "
                "updates no longer come here: stop the other process, then restart this one"
            )
            return
        error = info.last_error_date
        if error is not None and (self._seen_error is None or error > self._seen_error):
            self._seen_error = error
            if error.timestamp() > self._last_ok:  # no update reached us after it: still failing
                self._fail(
                    "Telegram could not deliver to the webhook: "
                    f"{info.last_error_message or 'no reason given'} "
                    f"({info.pending_update_count} update(s) waiting)"
                )
                return
        self.health.connected = True  # ours, and no new failure reported
