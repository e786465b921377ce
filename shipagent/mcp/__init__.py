"""MCP servers from ship.json as agent tools (seed 002 §4.1).

:class:`McpManager` starts the servers declared under ``mcp.servers`` (stdio, streamable HTTP or
SSE) through pydantic-ai's ``MCPToolset``, exposes their tools as ``<server>__<tool>`` names every
provider accepts, turns every failure into data the model can read, and stops every server process
when the agent stops.
"""

from ._cli import mcp_app
from ._manager import McpManager
from ._naming import MAX_TOOL_NAME_LENGTH, ToolName, assign_names, exposed_name
from ._results import convert_result, render_content
from ._status import McpServerStatus, McpToolInfo, ServerState
from ._toolset import McpServerToolset

__all__ = [
    "MAX_TOOL_NAME_LENGTH",
    "McpManager",
    "McpServerStatus",
    "McpServerToolset",
    "McpToolInfo",
    "ServerState",
    "ToolName",
    "assign_names",
    "convert_result",
    "exposed_name",
    "mcp_app",
    "render_content",
]
