"""The ASGI app: routes, auth, limits, the access log, and the agent's lifespan.

Why Starlette (and uvicorn): it is small, plain ASGI, streams responses natively (SSE is a
``StreamingResponse``), and brings no validation framework of its own — request bodies here are a
few fields, checked by hand with errors that name the field. FastAPI would add a second pydantic
layer and an OpenAPI surface this API does not need; both are already installed through ``mcp``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, nullcontext
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...agent._agent import ShipAgent
from ...config import ServeApiKey
from ...errors import ConfigError, ShipAgentError
from ..channels import ChannelHost
from ._auth import Auth
from ._guard import BrowserGuard
from ._routes import Api
from ._state import ServeState
from ._wire import ApiError, JSONResponse, error_response

__all__ = ["ServeState", "create_app"]

log = logging.getLogger("shipagent.hosts.serve")
access_log = logging.getLogger("shipagent.hosts.serve.access")
STATIC_DIR = Path(__file__).parent / "static"
_PLACEHOLDER = (
    "<!doctype html><meta charset=utf-8><title>shipagent</title>"
    "<p>shipagent is serving. The web page is not installed; the API is at <code>/v1/</code>.</p>"
)


class AccessLog:
    """One log line per request: client, method, path, status, duration. No bodies, no headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 0

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            client = scope.get("client")
            path = bytes(scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
            access_log.info(
                "%s %s %s %d %.1fms",
                client[0] if client else "-",
                scope["method"],
                path.split("?", 1)[0],
                status or 499,  # 499: the client left before a response started
                (time.perf_counter() - start) * 1000,
            )


def _handle(
    handler: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiError as exc:
            headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
            return error_response(exc, headers)
        except ShipAgentError as exc:  # a bad chat key or argument from the caller
            return error_response(ApiError(400, type(exc).__name__, str(exc)))
        except ClientDisconnect:  # gone mid-body (or cut off by a body deadline): nobody to answer
            return error_response(ApiError(400, "client_disconnected", "the client left mid-request"))

    return endpoint


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    kinds = {404: "not_found", 405: "method_not_allowed"}
    detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
    return JSONResponse({"error": {"type": kinds.get(status, "http_error"), "message": detail}}, status)


def create_app(
    agent: ShipAgent,
    *,
    api_keys: Sequence[ServeApiKey | Mapping[str, Any] | str] | None = None,
    channels: bool = True,
) -> ASGIApp:
    """The ASGI app serving ``agent``: REST + SSE, OpenAI Chat Completions, the web page.

    The app's lifespan starts the agent (``async with agent``) and the chat channels ship.json
    enables (``channels``), and stops them on shutdown, after the running turns finished or
    ``serve.shutdownGraceSeconds`` passed.

    Args:
        agent: the agent to serve (not started yet, or started by the caller).
        api_keys: overrides ship.json ``serve.apiKeys``: ``ServeApiKey``s, their JSON form, or
            bare key strings (allowed every chat). ``None`` uses ship.json.
        channels: start the channels ship.json enables (Telegram) in this process, beside the API.

    Raises:
        ConfigError: an API key is malformed, or ``serve.corsOrigins`` is set without keys.
    """
    settings = agent.config.serve
    auth = Auth(settings.api_keys if api_keys is None else api_keys)
    if settings.cors_origins and not auth.enabled:
        raise ConfigError(
            "serve.corsOrigins needs serve.apiKeys: without keys any page on those origins could "
            "drive the agent",
            path="serve.corsOrigins",
        )
    state = ServeState(agent, auth, settings)
    api = Api(state)

    async def index(request: Request) -> Response:
        page = STATIC_DIR / "index.html"
        return FileResponse(page) if page.is_file() else HTMLResponse(_PLACEHOLDER)

    chat = "/v1/chats/{chat_key:path}"
    routes: list[BaseRoute] = [
        Route("/", index),
        Route("/healthz", api.healthz),
        Route("/v1/models", _handle(api.models)),
        Route("/v1/chats", _handle(api.list_chats)),
        Route(f"{chat}/messages", _handle(api.post_message), methods=["POST"]),
        Route(f"{chat}/transcript", _handle(api.transcript)),
        Route(f"{chat}/context", _handle(api.clear_context), methods=["DELETE"]),
        Route(f"{chat}/usage", _handle(api.usage)),
        Route(f"{chat}/context-files", _handle(api.context_files)),
        Route(f"{chat}/context-files/{{ref_id}}", _handle(api.context_file)),
        Route("/v1/chat/completions", _handle(api.chat_completions), methods=["POST"]),
        Route("/v1/approvals/{approval_id}", _handle(api.answer_approval), methods=["POST"]),
    ]
    if STATIC_DIR.is_dir():  # the web page's scripts and styles
        routes.append(Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with agent:  # MCP servers and providers start with the app and stop with it
            host = ChannelHost(agent) if channels else None
            async with host if host is not None and host.channels else nullcontext():
                state.channels = host if host is not None and host.channels else None
                for name, health in state.channels.health.items() if state.channels else ():
                    log.info("channel %s: running %s", name, health.details.get("bot", ""))
                log.info("serving %r (%d API key(s))", agent.config.name, len(auth.keys))
                yield
                await state.drain(settings.shutdown_grace_seconds)
            # (the channels stop after the HTTP turns drained: what they accepted is answered first)

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error, 500: _http_error},
    )
    app.state.serve = state
    guarded = BrowserGuard(
        app,
        keys=auth.enabled,
        allowed_hosts=settings.allowed_hosts,
        cors_origins=settings.cors_origins,
    )
    return AccessLog(guarded)
