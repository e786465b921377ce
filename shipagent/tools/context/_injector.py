"""ProviderInjector: collects what the registered providers contribute to a session.

Subsystems extend an agent by registering a provider instead of editing the prompt assembly or
the toolset wiring. ``prepare`` asks every provider, in registration order, for MCP servers, then
tools, then system context; dedupes (first registered wins), drops tools the agent's archetype
may not use, issues a session token and appends the tool-instructions block last.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..._cache import BoundedCache
from ._events import EventSink
from ._templates import load_template, render_template
from ._tokens import SessionTokenStore
from ._types import (
    AgentInstanceMeta,
    ContextProvider,
    McpServerStdio,
    ProviderOutputs,
    ProviderSession,
    ProviderTool,
    scope_allows,
)

__all__ = ["MAX_CACHED_SESSIONS", "ProviderInjector", "render_tool_list"]

log = logging.getLogger(__name__)

MAX_CACHED_SESSIONS = 4096
"""Provider sessions kept per injector; idle chats beyond it are prepared again when they return."""


async def _call(provider: ContextProvider, method: str, agent_name: str, meta: AgentInstanceMeta) -> Any:
    fn = getattr(provider, method, None)
    if fn is None:
        return None
    result = fn(agent_name, meta)
    if inspect.isawaitable(result):
        result = await result
    return result


def _as_list(value: Any, kind: type, method: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise TypeError(f"{method} must return a sequence of {kind.__name__}, got {type(value).__name__}")
    for item in value:
        if not isinstance(item, kind):
            raise TypeError(f"{method} returned a {type(item).__name__}, expected {kind.__name__}")
    return list(value)


async def _servers_of(
    provider: ContextProvider, agent_name: str, meta: AgentInstanceMeta
) -> list[McpServerStdio]:
    value = await _call(provider, "get_mcp_servers", agent_name, meta)
    return _as_list(value, McpServerStdio, "get_mcp_servers")


async def _collect(provider: ContextProvider, agent_name: str, meta: AgentInstanceMeta) -> ProviderOutputs:
    """One provider's three contributions, in a fixed order (MCP servers → tools → context)."""
    servers = await _servers_of(provider, agent_name, meta)
    tools = _as_list(await _call(provider, "get_tools", agent_name, meta), ProviderTool, "get_tools")
    text = await _call(provider, "get_system_context", agent_name, meta)
    if text is not None and not isinstance(text, str):
        raise TypeError(f"get_system_context must return str or None, got {type(text).__name__}")
    return servers, tools, text


def render_tool_list(tools: Sequence[ProviderTool]) -> str:
    """The ``{{toolList}}`` of ``tool-instructions.md``: one bullet per tool, its notes indented."""
    lines: list[str] = []
    for tool in tools:
        lines.append(f"- `{tool.name}` — {tool.description.strip()}")
        if tool.context and tool.context.strip():
            lines.extend(f"  {line}" if line else "" for line in tool.context.strip().splitlines())
    return "\n".join(lines)


@dataclass(slots=True)
class _Cached:
    context: ProviderSession
    meta: AgentInstanceMeta
    revisions: tuple[object, ...]
    generation: int


