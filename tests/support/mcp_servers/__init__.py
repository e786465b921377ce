"""Small MCP servers the MCP tests talk to, written with the ``mcp`` 2.x SDK (``MCPServer``)."""
