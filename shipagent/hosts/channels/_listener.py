"""The small HTTP server a channel runs when the platform calls it (Telegram's webhook, Slack's
Events API): an ASGI app on its own uvicorn server, bound before it starts so an address in use
fails the channel's start with the ship.json key named, and stopped by the channel, not by
signals (the host process owns those).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import anyio.abc
import anyio.to_thread
import uvicorn
from starlette.types import ASGIApp

__all__ = ["Listener"]


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the host process stops the channel, not the listener."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _bind(host: str, port: int) -> socket.socket:
    """A listening-ready socket on ``host:port`` (bound here so an address in use fails the start)."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except BaseException:
        sock.close()
        raise
    return sock


class Listener:
    """``app`` served on ``address`` until :meth:`stop`.

    Args:
        app: the channel's ASGI app.
        address: the host and port to bind.
        listen: the address as ship.json writes it (for messages).
        key: the ship.json key that set the address, named when it cannot be bound.
        what: the listener in words, for the error when it does not start.
    """

    def __init__(self, app: ASGIApp, address: tuple[str, int], *, listen: str, key: str, what: str) -> None:
        self.app = app
        self.address = address
        self.listen = listen
        self.key = key
        self.what = what
        self.port = 0
        """The port bound (known once :meth:`start` returned)."""
        self._server: _Server | None = None
        self._done = anyio.Event()

    async def start(self, tasks: anyio.abc.TaskGroup) -> None:
        """Bind and serve in ``tasks``; returns once requests are answered."""
        try:
            sock = await anyio.to_thread.run_sync(_bind, *self.address)  # a name may need a DNS lookup
        except OSError as exc:
            raise OSError(
                exc.errno, f"could not listen on {self.listen} ({self.key}): {exc.strerror}"
            ) from None
        self.port = int(sock.getsockname()[1])
        config = uvicorn.Config(
            self.app,
            log_config=None,  # the host process's logging stays as it is
            access_log=False,
            lifespan="off",
            server_header=False,
            timeout_graceful_shutdown=5,
        )
        server = self._server = _Server(config)

        async def serve() -> None:
            try:
                await server.serve(sockets=[sock])
            finally:
                sock.close()
                self._done.set()

        tasks.start_soon(serve)
        with anyio.fail_after(20):
            while not server.started and not self._done.is_set():  # noqa: ASYNC110 - uvicorn offers a flag
                await anyio.sleep(0.01)
        if not server.started:
            raise RuntimeError(f"{self.what} on {self.listen} did not start")

    async def stop(self) -> None:
        """Stop taking requests; the ones in flight finish (uvicorn's graceful shutdown)."""
        if self._server is not None:
            self._server.should_exit = True
            await self._done.wait()
            self._server = None
