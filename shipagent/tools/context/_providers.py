"""The built-in context providers: identity, skills overview, capability catalog.

Each is an ordinary :class:`~shipagent.tools.context.ContextProvider` — the same interface user code
implements — so the runtime's own prompt sections get no privileges a plugin would not have.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime, time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from ._capability_catalog import build_agent_context, context_to_system_prompt
from ._pool import ResourcePool
from ._templates import load_template, render_template
from ._types import AgentInstanceMeta

if TYPE_CHECKING:
    from ...config import ShipConfig

__all__ = [
    "ARCHETYPE_DESCRIPTIONS",
    "CapabilityCatalogProvider",
    "CoreContextProvider",
    "SkillsContextProvider",
]

ARCHETYPE_DESCRIPTIONS: dict[str, str] = {
    "repo": "you work on one project directory at a time, at the request of the people you talk to.",
    "service": "you run as a long-lived service that answers requests from many chats and other systems.",
    "employee": "you take on whole jobs on your own, plan them, and hand parts to other agents when that is faster.",
}


class CoreContextProvider:
    """``core-identity``: who the agent is and what the platform gives it (``core-identity.md``)."""

    name = "core-identity"

    def get_system_context(self, agent_name: str, meta: AgentInstanceMeta) -> str:
        """The rendered identity template for this agent."""
        return render_template(
            load_template("core-identity"),
            {
                "agentName": agent_name,
                "archetype": meta.archetype,
                "archetypeDescription": ARCHETYPE_DESCRIPTIONS[meta.archetype],
                "backendType": meta.backend_type,
                "workspacePolicy": meta.workspace_policy,
            },
        ).strip()


class SkillsContextProvider:
    """``skills``: the one-line-per-skill overview, so the model knows which skills to load.

    Give it a project (``SkillsContextProvider(root, config)``, scanning with
    :mod:`shipagent.tools.skills` on every call) or any ``overview`` callable, sync or async (the agent
    passes one reading its skills cache). Skills change on disk while the agent runs, so
    :meth:`revision` is the overview itself: a chat's cached provider session is re-prepared when
    it changes.
    """

    name = "skills"

    def __init__(
        self,
        project_root: Path | None = None,
        config: ShipConfig | None = None,
        *,
        overview: Callable[[], str | Awaitable[str | None] | None] | None = None,
    ) -> None:
        if overview is None:
            if project_root is None or config is None:
                raise ValueError("SkillsContextProvider needs project_root and config, or overview=")
            root, cfg = project_root, config

            def overview() -> str | None:
                from ..skills import discover_skills, render_skills_overview

                return render_skills_overview(discover_skills(root, cfg))

        self._overview = overview

    async def _text(self) -> str | None:
        value = self._overview()
        text = await value if inspect.isawaitable(value) else value
        return text.strip() if text and text.strip() else None

    async def revision(self) -> object:
        """The current overview text (equal text → the cached provider session is still right)."""
        return await self._text()

    async def get_system_context(self, agent_name: str, meta: AgentInstanceMeta) -> str | None:
        """The skills overview, or ``None`` when the project has no skills."""
        return await self._text()


class CapabilityCatalogProvider:
    """``agent-context``: the resource pool and capability catalog, freshly rendered every run.

    The catalog is live state — a resource turns busy, a tool is granted — so :meth:`revision`
    follows the pool's revision: a run after a change re-prepares the provider session and the
    model sees the pool as it is now; between changes the text stays the same.

    Its "As of" is the day of the agent's clock (midnight UTC), not the moment of rendering: every
    process — each worker of a cluster, each restart — renders the same pool on the same day to
    the same bytes, so a chat that moves between processes keeps its prompt prefix (and the
    provider's prompt cache). A new day is a change, like a new date in the default prompt.
    """

    name = "agent-context"

    def __init__(
        self,
        pool: ResourcePool,
        *,
        orchestrator_note: str | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.pool = pool
        self.orchestrator_note = orchestrator_note
        self.clock: Callable[[], datetime] = clock or partial(datetime.now, UTC)
        self._rendered: tuple[tuple[int, date], str] | None = None

    def _day(self) -> date:
        return self.clock().astimezone(UTC).date()

    def revision(self) -> object:
        """The pool's revision and the day: the rendering changes exactly when one of them did."""
        return (self.pool.revision, self._day())

    def get_system_context(self, agent_name: str, meta: AgentInstanceMeta) -> str:
        """The rendered pool status and capability catalog.

        Rendered again only when the pool or the day changed, so the instructions stay
        byte-identical between changes: a fresh timestamp every run would break the provider's
        prompt cache and re-issue the session token.
        """
        key = (self.pool.revision, self._day())
        if self._rendered is None or self._rendered[0] != key:
            as_of = datetime.combine(key[1], time(), tzinfo=UTC)
            text = context_to_system_prompt(
                build_agent_context(self.pool, orchestrator_note=self.orchestrator_note, now=as_of)
            )
            self._rendered = (key, text)
        return self._rendered[1]
