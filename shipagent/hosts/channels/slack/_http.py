"""HTTP mode: Slack's Events API POSTs each event, button click and slash command to a listener.

Every request is checked before anything else reads it: ``X-Slack-Signature`` must be ``v0=`` and
the HMAC-SHA256, keyed with the app's signing secret, of ``v0:{X-Slack-Request-Timestamp}:{body}``
(compared in constant time by slack-sdk's :class:`~slack_sdk.signature.SignatureVerifier`), and the
timestamp must be within five minutes of the listener's clock, so a request recorded once cannot be
replayed later. A request that fails is answered 401 with no body: the caller learns nothing about
why. Only then is the body parsed: JSON for the Events API (``url_verification`` is answered with
its ``challenge``; ``event_callback`` goes to the channel), form-encoded for interactivity
(``payload=`` JSON, ``block_actions`` for the approval buttons) and for slash commands.

Slack wants an answer within 3 seconds, or it sends the request again (``X-Slack-Retry-Num``).
The channel's handling runs in the listener's own task group, not in the request, and the request
waits for it at most :data:`ACK_WITHIN` seconds: a 200 once the pipeline recorded the message (as
Socket Mode acknowledges an envelope), a 500 if it could not be recorded (so Slack tries again), and
a 200 anyway when the handling takes longer (a slow ``users.info``): the work goes on after the
answer, and a retry of a message already recorded is dropped by the pipeline's dedupe.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

import anyio
import anyio.abc
import anyio.to_thread
from slack_sdk.signature import Clock, SignatureVerifier
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

from .._listener import Listener

__all__ = ["ACK_WITHIN", "MAX_BODY_BYTES", "EventsListener"]

log = logging.getLogger("shipagent.hosts.channels.slack")

MAX_BODY_BYTES = 1024 * 1024
"""The largest request body read (Slack's events and payloads are a few kilobytes)."""
ACK_WITHIN = 2.5
"""Seconds a request waits for its handling before it is answered 200 anyway (Slack allows 3)."""

Handler = Callable[[str, dict[str, Any]], Awaitable[None]]
"""Takes the kind (``events_api``, ``interactive``, ``slash_commands``) and the payload; returns
once the pipeline recorded it, raises if it could not."""


class _Clock(Clock):
    """slack-sdk's clock made of a function (tests give a fixed one; the channel ``time.time``)."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now

    def now(self) -> float:
        return self._now()


def _unauthorized() -> Response:
    return Response(status_code=401)


class EventsListener:
    """An ASGI app on its own uvicorn server: signed POSTs to ``path`` go to ``handle``.

    Args:
        path: the only path served (the Request URL's path); anything else is a 404.
        signing_secret: the app's signing secret (never logged).
        address: the host and port to bind.
        listen: ``httpListen`` as written in ship.json (for messages).
        handle: called with each request's kind and payload (see :data:`Handler`).
        on_error: told what went wrong when ``handle`` fails (the channel's health).
        clock: the time the request timestamps are compared with (``time.time`` if not given).
        ack_within: seconds a request waits for its handling (see :data:`ACK_WITHIN`).
    """

    def __init__(
        self,
        *,
        path: str,
        signing_secret: str,
        address: tuple[str, int],
        listen: str,
        handle: Handler,
        on_error: Callable[[str], None],
        clock: Callable[[], float] | None = None,
        ack_within: float = ACK_WITHIN,
    ) -> None:
        self.path = path
        self.ack_within = ack_within
        self.address = address
        self.listen = listen
        self._verifier = SignatureVerifier(signing_secret, _Clock(clock) if clock else Clock())
        self._handle = handle
        self._on_error = on_error
        self._tasks: anyio.abc.TaskGroup | None = None
        self._listener = Listener(
            self, address, listen=listen, key="channels.slack.httpListen", what="the Slack events listener"
        )
        self.refused = 0
        """Requests refused for a missing, wrong or stale signature."""
        self.retries = 0
        """Requests Slack marked as a retry (``X-Slack-Retry-Num``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        response = await self._respond(Request(scope, receive), scope)
        await response(scope, receive, send)

    async def _body(self, request: Request) -> bytes | None:
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return None
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                return None
        return bytes(body)

    def _signed(self, request: Request, body: bytes) -> bool:
        timestamp = request.headers.get("x-slack-request-timestamp")
        signature = request.headers.get("x-slack-signature")
        if not timestamp or not signature or not timestamp.isdigit():
            return False
        try:
            return self._verifier.is_valid(body=body, timestamp=timestamp, signature=signature)
        except (ValueError, UnicodeDecodeError):  # a body that is not UTF-8 was not signed by Slack
            return False

    async def _respond(self, request: Request, scope: Scope) -> Response:
        raw_path = scope.get("raw_path") or scope["path"].encode()
        if raw_path.partition(b"?")[0] != self.path.encode():
            return PlainTextResponse("not found", 404)
        if request.method != "POST":
            return PlainTextResponse("method not allowed", 405, headers={"Allow": "POST"})
        body = await self._body(request)
        if body is None:
            return PlainTextResponse("request body too large", 413)
        if not self._signed(request, body):
            self.refused += 1
            log.warning("slack: a request without a valid, fresh signature was refused (401)")
            return _unauthorized()
        retry = request.headers.get("x-slack-retry-num")
        if retry is not None:
            self.retries += 1
            log.info("slack: Slack's retry %s (%s)", retry, request.headers.get("x-slack-retry-reason", ""))
        found = _parse(request.headers.get("content-type", ""), body)
        if found is None:
            log.warning("slack: a signed request was not an event, a payload or a command (400)")
            return PlainTextResponse("not a Slack request", 400)
        kind, data = found
        if kind == "url_verification":
            return JSONResponse({"challenge": str(data.get("challenge") or "")})
        if kind == "events_api" and data.get("type") != "event_callback":
            return PlainTextResponse("")  # app_rate_limited and other notices: nothing to do
        return await self._hand_over(kind, data)

    async def _hand_over(self, kind: str, data: dict[str, Any]) -> Response:
        """Run the handling in the listener's task group; answer when it is done or time is up."""
        assert self._tasks is not None
        done = anyio.Event()
        failed: list[str] = []

        async def work() -> None:
            try:
                await self._handle(kind, data)
            except Exception as exc:  # not recorded: a 500 makes Slack send it again
                failed.append(f"{type(exc).__name__}: {exc}")
                self._on_error(f"a {kind} request was not accepted: {failed[0]}")
            finally:
                done.set()

        self._tasks.start_soon(work)
        with anyio.move_on_after(self.ack_within):
            await done.wait()
        if failed:
            return PlainTextResponse("not accepted; send again", 500)
        return PlainTextResponse("")

    async def start(self, tasks: anyio.abc.TaskGroup) -> None:
        """Bind ``listen`` and serve in ``tasks``; returns once requests are answered."""
        self._tasks = tasks
        await self._listener.start(tasks)

    @property
    def port(self) -> int:
        """The port bound (known once :meth:`start` returned)."""
        return self._listener.port

    async def stop(self) -> None:
        """Stop taking requests; the ones in flight finish (uvicorn's graceful shutdown)."""
        await self._listener.stop()


def _parse(content_type: str, body: bytes) -> tuple[str, dict[str, Any]] | None:
    """The request's kind and payload: an Events API JSON body, or a form (interactivity, a command)."""
    try:
        if content_type.startswith("application/json"):
            data = json.loads(body)
            if not isinstance(data, dict):
                return None
            return ("url_verification" if data.get("type") == "url_verification" else "events_api"), data
        form = {k: v[0] for k, v in parse_qs(body.decode(), keep_blank_values=True).items()}
        if "payload" in form:
            payload = json.loads(form["payload"])
            return ("interactive", payload) if isinstance(payload, dict) else None
        if "command" in form:
            return "slash_commands", form
    except (ValueError, RecursionError, UnicodeDecodeError):
        return None
    return None
