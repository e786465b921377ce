"""Start, watch and stop the MCP servers of ship.json; hand their tools to the agent.

Servers start in parallel, each within its ``initTimeoutSeconds``, so one slow or broken server
costs start-up its own timeout and nothing more. A server that fails to start is logged (secrets
masked) and marked ``failed`` with its reason; the agent runs without its tools. Tool names are
fixed for the whole session once every server has listed its tools, and a name collision stops
start-up with a :class:`~shipagent.errors.ConfigError` after every started server is stopped
again, because silently dropping one tool would make the model call the wrong thing.

stdio servers get only their ``env`` over a few safe variables (``PATH``, ``HOME``, ``LANG``, see
``_stdio``), run in ``cwd`` (default: the project root) and write stderr to ``.ship/logs/mcp/<server>.log``, whose last lines explain a server that
exits during start-up. Stopping is shielded from cancellation and each stdio server's whole process
group is killed once its session is over (``_stdio``), so no child outlives the agent, also when a
run crashed or the server exited on its own and left background processes. A server writing bytes
that are not UTF-8 to stdout is failed at once, not after a timeout.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shlex
import shutil
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TextIO

import anyio
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool

from ...config import McpHttpServer, McpServerConfig, McpStdioServer, ShipConfig
from ._naming import ToolName, assign_names, exposed_name
from ._redact import Redactor, install_log_redaction, safe_url
from ._status import McpServerStatus, McpToolInfo, ServerState
from ._toolset import McpServerToolset, tool_definition, visible_to_model

if TYPE_CHECKING:  # the MCP client stack (FastMCP) costs ~1 s to import: only when a server starts
    import mcp_types
    from pydantic_ai.mcp import MCPToolset

    from ._stdio import ShipStdioTransport

__all__ = ["McpManager"]

logger = logging.getLogger("shipagent.tools.mcp")

_STOP_TIMEOUT_SECONDS = 15.0
_LOG_MARK = "--- shipagent: starting MCP server "
_LOG_ROTATE_BYTES = 1024 * 1024


class _AllServers(AbstractToolset[Any]):
    """Every connected server's tools as one toolset that exists before start and after stop.

    An agent assembles its toolsets once; this one reads the manager's current servers on each
    step, so the agent can be built before ``start()`` and keeps working when a server dies.
    """

    def __init__(self, manager: McpManager) -> None:
        self._manager = manager

    @property
    def id(self) -> str:
        return "mcp"

    @property
    def label(self) -> str:
        return "MCP servers"

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools: dict[str, ToolsetTool[Any]] = {}
        for toolset in self._manager.toolsets():
            tools.update(await toolset.get_tools(ctx))
        return tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        return await tool.toolset.call_tool(name, tool_args, ctx, tool)


class McpManager:
    """The MCP servers of one project.

    Use ``async with manager:`` (or ``await start()`` / ``await stop()``), then give the agent
    :attr:`toolset` (one toolset for all servers) or :meth:`toolsets` (one per connected server).

    Args:
        config: the validated ship.json (``mcp.servers``, already merged with ``.ship/mcp/mcp.json``).
        project_root: the project directory: default ``cwd`` of stdio servers, home of ``.ship/``.
    """

    def __init__(self, config: ShipConfig, project_root: Path) -> None:
        self.project_root = Path(project_root).resolve()
        self._servers: dict[str, McpServerConfig] = dict(config.mcp.servers)
        self._redact = Redactor.for_project(self.project_root, self._servers.values())
        self._status: dict[str, McpServerStatus] = {
            name: McpServerStatus(
                name=name,
                transport=cfg.type,
                target=self._target(cfg),
                state="pending" if cfg.enabled else "disabled",
            )
            for name, cfg in self._servers.items()
        }
        self._toolsets: dict[str, McpServerToolset] = {}
        self._tools: dict[str, tuple[McpServerToolset, ToolName]] = {}
        self._logs: dict[str, TextIO] = {}
        self._stdio: dict[str, ShipStdioTransport] = {}
        self._started = False
        self._unredact_logs: Callable[[], None] | None = None
        self.toolset: AbstractToolset[Any] = _AllServers(self)
        """All connected servers' tools as one toolset; empty before :meth:`start`."""

    # -- lifecycle ------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Connect every enabled server in parallel and fix the tool names.

        A server that fails is recorded and logged, not raised. Calling ``start`` twice is a no-op.

        Raises:
            ConfigError: two tools would be exposed under one name (every server is stopped first).
        """
        if self._started:
            return
        self._started = True
        self._unredact_logs = install_log_redaction(self._redact)
        connected: dict[str, tuple[MCPToolset[Any], list[mcp_types.Tool]]] = {}
        entered: list[MCPToolset[Any]] = []  # every session opened so far, whatever happens next
        try:
            async with anyio.create_task_group() as tg:
                for name, cfg in self._servers.items():
                    if cfg.enabled:
                        tg.start_soon(self._connect, name, cfg, connected, entered)
            self._install(connected)
        except BaseException:  # a collision, or start-up cancelled (Ctrl-C): leave no process behind
            await self._exit_all(entered)
            self._toolsets.clear()
            self._tools.clear()
            self._close_logs()
            self._restore_logging()
            self._started = False
            raise

    async def stop(self) -> None:
        """Disconnect every server and end its process; safe to call twice and under cancellation."""
        toolsets = list(self._toolsets.values())
        self._toolsets.clear()
        self._tools.clear()
        await self._exit_all([t.mcp for t in toolsets])
        self._close_logs()
        self._restore_logging()
        for name, status in self._status.items():
            if status.state == "connected":
                self._status[name] = _replace_status(status, state="stopped")
        self._started = False

    # -- what the agent and the CLI read ---------------------------------------------------------

    def toolsets(self) -> list[McpServerToolset]:
        """One toolset per connected server (empty before :meth:`start`)."""
        return list(self._toolsets.values())

    @property
    def servers(self) -> list[McpServerStatus]:
        """Every configured server with its state, reason and tools, in ship.json order."""
        return list(self._status.values())

    def status(self, name: str) -> McpServerStatus:
        """The status of server ``name``. Raises ``KeyError`` for an unknown server."""
        return self._status[name]

    def is_mcp_tool(self, name: str) -> bool:
        """Whether ``name`` (as the model calls it) is a tool of a connected MCP server."""
        return name in self._tools

    # -- internals ------------------------------------------------------------------------------

    def _target(self, cfg: McpServerConfig) -> str:
        if isinstance(cfg, McpHttpServer):
            return self._redact(safe_url(cfg.url))
        return self._redact(shlex.join([cfg.command, *cfg.args]))

    def _cwd(self, cfg: McpStdioServer) -> Path:
        return (self.project_root / cfg.cwd).resolve() if cfg.cwd else self.project_root

    def _log_path(self, name: str) -> Path:
        return self.project_root / ".ship" / "logs" / "mcp" / f"{name}.log"

    def _open_log(self, name: str) -> TextIO:
        """Where the server's stderr goes: its log file, or nowhere if .ship/ is not writable."""
        path = self._log_path(name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.is_file() and path.stat().st_size > _LOG_ROTATE_BYTES:
                path.replace(path.with_suffix(".log.1"))  # keep one previous generation, bounded
            handle = path.open("a", encoding="utf-8")
        except OSError:
            handle = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - closed in stop()
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        handle.write(f"{_LOG_MARK}{name} at {stamp} ---\n")
        handle.flush()
        self._logs[name] = handle
        return handle

    def _stderr_tail(self, name: str, lines: int = 3) -> str:
        """The last lines the server wrote to stderr in this session (for failure reasons)."""
        try:
            text = self._log_path(name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        session = text.rsplit(_LOG_MARK, 1)[-1].split("\n", 1)[-1]
        tail = [line.strip() for line in session.splitlines() if line.strip()][-lines:]
        return " | ".join(tail)[-400:]

    def _preflight(self, cfg: McpStdioServer) -> str | None:
        """A clear reason for the two commonest stdio mistakes, before spawning anything."""
        cwd = self._cwd(cfg)
        if not cwd.is_dir():
            return f"working directory {str(cwd)!r} does not exist"
        command = cfg.command
        if os.sep in command:
            if not (cwd / command).exists():
                return f"command {command!r} does not exist"
        elif shutil.which(command, path=os.environ.get("PATH", os.defpath)) is None:
            return f"command {command!r} was not found on PATH"
        return None

    def _build(self, name: str, cfg: McpServerConfig) -> MCPToolset[Any]:
        from fastmcp.client.transports import ClientTransport, SSETransport, StreamableHttpTransport
        from pydantic_ai.mcp import MCPToolset

        from ._stdio import ShipStdioTransport, server_environment

        transport: ClientTransport
        if isinstance(cfg, McpStdioServer):
            transport = self._stdio[name] = ShipStdioTransport(
                command=cfg.command,
                args=list(cfg.args),
                env=server_environment(cfg),  # never the server's own keys
                cwd=str(self._cwd(cfg)),
                keep_alive=False,  # FastMCP's default keeps the process after the session: an orphan
                log_file=self._open_log(name),
            )
        elif cfg.type == "sse":
            transport = SSETransport(cfg.url, headers=dict(cfg.headers))
        else:
            transport = StreamableHttpTransport(cfg.url, headers=dict(cfg.headers))
        return MCPToolset(transport, id=name, init_timeout=cfg.init_timeout_seconds)

    def _reason(self, name: str, cfg: McpServerConfig, exc: BaseException) -> tuple[str, str | None]:
        """Why server ``name`` failed to start, and the library's own words for it when ours differ."""
        stdio = self._stdio.get(name)
        detail: str | None = None
        if stdio is not None and stdio.problem is not None:
            reason = stdio.problem
        elif _caused_by(exc, TimeoutError):
            reason = (
                f"no answer to the MCP handshake within {cfg.init_timeout_seconds:g}s "
                f"(mcp.servers.{name}.initTimeoutSeconds)"
            )
        elif isinstance(cfg, McpStdioServer) and _connection_closed(exc):
            reason = "the server process exited before completing the MCP handshake"
        elif isinstance(cfg, McpHttpServer) and (ours := _http_reason(name, self._target(cfg), exc)):
            reason, detail = ours, _describe(exc)
        else:
            reason = _describe(exc)
        if isinstance(cfg, McpStdioServer) and (tail := self._stderr_tail(name)):
            reason = f"{reason}; stderr: {tail}"
        return self._redact(reason), self._redact(detail) if detail is not None else None

    async def _connect(
        self,
        name: str,
        cfg: McpServerConfig,
        connected: dict[str, tuple[MCPToolset[Any], list[mcp_types.Tool]]],
        entered: list[MCPToolset[Any]],
    ) -> None:
        if isinstance(cfg, McpStdioServer) and (problem := self._preflight(cfg)):
            self._fail(name, problem)
            return
        try:
            mcp = self._build(name, cfg)
        except (ValueError, TypeError, OSError) as exc:
            self._fail(name, self._redact(_describe(exc)))
            return
        try:
            with anyio.fail_after(cfg.init_timeout_seconds):
                await mcp.__aenter__()
                entered.append(mcp)
                tools = await mcp.list_tools()
        except Exception as exc:
            # by identity: MCPToolsets of two servers with the same command compare equal
            if any(m is mcp for m in entered):
                entered[:] = [m for m in entered if m is not mcp]
                await self._exit_all([mcp])
            self._fail(name, *self._reason(name, cfg, exc))
            return
        connected[name] = (mcp, tools)

    def _fail(self, name: str, reason: str, detail: str | None = None) -> None:
        reason = self._redact(reason)  # commands and messages may hold a ${VAR} value
        detail = self._redact(detail) if detail is not None else None
        logger.warning("MCP server %r failed to start: %s%s", name, reason, f" ({detail})" if detail else "")
        self._status[name] = _replace_status(self._status[name], state="failed", reason=reason, detail=detail)

    def _install(self, connected: dict[str, tuple[MCPToolset[Any], list[mcp_types.Tool]]]) -> None:
        """Filter by allowedTools, fix the names (raising on a collision), build the toolsets."""
        chosen: dict[str, list[mcp_types.Tool]] = {}
        hidden: dict[str, list[str]] = {}
        for name in self._servers:  # ship.json order, so names and errors are deterministic
            if name not in connected:
                continue
            cfg = self._servers[name]
            tools = [t for t in connected[name][1] if visible_to_model(t)]
            allowed = set(cfg.allowed_tools) if cfg.allowed_tools is not None else None
            keep = [t for t in tools if allowed is None or {t.name, exposed_name(name, t.name)} & allowed]
            chosen[name] = keep
            hidden[name] = [t.name for t in tools if t not in keep]
            if allowed is not None:
                offered = {t.name for t in tools} | {exposed_name(name, t.name) for t in tools}
                for missing in sorted(allowed - offered):
                    logger.warning(
                        "mcp.servers.%s.allowedTools names %r, which the server does not offer", name, missing
                    )
        names = assign_names((server, t.name) for server, tools in chosen.items() for t in tools)
        by_server: dict[str, list[ToolName]] = {}
        for entry in names:
            by_server.setdefault(entry.server, []).append(entry)
        for name, tools in chosen.items():
            entries = by_server.get(name, [])
            pairs = [
                (entry, tool_definition(entry, tool)) for entry, tool in zip(entries, tools, strict=True)
            ]
            toolset = McpServerToolset(
                server=name,
                mcp=connected[name][0],
                tools=pairs,
                timeout=self._servers[name].timeout_seconds,
                redact=self._redact,
                on_dead=functools.partial(self._died, name),
                problem=functools.partial(self._stream_problem, name),
            )
            self._toolsets[name] = toolset
            for entry in entries:
                self._tools[entry.exposed] = (toolset, entry)
            self._status[name] = _replace_status(
                self._status[name],
                state="connected",
                tools=tuple(
                    McpToolInfo(exposed=e.exposed, original=e.original, description=t.description)
                    for e, t in zip(entries, tools, strict=True)
                ),
                hidden_tools=tuple(hidden[name]),
            )
            logger.info("MCP server %r connected with %d tool(s)", name, len(entries))

    def _stream_problem(self, name: str) -> str | None:
        stdio = self._stdio.get(name)
        return stdio.problem if stdio is not None else None

    def _died(self, name: str, reason: str) -> None:
        cfg = self._servers[name]
        if isinstance(cfg, McpStdioServer) and (tail := self._stderr_tail(name)):
            reason = f"{reason}; stderr: {tail}"
        reason = self._redact(f"died during the session: {reason}")
        logger.warning("MCP server %r %s", name, reason)
        self._status[name] = _replace_status(self._status[name], state="failed", reason=reason)

    async def _exit_all(self, toolsets: Sequence[MCPToolset[Any]]) -> None:
        """Exit each toolset (ending its process), in parallel, whatever cancellation is under way."""

        async def exit_one(mcp: MCPToolset[Any]) -> None:
            try:
                with anyio.move_on_after(_STOP_TIMEOUT_SECONDS):
                    try:
                        await mcp.__aexit__(None, None, None)
                    except Exception as exc:  # a server that died already: nothing left to stop
                        logger.debug("stopping MCP server %r: %s", mcp.id, self._redact(_describe(exc)))
            finally:
                # The SDK kills the group only if the server hangs; one that exits promptly may
                # leave background children: end the whole group, as exec_shell does.
                if (stdio := self._stdio.get(str(mcp.id))) is not None:
                    stdio.kill_group()

        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for mcp in toolsets:
                    tg.start_soon(exit_one, mcp)

    def _restore_logging(self) -> None:
        if self._unredact_logs is not None:
            self._unredact_logs()
            self._unredact_logs = None

    def _close_logs(self) -> None:
        for handle in self._logs.values():
            handle.close()
        self._logs.clear()


def _replace_status(
    status: McpServerStatus,
    *,
    state: ServerState,
    reason: str | None = None,
    detail: str | None = None,
    tools: tuple[McpToolInfo, ...] = (),
    hidden_tools: tuple[str, ...] = (),
) -> McpServerStatus:
    """``status`` in a new state; reason and tools are reset unless given (a stopped server has none)."""
    if state == "stopped":
        tools, hidden_tools = status.tools, status.hidden_tools
    return McpServerStatus(
        name=status.name,
        transport=status.transport,
        target=status.target,
        state=state,
        reason=reason,
        detail=detail,
        tools=tools,
        hidden_tools=hidden_tools,
    )


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc``, its causes and contexts, and the members of exception groups, outermost first."""
    seen: list[BaseException] = []
    stack = [exc]
    while stack:
        current = stack.pop(0)
        if any(current is s for s in seen):
            continue
        seen.append(current)
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                stack.append(linked)
    return seen


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    return any(isinstance(e, kind) for e in _chain(exc))


def _http_reason(name: str, target: str, exc: BaseException) -> str | None:
    """Our sentence for an HTTP server that could not be reached or refused us, else ``None``."""
    import httpx  # loaded by then: the transport is httpx

    for item in _chain(exc):
        if isinstance(item, httpx.HTTPStatusError):
            code = item.response.status_code
            check = f"mcp.servers.{name}.headers" if code in (401, 403) else f"mcp.servers.{name}.url"
            return f"the server at {target} answered HTTP {code}: check {check}"
        if isinstance(item, httpx.TransportError | ConnectionError):
            return f"cannot connect to {target}: check that the server is running and mcp.servers.{name}.url"
    return None


def _connection_closed(exc: BaseException) -> bool:
    import mcp_types
    from mcp import MCPError  # loaded by then: only a started server's failure gets here

    return any(isinstance(e, MCPError) and e.error.code == mcp_types.CONNECTION_CLOSED for e in _chain(exc))


_NOISE = re.compile(r"^(?:Cancel(?:l?ed)? (?:via|by) cancel scope [0-9a-fx]+|WouldBlock|CancelledError)$")


def _describe(exc: BaseException) -> str:
    """One line from an exception chain: each distinct message once, outermost first."""
    parts: list[str] = []
    for item in _chain(exc):
        if isinstance(item, BaseExceptionGroup):
            continue
        text = str(item).strip() or type(item).__name__
        if _NOISE.match(text):  # anyio's cancel-scope ids and WouldBlock say nothing to a user
            continue
        if not any(text in p for p in parts):
            parts.append(text)
    return ": ".join(parts[:4]) or type(exc).__name__
