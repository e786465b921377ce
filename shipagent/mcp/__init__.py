"""MCP servers from ship.json as agent tools.

:class:`McpManager` starts the servers declared under ``mcp.servers`` (stdio, streamable HTTP or
SSE) through pydantic-ai's ``MCPToolset``, exposes their tools as ``<server>__<tool>`` names every
provider accepts, turns every failure into data the model can read, and stops every server process
when the agent stops.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes
from ._manager import McpManager
from ._naming import MAX_TOOL_NAME_LENGTH, ToolName, assign_names, exposed_name
from ._results import convert_result, render_content
from ._status import McpServerStatus, McpToolInfo, ServerState
from ._toolset import McpServerToolset

if TYPE_CHECKING:
    from ._cli import mcp_app

# the ``shipagent mcp`` sub-app needs typer and rich: loaded when the command runs
__getattr__ = lazy_attributes(__name__, {"mcp_app": "._cli"})

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
