"""The context machinery of one ShipAgent: providers in, instructions, tools and MCP servers out.

``ShipAgent`` holds one :class:`ProviderRuntime`. Each run calls :meth:`instructions` (an
instruction source): the chat's provider session is prepared — or reused while no provider
changed —, its token is put on the run's ``ToolExecutionContext`` and its system-context additions
come back for the prompt. :attr:`toolset` then offers exactly that session's provider tools.
Provider MCP servers are started with the agent (``async with agent``) by the same
:class:`~shipagent.tools.mcp.McpManager` that runs ship.json's servers, and stopped with it; stopping
also revokes every session token the agent issued.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic_ai import RunContext
from pydantic_ai.toolsets import AbstractToolset, DynamicToolset, FunctionToolset

from ..._cache import BoundedCache
from ...config import McpConfig, McpHttpServer, McpStdioServer, ShipConfig
from .._deps import run_of
from ..execution import ToolExecutionContext
from ._events import EventSink
from ._injector import MAX_CACHED_SESSIONS, ProviderInjector
from ._pool import ResourcePool
from ._providers import CapabilityCatalogProvider, SkillsContextProvider
from ._tokens import SessionTokenStore
from ._toolset import provider_toolset
from ._types import AgentInstanceMeta, ContextProvider, ProviderSession

if TYPE_CHECKING:
    from ..mcp import McpManager
    from ..skills import Skill

__all__ = ["ProviderRuntime", "meta_from_config"]

log = logging.getLogger(__name__)


class _SkillsSource(Protocol):
    async def get(self, root: Path, config: ShipConfig) -> list[Skill]: ...


def meta_from_config(config: ShipConfig) -> AgentInstanceMeta:
    """The agent's meta from ship.json ``name`` and ``agent`` (archetype defaults to ``repo``)."""
    agent = config.agent
    return AgentInstanceMeta(
        name=config.name,
        archetype=agent.archetype,
        backend_type=agent.backend_type,
        workspace_policy=agent.workspace_policy,
        launch_mode=agent.launch_mode,
    )


class ProviderRuntime:
    """Injector, token store, meta, resource pool, provider tools and MCP servers of one agent.

    Registration order, and so the order of the additions in the instructions: the skills overview
    (when a skills source is given), the ``providers`` passed in, then — when ship.json declares
    ``capabilities`` — the capability catalog of :attr:`pool`. Providers registered later through
    :attr:`injector` come after those.

    Args:
        config: the validated ship.json (meta from ``agent``, catalog from ``capabilities``).
        project_root: the project directory.
        providers: context providers to register, in order.
        skills: the agent's skills cache (``async get(root, config)``); its overview becomes the
            ``skills`` provider.
        event_bus: where the injector reports ``session:*`` events.
        clock: the agent's clock; the capability catalog's "As of" day comes from it.
    """

    def __init__(
        self,
        config: ShipConfig,
        project_root: Path,
        *,
        providers: Sequence[ContextProvider] = (),
        skills: _SkillsSource | None = None,
        event_bus: EventSink | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.config = config
        self.project_root = project_root
        self.meta = meta_from_config(config)
        self.tokens = SessionTokenStore()
        self.injector = ProviderInjector()
        self.injector.set_token_store(self.tokens)
        self.injector.set_event_bus(event_bus)
        self.pool = ResourcePool.from_config(config)
        """Sub-agent profiles as resources; the catalog an orchestrator sees."""
        if skills is not None:
            self.injector.register(SkillsContextProvider(overview=self._skills_overview(skills)))
        for provider in providers:
            self.injector.register(provider)
        if config.capabilities:
            self.injector.register(CapabilityCatalogProvider(self.pool, clock=clock))
        self._toolsets: BoundedCache[str, tuple[ProviderSession, FunctionToolset[Any]]] = BoundedCache(
            MAX_CACHED_SESSIONS
        )
        self._mcp: McpManager | None = None
        self.toolset: AbstractToolset[Any] = DynamicToolset(
            self._current_toolset, per_run_step=False, id="context-providers"
        )
        """The provider tools of the running chat's provider session (empty outside a run)."""

    def _skills_overview(self, skills: _SkillsSource) -> Callable[[], Awaitable[str]]:
        async def overview() -> str:
            from ..skills import render_skills_overview

            return render_skills_overview(await skills.get(self.project_root, self.config))

        return overview

    # -- per run ---------------------------------------------------------------------------------

    async def session_context(self, chat_key: str) -> ProviderSession:
        """The chat's provider session: prepared on first use, reused until a provider changes."""
        return await self.injector.session_context(self.meta.name, self.meta, chat_key)

    async def instructions(self, ctx: ToolExecutionContext) -> str | None:
        """Instruction source: prepare the chat's provider session and return its additions.

        Also sets ``ctx.session_token`` so tools can present it to their backends.
        """
        session = await self.session_context(ctx.chat_key)
        ctx.session_token = session.token
        ctx.session = session
        text = "\n\n".join(a.strip() for a in session.system_context_additions if a.strip())
        return text or None

    def _current_toolset(self, run: RunContext[Any]) -> AbstractToolset[Any] | None:
        ctx = run_of(run)
        if ctx is None:
            return None  # used outside a ShipAgent run: no session, no provider tools
        session = ctx.session
        if session is None or not session.tools:
            return None
        cached = self._toolsets.get(ctx.chat_key)
        if cached is None or cached[0] is not session:  # built once per prepared provider session
            cached = (session, provider_toolset(session.tools))
            self._toolsets[ctx.chat_key] = cached
        return cached[1]

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def mcp(self) -> McpManager | None:
        """The manager running the providers' MCP servers (``None`` before :meth:`start`)."""
        return self._mcp

    def mcp_toolsets(self) -> list[AbstractToolset[Any]]:
        """The provider MCP servers' tools (``<server>__<tool>``), once started."""
        return [self._mcp.toolset] if self._mcp is not None else []

    def is_mcp_tool(self, name: str) -> bool:
        """Whether ``name`` is a tool of a provider MCP server."""
        return self._mcp is not None and self._mcp.is_mcp_tool(name)

    async def start(self) -> None:
        """Start the MCP servers the providers contribute, like ship.json's servers.

        Servers are collected once, when the agent starts; a name ship.json already uses is
        skipped (ship.json wins). A server that fails is reported by the manager, not raised.
        """
        if self._mcp is not None:
            return
        servers: dict[str, McpStdioServer | McpHttpServer] = {}
        for server in await self.injector.mcp_servers(self.meta.name, self.meta):
            if server.name in self.config.mcp.servers:
                log.warning("provider MCP server %r ignored: ship.json defines that name", server.name)
                continue
            servers[server.name] = McpStdioServer(command=server.command, args=server.args, env=server.env)
        if not servers:
            return
        from ..mcp import McpManager

        manager = McpManager(
            self.config.model_copy(update={"mcp": McpConfig(servers=servers)}), self.project_root
        )
        await manager.start()
        self._mcp = manager

    async def stop(self) -> None:
        """Stop the provider MCP servers and revoke every session token of this agent."""
        manager, self._mcp = self._mcp, None
        try:
            if manager is not None:
                await manager.stop()
        finally:
            self.injector.revoke_tokens(self.meta.name)
            self._toolsets.clear()
