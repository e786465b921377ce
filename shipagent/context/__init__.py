"""Context providers, the session context injector, and the capability catalog.

Subsystems and user code extend an agent by registering a :class:`ContextProvider` — a
system-prompt fragment, tools, MCP servers — with the agent's :class:`SessionContextInjector`
. The resource pool and the agent context render which capabilities are available
where into an orchestrating agent's prompt.

Quick tour::

    from shipagent.context import ProviderTool, SessionContextInjector

    class Tickets:
        name = "tickets"

        def get_tools(self, agent_name, meta):
            return [ProviderTool("ticket_open", "Open a ticket.", {...schema...}, handler=open_ticket,
                                 scope="service")]

        def get_system_context(self, agent_name, meta):
            return "Open a ticket for every bug you find."
"""

from ._agent_context import (
    AgentContext,
    TaskInfo,
    build_agent_context,
    context_to_system_prompt,
    generate_dynamic_system_prompt,
)
from ._events import EventBus, EventListener, EventSink
from ._injector import SessionContextInjector, render_tool_list
from ._pool import (
    DEFAULT_CAPABILITY_TOOLS,
    Capability,
    CapabilityEntry,
    Resource,
    ResourcePool,
    ResourcePoolSummary,
    ResourceStatus,
)
from ._providers import (
    ARCHETYPE_DESCRIPTIONS,
    AgentContextProvider,
    CoreContextProvider,
    SkillsContextProvider,
)
from ._runtime import AgentContextRuntime, meta_from_config
from ._templates import load_template, render_template
from ._tokens import SessionToken, SessionTokenStore
from ._toolset import provider_toolset
from ._types import (
    ARCHETYPE_LEVEL,
    SCOPE_MIN_LEVEL,
    AgentInstanceMeta,
    Archetype,
    ContextProvider,
    McpServerStdio,
    ProviderTool,
    SessionContext,
    ToolHandler,
    ToolScope,
    scope_allows,
)

__all__ = [
    "ARCHETYPE_DESCRIPTIONS",
    "ARCHETYPE_LEVEL",
    "DEFAULT_CAPABILITY_TOOLS",
    "SCOPE_MIN_LEVEL",
    "AgentContext",
    "AgentContextProvider",
    "AgentContextRuntime",
    "AgentInstanceMeta",
    "Archetype",
    "Capability",
    "CapabilityEntry",
    "ContextProvider",
    "CoreContextProvider",
    "EventBus",
    "EventListener",
    "EventSink",
    "McpServerStdio",
    "ProviderTool",
    "Resource",
    "ResourcePool",
    "ResourcePoolSummary",
    "ResourceStatus",
    "SessionContext",
    "SessionContextInjector",
    "SessionToken",
    "SessionTokenStore",
    "SkillsContextProvider",
    "TaskInfo",
    "ToolHandler",
    "ToolScope",
    "build_agent_context",
    "context_to_system_prompt",
    "generate_dynamic_system_prompt",
    "load_template",
    "meta_from_config",
    "provider_toolset",
    "render_template",
    "render_tool_list",
    "scope_allows",
]
