"""The stdio transport of ship.json MCP servers: no orphan processes, no hang on a corrupt stream.

FastMCP's :class:`StdioTransport` runs the MCP SDK's ``stdio_client``, which starts the server in
a new session (its own process group) but leaves two gaps this module closes:

- **Orphans.** The SDK kills the server's process group only when the server does not exit after
  its stdin closes. A server that exits promptly leaves whatever it started in the background
  running. :meth:`ShipStdioTransport.kill_group` kills the whole group once the session is over,
  as ``exec_shell`` does for its commands.
- **Bytes that are not UTF-8.** The SDK decodes stdout strictly; the decode error ends its reader
  task without closing the session's stream, so the handshake waits for ``initTimeoutSeconds`` and
  every call for ``timeoutSeconds``. Here a decode error records a clear reason, kills the
  server's process group and ends the stream, so the session sees the connection close at once
  and the server is marked dead.

- **What the server is handed.** Only the variables its ship.json entry names, over the SDK's
  safe defaults (``HOME``, ``LOGNAME``, ``PATH``, ``SHELL``, ``TERM``, ``USER``) and ``LANG``
  (:func:`server_environment`), never the server's API keys; and stdin, stdout and stderr only:
  uvloop's spawn would pass every descriptor not marked close-on-exec, so they are marked first.

Both hooks sit at two module-level names of ``mcp.client.stdio`` (the process spawn and the text
decoder) and act only inside a connection of a :class:`ShipStdioTransport`, found through a context
variable that the SDK's connection task inherits; any other user of the SDK in the process is
unaffected.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from contextvars import ContextVar
from typing import Any

import anyio
import anyio.to_thread
import mcp.client.stdio as _sdk_stdio
from anyio.streams.text import TextReceiveStream
from fastmcp.client.transports import StdioTransport

from ...config import McpStdioServer
from .._confine import seal_descriptors

__all__ = ["ShipStdioTransport", "server_environment"]

logger = logging.getLogger("shipagent.tools.mcp")

_current: ContextVar[ShipStdioTransport | None] = ContextVar("shipagent_stdio_transport", default=None)
"""The transport connecting in this task. The MCP SDK spawns the server process
(``_create_platform_compatible_process``) and decodes its stdout (``TextReceiveStream``) deep
inside its own connection task, calling our hooks with its arguments only: no context of ours is
passed down to them, so they find their transport here (set around ``connect``)."""


class ShipStdioTransport(StdioTransport):
    """A FastMCP stdio transport that knows its server's process group and its stream's health."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pid: int | None = None
        """The server process's pid, which is also its process group id (a new session)."""
        self.problem: str | None = None
        """Why the stream broke (bytes that are not UTF-8), once it has."""

    async def connect(self, **kwargs: Any) -> Any:
        # The SDK's connection task is created inside: it copies this context, so the hooks below
        # find this transport while they run in that task and its children.
        token = _current.set(self)
        try:
            return await super().connect(**kwargs)
        finally:
            _current.reset(token)

    def kill_group(self) -> None:
        """SIGKILL every process left in the server's process group (the server and its children)."""
        pid, self.pid = self.pid, None
        if pid is None:
            return
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return  # nothing left in the group
        logger.debug("killed what was left of MCP server process group %d", pid)

    def broken(self, reason: str) -> None:
        """The stream is unusable: remember why and end the server so the session closes now."""
        if self.problem is None:
            self.problem = reason
            logger.debug("MCP server %s: %s", self.command, reason)
        pid = self.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


class _CheckedTextStream(TextReceiveStream):
    """The SDK's stdout decoder; in our connections a decode error ends the stream cleanly."""

    async def receive(self) -> str:
        try:
            return await super().receive()
        except UnicodeDecodeError as exc:
            transport = _current.get()
            if transport is None:
                raise
            transport.broken(
                f"the server wrote bytes that are not UTF-8 to stdout ({exc.reason} at byte {exc.start} "
                f"of a read); MCP over stdio is UTF-8 JSON-RPC"
            )
            raise anyio.EndOfStream from None


_original_spawn = getattr(_sdk_stdio, "_create_platform_compatible_process", None)


def server_environment(cfg: McpStdioServer) -> dict[str, str]:
    """A stdio server's whole environment: the SDK's safe defaults, ``LANG``, then its ``env``."""
    env = _sdk_stdio.get_default_environment()
    if "LANG" in os.environ:
        env["LANG"] = os.environ["LANG"]
    return {**env, **cfg.env}


async def _spawn(*args: Any, **kwargs: Any) -> Any:
    assert _original_spawn is not None
    await anyio.to_thread.run_sync(seal_descriptors)
    process = await _original_spawn(*args, **kwargs)
    transport = _current.get()
    if transport is not None:
        transport.pid = process.pid
    return process


def _install() -> None:
    """Put the two hooks in place (once); a future SDK without these names keeps its own behaviour."""
    if _original_spawn is None or getattr(_sdk_stdio, "TextReceiveStream", None) is not TextReceiveStream:
        if getattr(_sdk_stdio, "TextReceiveStream", None) is not _CheckedTextStream:
            logger.debug("mcp.client.stdio changed shape: stdio hooks not installed")
        return
    _sdk_stdio._create_platform_compatible_process = _spawn  # type: ignore[attr-defined]
    _sdk_stdio.TextReceiveStream = _CheckedTextStream  # type: ignore[attr-defined,misc]


_install()
