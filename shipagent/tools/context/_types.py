"""The data that flows through the provider injector.

Providers produce three kinds of resources — MCP servers, provider tools and system-prompt
fragments — for one agent described by an :class:`AgentInstanceMeta`. The injector aggregates them
into a :class:`ProviderSession`. Everything here is plain data, validated on construction, so a
provider that builds something unusable fails inside its own call (and is skipped) instead of
breaking the run later.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "ARCHETYPE_LEVEL",
    "SCOPE_MIN_LEVEL",
    "AgentInstanceMeta",
    "Archetype",
    "ContextProvider",
    "McpServerStdio",
    "ProviderSession",
    "ProviderTool",
    "ToolHandler",
    "ToolScope",
    "scope_allows",
]

Archetype = Literal["repo", "service", "employee"]
ToolScope = Literal["all", "service", "employee"]

ARCHETYPE_LEVEL: Mapping[str, int] = {"repo": 0, "service": 1, "employee": 2}
"""How much an agent of each archetype may do; compared with :data:`SCOPE_MIN_LEVEL`."""
SCOPE_MIN_LEVEL: Mapping[str, int] = {"all": 0, "service": 1, "employee": 2}
"""The lowest archetype level a tool of each scope is given to."""

_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

ToolHandler = Callable[..., Any | Awaitable[Any]]
"""Called with the validated arguments as keyword arguments; may be sync or async."""


def scope_allows(archetype: str, scope: str) -> bool:
    """Whether an agent of ``archetype`` gets a tool of ``scope`` (level ≥ minimum level)."""
    return ARCHETYPE_LEVEL[archetype] >= SCOPE_MIN_LEVEL[scope]


@dataclass(frozen=True, slots=True)
class AgentInstanceMeta:
    """What kind of agent a session is prepared for; providers branch on it.

    Attributes:
        name: the agent's name (ship.json ``name``).
        archetype: ``repo`` (works on one project), ``service`` (long-running, serves requests) or
            ``employee`` (autonomous, may be handed whole jobs); decides which scoped tools it gets.
        backend_type: which runtime executes the agent.
        workspace_policy: ``persistent`` or ``ephemeral`` workspace.
        launch_mode: ``direct`` or ``managed``.
    """

    name: str
    archetype: Archetype = "repo"
    backend_type: str = "shipagent"
    workspace_policy: str = "persistent"
    launch_mode: str = "direct"

    def __post_init__(self) -> None:
        if self.archetype not in ARCHETYPE_LEVEL:
            raise ValueError(f"archetype must be one of {', '.join(ARCHETYPE_LEVEL)}, got {self.archetype!r}")


@dataclass(frozen=True, slots=True)
class McpServerStdio:
    """An MCP server a provider wants the agent to have, started as a subprocess.

    Deduplicated by ``name`` across providers: the first registered provider's server wins.
    """

    name: str
    command: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", self.name):
            raise ValueError(f"MCP server name {self.name!r} may use only letters, digits, '_' and '-'")
        if not self.command:
            raise ValueError(f"MCP server {self.name!r} needs a command")


@dataclass(frozen=True, slots=True)
class ProviderTool:
    """A tool a provider gives the agent, defined by a JSON schema and a handler.

    Attributes:
        name: the tool name the model calls (``^[a-zA-Z0-9_-]{1,64}$``, what every provider API
            accepts); deduplicated across providers, first registered wins.
        description: what the tool does, shown to the model.
        parameters: the JSON schema of the arguments (an ``object`` schema). Arguments are
            validated against it before ``handler`` runs; invalid ones go back to the model.
        scope: the lowest archetype that gets the tool (``all`` < ``service`` < ``employee``).
        context: extra usage notes, listed in the tool-instructions block of the system prompt.
        handler: called with the validated arguments as keyword arguments, inside the run's tool
            execution context (``current_tool_context()`` works). Sync handlers run in a thread.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    handler: ToolHandler = field(compare=False, repr=False)
    scope: ToolScope = "all"
    context: str | None = None

    def __post_init__(self) -> None:
        if not _TOOL_NAME.fullmatch(self.name):
            raise ValueError(f"tool name {self.name!r} must match ^[a-zA-Z0-9_-]{{1,64}}$")
        if self.scope not in SCOPE_MIN_LEVEL:
            raise ValueError(
                f"tool {self.name!r}: scope must be one of {', '.join(SCOPE_MIN_LEVEL)}, got {self.scope!r}"
            )
        if not isinstance(self.parameters, dict) or self.parameters.get("type", "object") != "object":
            raise ValueError(f"tool {self.name!r}: parameters must be a JSON schema of type 'object'")
        # jsonschema costs ~0.15 s to import: only when a provider declares a tool
        from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
        from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]

        try:
            Draft202012Validator.check_schema(self.parameters)
        except SchemaError as exc:
            raise ValueError(f"tool {self.name!r}: invalid parameters schema: {exc.message}") from None
        if not callable(self.handler):
            raise ValueError(f"tool {self.name!r}: handler must be callable")


@dataclass(frozen=True, slots=True)
class ProviderSession:
    """What the injector collected for one session.

    Attributes:
        mcp_servers: provider MCP servers, deduplicated by name (first wins).
        tools: provider tools the agent's archetype may use, deduplicated by name (first wins).
        system_context_additions: system-prompt fragments in provider registration order, with the
            tool-instructions block last when there are tools and a token.
        token: the session token (64 lowercase hex), or ``None`` when no token store is set.
    """

    mcp_servers: tuple[McpServerStdio, ...] = ()
    tools: tuple[ProviderTool, ...] = ()
    system_context_additions: tuple[str, ...] = ()
    token: str | None = None


SessionContext = ProviderSession
"""The former name of :class:`ProviderSession`, kept importable."""


@runtime_checkable
class ContextProvider(Protocol):
    """Something that contributes to every session an agent starts.

    Only ``name`` is required. A provider implements any of these optional methods (sync or
    async), each called with ``(agent_name: str, meta: AgentInstanceMeta)``:

    - ``get_mcp_servers`` → ``Sequence[McpServerStdio]``
    - ``get_tools`` → ``Sequence[ProviderTool]``
    - ``get_system_context`` → ``str | None``

    and optionally ``revision() -> object`` (sync or async): while it returns an equal value the
    injector may reuse a provider session prepared earlier for the same chat
    (:meth:`ProviderInjector.session_context`); a provider that renders live state returns a
    new value whenever that state may have changed. A provider without it is reused until it is
    registered again or unregistered.

    (A :class:`~typing.Protocol` cannot declare optional methods, hence the prose.)
    """

    @property
    def name(self) -> str:
        """The registration key: registering another provider with this name replaces this one."""
        ...


ProviderOutputs = tuple[Sequence[McpServerStdio], Sequence[ProviderTool], str | None]
