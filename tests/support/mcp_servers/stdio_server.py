"""A stdio MCP server with tools that misbehave on purpose.

Run as ``python stdio_server.py [--crash-on-start] [--extra-tool NAME ...]``. Its tools:

- ``echo(text)``: returns ``text`` (proves the process env and cwd reach the server via ``whereami``);
- ``whereami()``: the server's cwd and the value of ``SHIP_TEST_VALUE`` in its environment;
- ``exit_after_reply(text)``: answers, then the process exits 0.3 s later (a server that dies
  mid-session);
- ``sleep(seconds)``: sleeps, for per-call timeouts;
- ``fail(message)``: a tool result with ``isError: true``;
- ``garbage()``: writes bytes that are not UTF-8 to stdout, then hangs (a corrupt transport);
- one more echo tool per ``--extra-tool NAME`` (to provoke name collisions).

``--garbage-on-start`` writes non-UTF-8 bytes before the handshake; ``--grandchild PIDFILE`` starts
a background ``sleep`` (its pid written to PIDFILE) that outlives the server unless its process
group is killed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent

server = MCPServer("ship-test-stdio")
_WIRE = os.dup(1)  # the protocol pipe: once running, the SDK points fd 1 at stderr to protect it


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def whereami() -> str:
    """Report the working directory and SHIP_TEST_VALUE from the environment."""
    return f"cwd={os.getcwd()} value={os.environ.get('SHIP_TEST_VALUE', '<unset>')}"


@server.tool()
def exit_after_reply(text: str) -> str:
    """Answer, then exit the whole process shortly after."""
    threading.Timer(0.3, os._exit, (0,)).start()
    return f"bye {text}"


@server.tool()
def sleep(seconds: float) -> str:
    """Sleep for ``seconds`` and say so."""
    time.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def fail(message: str) -> CallToolResult:
    """Return an error result carrying ``message``."""
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


@server.tool()
def garbage() -> str:
    """Write bytes that are not UTF-8 to stdout, then hang."""
    os.write(_WIRE, b"\xff\xfe\xfa not utf-8 \xc3\x28\n")
    time.sleep(60)
    return "unreachable"


if __name__ == "__main__":
    if "--garbage-on-start" in sys.argv:
        os.write(1, b"\xff\xfe\xfa not utf-8\n")
    if "--grandchild" in sys.argv:
        child = subprocess.Popen(
            ["sleep", "300"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        with open(sys.argv[sys.argv.index("--grandchild") + 1], "w") as fh:
            fh.write(str(child.pid))
    if "--crash-on-start" in sys.argv:
        print("boom: config file /nowhere/settings.toml not found", file=sys.stderr, flush=True)
        sys.exit(3)
    for i, arg in enumerate(sys.argv):
        if arg == "--extra-tool":
            server.add_tool(echo, name=sys.argv[i + 1], description="Echo under another name.")
    server.run()
