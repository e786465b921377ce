"""One connected MCP server as a pydantic-ai toolset with shipagent's names and failure rules.

The server is reached through pydantic-ai's :class:`~pydantic_ai.mcp.MCPToolset` (its FastMCP
client holds the session); this toolset sits in front of it because three things must differ from
``MCPToolset``'s defaults:

- the model sees ``<server>__<tool>`` names fixed at start-up (see ``_naming``), while the server
  keeps receiving its own names;
- every way a call can go wrong — ``isError``, a timeout, a server that died — comes back as
  ``{"success": false, "error": ...}`` for the model to read, never as an exception that ends the run
  or a retry loop against a dead process;
- results are rendered as text with placeholders for binary content (see ``_results``).

Its ``__aenter__``/``__aexit__`` do nothing: the :class:`~shipagent.tools.mcp.McpManager` owns the
connection, so servers start once per agent rather than once per run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio
from pydantic_ai.tools import RunContext, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool

from ._naming import ToolName
from ._redact import Redactor
from ._results import convert_result, failure

if TYPE_CHECKING:
    import mcp_types
    from pydantic_ai.mcp import MCPToolset

__all__ = ["McpServerToolset", "tool_definition"]

_BACKSTOP_SECONDS = 5.0
"""Extra time past ``timeoutSeconds`` before we stop waiting ourselves, should the SDK's own
request timeout not fire (a transport stuck below the JSON-RPC layer)."""


def tool_definition(name: ToolName, tool: mcp_types.Tool) -> ToolDefinition:
    """The definition the model sees: the exposed name and the server's input schema, whole."""
    return ToolDefinition(
        name=name.exposed,
        description=tool.description,
        parameters_json_schema=dict(tool.input_schema),
        metadata={"mcp_server": name.server, "mcp_tool": name.original},
    )


def visible_to_model(tool: mcp_types.Tool) -> bool:
    """False for tools a server marks app-only (MCP Apps ``_meta.ui.visibility`` without "model")."""
    meta = tool.meta or {}
    ui = meta.get("ui") if isinstance(meta, dict) else None
    visibility = ui.get("visibility") if isinstance(ui, dict) else None
    return not isinstance(visibility, list) or "model" in visibility


class McpServerToolset(AbstractToolset[Any]):
    """The tools of one connected server, under their exposed names.

    Args:
        server: the server's name in ship.json.
        mcp: the entered ``MCPToolset`` whose client carries the calls.
        tools: ``(names, definition)`` for every tool the model may see.
        timeout: ``timeoutSeconds``: how long one call may take.
        redact: masks secrets in error text the model (and logs) would otherwise see.
        on_dead: told the reason once the server's connection is gone, so status reflects it.
        problem: why the transport broke (stdout that is not UTF-8), once it has; such a server
            is dead at once, whatever the SDK reports for the call.
    """

    def __init__(
        self,
        *,
        server: str,
        mcp: MCPToolset[Any],
        tools: Sequence[tuple[ToolName, ToolDefinition]],
        timeout: float,
        redact: Redactor,
        on_dead: Callable[[str], None],
        problem: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.server = server
        self.mcp = mcp
        self._tools = {name.exposed: (name, definition) for name, definition in tools}
        self._timeout = timeout
        self._redact = redact
        self._on_dead = on_dead
        self._problem = problem
        self.dead_reason: str | None = None

    @property
    def id(self) -> str:
        return f"mcp-{self.server}"

    @property
    def label(self) -> str:
        return f"MCP server {self.server!r}"

    @property
    def names(self) -> list[ToolName]:
        """The exposed/original name pairs of this server's visible tools."""
        return [name for name, _ in self._tools.values()]

    def mark_dead(self, reason: str) -> None:
        """Record that the connection is gone; later calls fail at once with ``reason``."""
        if self.dead_reason is None:
            self.dead_reason = reason
            self._on_dead(reason)

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        # Built from the definitions fixed at start-up, so a dead server's listing never fails a run
        # and the names the model saw stay the names it may call.
        return {
            exposed: replace(self.mcp.tool_for_tool_def(definition, ctx=ctx), toolset=self)
            for exposed, (_, definition) in self._tools.items()
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        entry = self._tools.get(name)
        if entry is None:  # pydantic-ai only calls names get_tools returned; keep the contract anyway
            return failure(f"{name!r} is not a tool of MCP server {self.server!r}")
        return await self.call(entry[0], tool_args)

    async def call(self, name: ToolName, args: dict[str, Any]) -> Any:
        """Call one tool on the server; every failure comes back as a failure dict."""
        if self.dead_reason is None and (problem := self._problem()) is not None:
            self.mark_dead(problem)
        if self.dead_reason is not None:
            return failure(
                f"MCP server {self.server!r} is not available ({self.dead_reason}); "
                f"tool {name.exposed!r} cannot be called in this session"
            )
        try:
            with anyio.fail_after(self._timeout + _BACKSTOP_SECONDS):
                result = await self.mcp.client.call_tool_mcp(name.original, args, timeout=self._timeout)
        except Exception as exc:
            if (problem := self._problem()) is not None:  # the transport broke: say why, not "closed"
                self.mark_dead(problem)
                return failure(
                    self._redact(
                        f"MCP server {self.server!r} broke the connection while running {name.exposed!r}: "
                        f"{problem}; its tools are unavailable for the rest of this session"
                    )
                )
            return self._call_failed(name, exc)
        return convert_result(result, tool=name.exposed, server=self.server)

    def _call_failed(self, name: ToolName, exc: Exception) -> dict[str, Any]:
        import mcp_types
        from mcp import MCPError  # the MCP SDK is imported once a server runs, not with shipagent

        if isinstance(exc, TimeoutError):
            return self._timed_out(name)
        if isinstance(exc, MCPError):
            if exc.error.code == mcp_types.REQUEST_TIMEOUT:
                return self._timed_out(name)
            if exc.error.code == mcp_types.CONNECTION_CLOSED:
                self.mark_dead(f"the server closed the connection: {exc.error.message}")
                return failure(
                    f"MCP server {self.server!r} stopped while running {name.exposed!r} "
                    f"(connection closed); its tools are unavailable for the rest of this session"
                )
            return failure(
                self._redact(f"MCP server {self.server!r} refused {name.original!r}: {exc.error.message}")
            )
        if isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | BrokenPipeError):
            self.mark_dead(f"connection lost: {type(exc).__name__}")
            return failure(f"MCP server {self.server!r} is not reachable: its connection was lost")
        # transport errors (HTTP connection refused, a server restart): data for the model
        detail = str(exc) or type(exc).__name__
        return failure(
            self._redact(f"calling {name.exposed!r} on MCP server {self.server!r} failed: {detail}")
        )

    def _timed_out(self, name: ToolName) -> dict[str, Any]:
        return failure(
            f"MCP tool {name.exposed!r} timed out after {self._timeout:g}s "
            f"(mcp.servers.{self.server}.timeoutSeconds)"
        )
