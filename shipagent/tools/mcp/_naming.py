"""The tool names the model sees for MCP tools: ``<server>__<tool>``, valid for every provider.

MCP servers name tools freely (``weather.get:current``, 80-character names); the OpenAI API accepts
only ``^[a-zA-Z0-9_-]{1,64}$`` and pydantic-ai does not check, so a bad name fails at the provider,
mid-conversation. Names are therefore fixed here, once, at start-up: pure functions, no I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from ...errors import ConfigError

__all__ = ["MAX_TOOL_NAME_LENGTH", "SEPARATOR", "ToolName", "assign_names", "exposed_name"]

MAX_TOOL_NAME_LENGTH = 64
"""The longest tool name the OpenAI API accepts (the strictest of the providers)."""

SEPARATOR = "__"
"""Between the server name and the tool name (not ``:``, which OpenAI rejects)."""

_INVALID = re.compile(r"[^A-Za-z0-9_-]")
_HASH_LENGTH = 8


def exposed_name(server: str, tool: str) -> str:
    """The name the model sees for ``tool`` of ``server``.

    Every character outside ``[A-Za-z0-9_-]`` becomes ``_``. A name longer than 64 characters keeps
    its first 55 characters and ends in ``_`` plus 8 hex characters of the SHA-256 of the *original*
    ``<server>__<tool>``: stable across restarts (a chat's history keeps naming the same tool) and
    different for long names that share a prefix.
    """
    original = f"{server}{SEPARATOR}{tool}"
    name = _INVALID.sub("_", original)
    if len(name) <= MAX_TOOL_NAME_LENGTH:
        return name
    digest = hashlib.sha256(original.encode("utf-8")).hexdigest()[:_HASH_LENGTH]
    return f"{name[: MAX_TOOL_NAME_LENGTH - _HASH_LENGTH - 1]}_{digest}"


@dataclass(frozen=True, slots=True)
class ToolName:
    """One MCP tool's two names: what the server calls it and what the model sees."""

    server: str
    original: str
    """The name the server listed; it is what the server receives on a call."""
    exposed: str
    """``<server>__<tool>``, sanitized and shortened: what the model sees and calls."""


def assign_names(tools: Iterable[tuple[str, str]]) -> list[ToolName]:
    """Name every ``(server, tool)`` pair, refusing two that would map to one name.

    A silent overwrite would make the model call a different tool than it chose, so a collision is
    a configuration error at start-up that names both tools and how to fix it.

    Raises:
        ConfigError: two tools map to the same exposed name (``path`` is the second server's key).
    """
    seen: dict[str, ToolName] = {}
    named: list[ToolName] = []
    for server, tool in tools:
        entry = ToolName(server=server, original=tool, exposed=exposed_name(server, tool))
        other = seen.get(entry.exposed)
        if other is not None:
            raise ConfigError(
                f"MCP tool name collision: tool {other.original!r} of server {other.server!r} and "
                f"tool {entry.original!r} of server {entry.server!r} would both be exposed as "
                f"{entry.exposed!r}; hide one with mcp.servers.<name>.allowedTools or rename a server",
                path=f"mcp.servers.{entry.server}",
            )
        seen[entry.exposed] = entry
        named.append(entry)
    return named
