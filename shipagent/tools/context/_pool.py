"""The resource pool: who can do what right now.

An orchestrating agent dispatches work by capability (``web_search``, ``file_ops``) rather than by
executor name. The pool holds the executors (sub-agents, tools, services) with their capabilities
and status, and answers the questions an orchestrator asks before dispatching: how many are free,
which ones have a capability, which required capabilities have nobody available.

Capabilities come from tools: ship.json ``capabilities`` maps a capability to the tools it needs
(``"file_ops": ["read_file", "write_file"]``), and a resource holding *all* of them has it.
:meth:`ResourcePool.grant_tool` hands a resource one more tool; the capabilities it completes show
up in the catalog at once.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from ...errors import NotFoundError

if TYPE_CHECKING:
    from ...config import ShipConfig

__all__ = [
    "DEFAULT_CAPABILITY_TOOLS",
    "Capability",
    "CapabilityEntry",
    "Resource",
    "ResourcePool",
    "ResourcePoolSummary",
    "ResourceStatus",
]

ResourceStatus = Literal["available", "busy", "error"]
_STATUSES: tuple[str, ...] = ("available", "busy", "error")

DEFAULT_CAPABILITY_TOOLS: Mapping[str, tuple[str, ...]] = {
    "web_search": ("web_search",),
    "file_ops": ("read_file", "write_file"),
    "code_generation": ("code_generation_tool",),
    "shell_exec": ("shell_exec",),
    "report_generation": ("report_generator",),
}
"""The built-in capability → required tools table; ship.json ``capabilities`` extends or overrides it."""


@dataclass(frozen=True, slots=True)
class Capability:
    """A capability a resource has, with how well it has it (``level``, higher is better)."""

    type: str
    level: int = 1


@dataclass(frozen=True, slots=True)
class Resource:
    """One executor in the pool.

    Attributes:
        id: unique in the pool (``executor-research``).
        type: what it is (``agent``, ``tool``, ``service``); informational.
        capabilities: what it can do; tool-derived capabilities are added by the pool.
        status: ``available`` (may be dispatched to), ``busy`` or ``error``.
        tools: the tool names it holds; they bring capabilities through the pool's table.
    """

    id: str
    type: str
    capabilities: tuple[Capability, ...] = ()
    status: ResourceStatus = "available"
    tools: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("a resource needs a non-empty id")
        if self.status not in _STATUSES:
            raise ValueError(f"resource {self.id!r}: status must be one of {', '.join(_STATUSES)}")
        object.__setattr__(self, "capabilities", tuple(self.capabilities))
        object.__setattr__(self, "tools", tuple(dict.fromkeys(self.tools)))

    def has(self, capability: str) -> bool:
        """Whether this resource has ``capability`` (at any level)."""
        return any(c.type == capability for c in self.capabilities)


@dataclass(frozen=True, slots=True)
class ResourcePoolSummary:
    """Resource counts by status."""

    total: int
    available: int
    busy: int
    error: int


@dataclass(frozen=True, slots=True)
class CapabilityEntry:
    """One row of the capability catalog."""

    capability: str
    available: int
    total: int
    available_resources: tuple[str, ...] = field(default=())


class ResourcePool:
    """The executors an orchestrator can dispatch to, and the capability catalog derived from them.

    Every change bumps :attr:`revision`, so whoever rendered the catalog can tell it is stale.
    """

    def __init__(
        self,
        resources: Iterable[Resource] = (),
        *,
        capability_tools: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self._table: dict[str, tuple[str, ...]] = dict(DEFAULT_CAPABILITY_TOOLS)
        for capability, tools in (capability_tools or {}).items():
            self._table[capability] = tuple(tools)
        self._resources: dict[str, Resource] = {}
        self._revision = 0
        for resource in resources:
            self.add_resource(resource)

    @classmethod
    def from_config(cls, config: ShipConfig) -> ResourcePool:
        """A pool with one ``agent`` resource per ship.json profile, holding the profile's tools.

        The capability table is the built-in one, extended by ship.json ``capabilities``.
        """
        pool = cls(capability_tools=config.capabilities)
        for name, profile in config.profiles.items():
            pool.add_resource(Resource(id=name, type="agent", tools=tuple(profile.tools or ())))
        return pool

    # -- reading ---------------------------------------------------------------------------------

    @property
    def capability_tools(self) -> Mapping[str, tuple[str, ...]]:
        """Capability → the tools a resource must hold to have it."""
        return dict(self._table)

    @property
    def revision(self) -> int:
        """Bumped by every change to the pool."""
        return self._revision

    @property
    def resources(self) -> list[Resource]:
        """All resources, in the order they were added."""
        return list(self._resources.values())

    def get(self, resource_id: str) -> Resource:
        """The resource called ``resource_id``.

        Raises:
            NotFoundError: no such resource.
        """
        try:
            return self._resources[resource_id]
        except KeyError:
            known = ", ".join(self._resources) or "none"
            raise NotFoundError(f"no resource {resource_id!r} in the pool (resources: {known})") from None

    def capabilities_of_tools(self, tools: Iterable[str]) -> list[str]:
        """The capabilities whose required tools are all in ``tools``, in table order."""
        held = set(tools)
        return [cap for cap, needed in self._table.items() if needed and held.issuperset(needed)]

    def summary(self) -> ResourcePoolSummary:
        """How many resources there are, by status."""
        statuses = [r.status for r in self._resources.values()]
        return ResourcePoolSummary(
            total=len(statuses),
            available=statuses.count("available"),
            busy=statuses.count("busy"),
            error=statuses.count("error"),
        )

    def capability_catalog(self) -> list[CapabilityEntry]:
        """Per capability any resource has: available count, total count, available resource ids.

        Ordered as the capability table (built-in, then ship.json's), then capabilities outside the
        table in the order resources bring them — stable, so the rendered prompt does not churn.
        """
        order = list(
            dict.fromkeys(
                itertools.chain(
                    (cap for cap in self._table if any(r.has(cap) for r in self._resources.values())),
                    (c.type for r in self._resources.values() for c in r.capabilities),
                )
            )
        )
        entries: list[CapabilityEntry] = []
        for capability in order:
            holders = [r for r in self._resources.values() if r.has(capability)]
            free = tuple(r.id for r in holders if r.status == "available")
            entries.append(CapabilityEntry(capability, len(free), len(holders), free))
        return entries

    def missing(self, required_capabilities: Iterable[str]) -> list[str]:
        """The required capabilities no available resource has (in the order asked, once each)."""
        return [
            cap
            for cap in dict.fromkeys(required_capabilities)
            if not any(r.has(cap) and r.status == "available" for r in self._resources.values())
        ]

    # -- changing --------------------------------------------------------------------------------

    def _with_tool_capabilities(self, resource: Resource) -> Resource:
        gained = [c for c in self.capabilities_of_tools(resource.tools) if not resource.has(c)]
        if not gained:
            return resource
        return replace(resource, capabilities=(*resource.capabilities, *(Capability(c) for c in gained)))

    def _store(self, resource: Resource) -> Resource:
        self._resources[resource.id] = resource
        self._revision += 1
        return resource

    def add_resource(self, resource: Resource) -> Resource:
        """Add ``resource`` (with the capabilities its tools bring) and return it as stored.

        Raises:
            ValueError: a resource with that id is already in the pool.
        """
        if resource.id in self._resources:
            raise ValueError(f"resource {resource.id!r} is already in the pool")
        return self._store(self._with_tool_capabilities(resource))

    def remove_resource(self, resource_id: str) -> Resource:
        """Remove and return the resource called ``resource_id`` (``NotFoundError`` if absent)."""
        resource = self.get(resource_id)
        del self._resources[resource_id]
        self._revision += 1
        return resource

    def set_status(self, resource_id: str, status: ResourceStatus) -> Resource:
        """Mark a resource ``available``, ``busy`` or ``error``."""
        if status not in _STATUSES:
            raise ValueError(f"status must be one of {', '.join(_STATUSES)}, got {status!r}")
        return self._store(replace(self.get(resource_id), status=status))

    def grant_tool(self, resource_id: str, tool_name: str) -> list[str]:
        """Give a resource one more tool; returns the capabilities that tool completed for it.

        A capability needing several tools (``file_ops``: ``read_file`` + ``write_file``) appears
        once the last of them is granted. The catalog reflects it immediately.
        """
        resource = self.get(resource_id)
        if tool_name in resource.tools:
            return []
        updated = self._with_tool_capabilities(replace(resource, tools=(*resource.tools, tool_name)))
        self._store(updated)
        return [c.type for c in updated.capabilities[len(resource.capabilities) :]]
