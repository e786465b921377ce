"""Loopback ports and servers for the tests (every server binds 127.0.0.1 only)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol, TypeVar

from aiohttp import web


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def serve_aiohttp(app: web.Application, **runner_options: Any) -> AsyncIterator[str]:
    """Serve the aiohttp ``app`` of a platform's fake on 127.0.0.1 (a free port) in the current
    event loop; yields its URL. ``runner_options`` go to ``web.AppRunner`` (e.g. ``access_log``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0, **runner_options)
    await runner.setup()
    try:
        await web.SockSite(runner, sock).start()
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        await runner.cleanup()
        sock.close()


class _Fake(Protocol):
    """A platform's fake: an aiohttp app, the URL it is served at, its open WebSockets."""

    app: web.Application
    url: str

    async def close_sockets(self) -> None: ...


FakeT = TypeVar("FakeT", bound=_Fake)


@asynccontextmanager
async def serve_fake(fake: FakeT, **runner_options: Any) -> AsyncIterator[FakeT]:
    """Serve ``fake`` (:func:`serve_aiohttp`) with its ``url`` set; its WebSockets are closed
    before the server stops, so a client's gateway sees the connection end."""
    async with serve_aiohttp(fake.app, **runner_options) as url:
        fake.url = url
        try:
            yield fake
        finally:
            await fake.close_sockets()
