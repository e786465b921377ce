"""MCP servers from ship.json as agent tools.

:class:`McpManager` starts the servers declared under ``mcp.servers`` (stdio, streamable HTTP or
SSE) through pydantic-ai's ``MCPToolset``, exposes their tools as ``<server>__<tool>`` names every
provider accepts, turns every failure into data the model can read, and stops every server process
when the agent stops.
"""

from ._manager import McpManager
from ._status import McpServerStatus

__all__ = ["McpManager", "McpServerStatus"]
