"""What ``McpManager`` reports about each server: the data behind ``shipagent mcp list``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["McpServerStatus", "McpToolInfo", "ServerState"]

ServerState = Literal["pending", "connected", "failed", "disabled", "stopped"]
"""``pending`` before start; ``failed`` covers both a failed start and a server that died later."""


@dataclass(frozen=True, slots=True)
class McpToolInfo:
    """One tool a server brought, under both of its names."""

    exposed: str
    """The name the model sees (``<server>__<tool>``, sanitized)."""
    original: str
    """The name the server listed and receives on a call."""
    description: str | None = None


@dataclass(frozen=True, slots=True)
class McpServerStatus:
    """One configured server: how it is reached, whether it is up, and what it offers.

    Attributes:
        name: the key under ``mcp.servers``.
        transport: ``stdio``, ``http`` (streamable HTTP) or ``sse``.
        target: the command line or the URL, with secrets masked and URL queries dropped.
        state: see :data:`ServerState`.
        reason: why the server is ``failed``, in shipagent's words (what failed, where, what to
            check; secrets masked); ``None`` otherwise.
        detail: the underlying library's own message for that failure, when ``reason`` is ours
            (its wording belongs to the library and may change between releases).
        tools: the tools the model sees, after ``allowedTools``.
        hidden_tools: names the server offered that ``allowedTools`` hides.
    """

    name: str
    transport: Literal["stdio", "http", "sse"]
    target: str
    state: ServerState
    reason: str | None = None
    detail: str | None = None
    tools: tuple[McpToolInfo, ...] = ()
    hidden_tools: tuple[str, ...] = ()
