"""``shipagent mcp list``: which MCP servers connect and which tools they bring.

A typer sub-app mounted by ``shipagent.hosts.cli._app``. It starts the servers of ship.json (and
``.ship/mcp/mcp.json``) exactly as the agent does — same environment, timeouts and names — prints
what happened, and stops them. No model is needed. Secrets never reach the output: targets drop URL
queries and mask ``${VAR}`` values, and failure reasons are masked the same way.

Exit status: 0 when every enabled server connected, 1 when one failed (so scripts and CI can check
a deployment), 2 for a configuration error such as a tool-name collision.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import anyio
import typer
from rich.markup import escape

from ...config import load_config
from ...errors import ShipAgentError
from ...tools.mcp._manager import McpManager
from ...tools.mcp._status import McpServerStatus
from ._opts import ProjectOpt, fail, out

__all__ = ["mcp_app"]

mcp_app = typer.Typer(
    name="mcp",
    help="Inspect the MCP servers declared in ship.json.",
    no_args_is_help=True,
)

_STYLE = {"connected": "green", "failed": "red", "disabled": "dim", "stopped": "green", "pending": "yellow"}


async def _collect(manager: McpManager) -> list[McpServerStatus]:
    async with manager:
        return manager.servers  # read while connected: "connected", not "stopped"


def _print(status: McpServerStatus) -> None:
    style = _STYLE.get(status.state, "")
    out.print(
        f"[bold]{escape(status.name)}[/]  [{style}]{status.state}[/]  "
        f"{status.transport}  [dim]{escape(status.target)}[/]"
    )
    if status.reason:
        out.print(f"  reason: {escape(status.reason)}")
    if status.detail:
        out.print(f"  [dim]detail: {escape(status.detail)}[/]")
    renamed = [t for t in status.tools if t.exposed != f"{status.name}__{t.original}"]
    width = max((len(t.exposed) for t in renamed), default=0)
    for tool in status.tools:
        if tool in renamed:
            note = f"  [dim](server name: {escape(tool.original)})[/]"
            out.print(f"  {escape(tool.exposed.ljust(width))}{note}")
        else:
            out.print(f"  {escape(tool.exposed)}")
    if status.hidden_tools:
        out.print(f"  [dim]hidden by allowedTools: {escape(', '.join(status.hidden_tools))}[/]")


@mcp_app.command("list")
def list_servers(
    project: ProjectOpt = Path("."),
    as_json: Annotated[bool, typer.Option("--json", help="Print the statuses as JSON.")] = False,
) -> None:
    """Start every MCP server, show its status and the tool names the model sees, then stop them."""
    quiet = logging.getLogger("shipagent.tools.mcp")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # failures are in the listing; the warning log would repeat them
    try:
        root = project.resolve()
        statuses = anyio.run(_collect, McpManager(load_config(root), root))
    except ShipAgentError as exc:
        raise fail(str(exc)) from None
    finally:
        quiet.setLevel(level)
    if as_json:
        typer.echo(json.dumps([asdict(s) for s in statuses], ensure_ascii=False, indent=2))
    elif not statuses:
        out.print("no MCP servers configured (ship.json mcp.servers)")
    for status in [] if as_json else statuses:
        _print(status)
    if any(s.state == "failed" for s in statuses):
        raise typer.Exit(1)