class ProviderInjector:
    """Aggregates the contributions of registered :class:`ContextProvider` s into a provider session.

    Events (when a bus is set): ``session:preparing {agentName, providerCount}`` before collecting,
    ``session:provider-error {agentName, provider, error}`` for a provider that raised (its whole
    contribution is skipped; the others still count), ``session:context-ready {agentName,
    mcpServerCount, toolCount, contextAdditions}`` after.
    """

    def __init__(self) -> None:
        self._providers: dict[str, ContextProvider] = {}
        self._bus: EventSink | None = None
        self._tokens: SessionTokenStore | None = None
        self._generation = 0
        self._cache: BoundedCache[tuple[str, str], _Cached] = BoundedCache(MAX_CACHED_SESSIONS)

    # -- configuration ---------------------------------------------------------------------------

    def set_event_bus(self, bus: EventSink | None) -> None:
        """Report lifecycle events to ``bus`` (anything with ``emit(event_name, payload)``)."""
        self._bus = bus

    def set_token_store(self, store: SessionTokenStore | None) -> None:
        """Issue session tokens from ``store``; without one, sessions get no token."""
        self._tokens = store
        self._changed()

    @property
    def token_store(self) -> SessionTokenStore | None:
        """The store tokens are issued from, if any."""
        return self._tokens

    def register(self, provider: ContextProvider) -> None:
        """Add ``provider``; a provider with the same name is replaced where it stood."""
        name = provider.name
        if not isinstance(name, str) or not name:
            raise ValueError("a context provider needs a non-empty string name")
        self._providers[name] = provider  # dict assignment keeps an existing key's position
        self._changed()

    def unregister(self, name: str) -> bool:
        """Remove the provider called ``name``; returns whether there was one."""
        removed = self._providers.pop(name, None) is not None
        if removed:
            self._changed()
        return removed

    def list_providers(self) -> list[str]:
        """Provider names in registration order (the order of their system-context additions)."""
        return list(self._providers)

    def revoke_tokens(self, agent_name: str) -> None:
        """Revoke every session token of ``agent_name`` and forget its cached provider sessions."""
        if self._tokens is not None:
            self._tokens.revoke(agent_name)
        for key in [k for k in self._cache if k[0] == agent_name]:
            self._cache.pop(key)

    @property
    def generation(self) -> int:
        """Bumped by every (un)registration: a provider session prepared earlier may be stale."""
        return self._generation

    def _changed(self) -> None:
        self._generation += 1

    def _emit(self, event_name: str, payload: dict[str, Any]) -> None:
        if self._bus is not None:
            try:
                self._bus.emit(event_name, payload)
            except Exception:
                log.exception("event bus failed to emit %s", event_name)

    def _provider_failed(self, agent_name: str, provider: ContextProvider, exc: Exception) -> None:
        log.warning("context provider %r failed: %s", provider.name, exc, exc_info=True)
        self._emit(
            "session:provider-error",
            {"agentName": agent_name, "provider": provider.name, "error": f"{type(exc).__name__}: {exc}"},
        )

    # -- preparation -----------------------------------------------------------------------------

    async def mcp_servers(self, agent_name: str, meta: AgentInstanceMeta) -> tuple[McpServerStdio, ...]:
        """Only the MCP servers the providers contribute (first wins), for starting them up front.

        Asks nothing but ``get_mcp_servers``: no token is issued and no events are emitted except
        ``session:provider-error`` for a provider that raises.
        """
        servers: dict[str, McpServerStdio] = {}
        for provider in list(self._providers.values()):
            try:
                found = await _servers_of(provider, agent_name, meta)
            except Exception as exc:
                self._provider_failed(agent_name, provider, exc)
                continue
            for server in found:
                servers.setdefault(server.name, server)
        return tuple(servers.values())

    async def prepare(
        self, agent_name: str, meta: AgentInstanceMeta, session_id: str | None = None
    ) -> ProviderSession:
        """Collect, dedupe, filter, issue a token and append the tool instructions."""
        providers = list(self._providers.values())
        self._emit("session:preparing", {"agentName": agent_name, "providerCount": len(providers)})

        servers: dict[str, McpServerStdio] = {}
        tools: dict[str, ProviderTool] = {}
        additions: list[str] = []
        for provider in providers:
            try:
                got_servers, got_tools, text = await _collect(provider, agent_name, meta)
            except Exception as exc:
                self._provider_failed(agent_name, provider, exc)
                continue
            for server in got_servers:
                servers.setdefault(server.name, server)
            for tool in got_tools:
                if scope_allows(meta.archetype, tool.scope):
                    tools.setdefault(tool.name, tool)
            if text and text.strip():
                additions.append(text)

        token = self._tokens.generate(agent_name, session_id) if self._tokens is not None else None
        if tools and token:
            template = load_template("tool-instructions")
            additions.append(
                render_template(
                    template, {"toolList": render_tool_list(list(tools.values())), "token": token}
                )
            )

        context = ProviderSession(
            mcp_servers=tuple(servers.values()),
            tools=tuple(tools.values()),
            system_context_additions=tuple(additions),
            token=token,
        )
        self._emit(
            "session:context-ready",
            {
                "agentName": agent_name,
                "mcpServerCount": len(context.mcp_servers),
                "toolCount": len(context.tools),
                "contextAdditions": len(context.system_context_additions),
            },
        )
        return context

    async def _revisions(self) -> tuple[object, ...] | None:
        revisions: list[object] = []
        for provider in self._providers.values():
            revision = getattr(provider, "revision", None)
            if revision is None:
                revisions.append(None)
                continue
            try:
                value = revision()
                revisions.append(await value if inspect.isawaitable(value) else value)
            except Exception:
                log.warning("revision() of context provider %r failed", provider.name, exc_info=True)
                return None  # cannot tell: never reuse
        return tuple(revisions)

    async def session_context(
        self, agent_name: str, meta: AgentInstanceMeta, session_id: str
    ) -> ProviderSession:
        """The provider session for ``session_id`` (a chat key), prepared once and reused.

        It is prepared again when a provider was registered or unregistered, when the token store
        changed, when ``meta`` differs, or when a provider's ``revision()`` returns a different
        value — so a provider rendering live state (the capability catalog) stays current while
        the others keep the session's token and tools stable across turns.
        """
        key = (agent_name, session_id)
        revisions = await self._revisions()
        cached = self._cache.get(key)  # a use: this chat is now the most recent
        if (
            cached is not None
            and revisions is not None
            and cached.generation == self._generation
            and cached.revisions == revisions
            and cached.meta == meta
        ):
            return cached.context
        generation = self._generation
        context = await self.prepare(agent_name, meta, session_id)
        if revisions is not None:
            # beyond MAX_CACHED_SESSIONS the least recently used chat prepares afresh
            self._cache[key] = _Cached(context, meta, revisions, generation)
        return context
