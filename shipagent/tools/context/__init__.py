"""Context providers, the provider injector, and the capability catalog.

Subsystems and user code extend an agent by registering a :class:`ContextProvider` — a
system-prompt fragment, tools, MCP servers — with the agent's :class:`ProviderInjector`
(``agent.injector``). The resource pool, snapshotted with its task (:class:`PoolSnapshot`), renders
which capabilities are available where into an orchestrating agent's prompt: the capability catalog.

Quick tour::

    from shipagent.tools.context import ProviderTool

    class Tickets:
        name = "tickets"

        def get_tools(self, agent_name, meta):
            return [ProviderTool("ticket_open", "Open a ticket.", {...schema...}, handler=open_ticket,
                                 scope="service")]

        def get_system_context(self, agent_name, meta):
            return "Open a ticket for every bug you find."
"""

from ._capability_catalog import PoolSnapshot, build_agent_context, context_to_system_prompt
from ._events import EventBus
from ._injector import ProviderInjector
from ._pool import Resource, ResourcePool
from ._runtime import ProviderRuntime
from ._tokens import SessionTokenStore
from ._types import AgentInstanceMeta, ContextProvider, McpServerStdio, ProviderSession, ProviderTool

# former names, kept importable (not part of ``__all__``)
AgentContext = PoolSnapshot
AgentContextRuntime = ProviderRuntime
SessionContext = ProviderSession
SessionContextInjector = ProviderInjector

__all__ = [
    "AgentInstanceMeta",
    "ContextProvider",
    "EventBus",
    "McpServerStdio",
    "PoolSnapshot",
    "ProviderInjector",
    "ProviderRuntime",
    "ProviderSession",
    "ProviderTool",
    "Resource",
    "ResourcePool",
    "SessionTokenStore",
    "build_agent_context",
    "context_to_system_prompt",
]
