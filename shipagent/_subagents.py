"""The agent of a profile: how a ``ShipAgent`` builds the sub-agents its handover runs.

The handover package only knows the :class:`~shipagent.handover.SubAgent` protocol; the agent
gives its :class:`~shipagent.handover.Handover` :func:`sub_agent_factory` ``(self)``, so the
dependency runs one way (agent → handover) and a sub-agent is a ``ShipAgent`` of the parent's class.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from .handover import Handover, ResolvedProfile, SubAgentFactory
from .handover._delegation import profile_agent_md

if TYPE_CHECKING:
    from .agent import ShipAgent

__all__ = ["build_sub_agent", "sub_agent_factory"]


def sub_agent_factory(parent: ShipAgent) -> SubAgentFactory:
    """The factory ``parent`` hands to its handover: builds ``parent``'s sub-agents."""
    return partial(build_sub_agent, parent)


def build_sub_agent(parent: ShipAgent, profile: ResolvedProfile, handover: Handover) -> ShipAgent:
    """A new agent of ``parent``'s class running ``profile`` on the same project.

    Model: ``parent.profile_models[name]``, else the profile's ``model`` (built with ship.json
    ``llm``'s provider settings), else the parent's model. Tools: the parent's own toolsets, limited
    to the profile's ``tools`` when it has that list. MCP servers: the parent's, shared.

    Raises:
        BadRequestError: the profile's ``agentMd`` is outside the project or unreadable.
    """
    config = parent.config
    model: Any = parent.profile_models.get(profile.name)
    if model is None and profile.config.model:
        config = config.model_copy(
            update={"llm": config.llm.model_copy(update={"model": profile.config.model})}
        )
    elif model is None:
        model = parent.model
    sub = type(parent)(
        parent.project_root,
        config,
        model=model,
        toolsets=getattr(parent, "_user_toolsets", ()),
        on_approval=parent.on_approval,
        profile_models=parent.profile_models,
        agent_md=profile_agent_md(parent.project_root, profile.config),
    )
    sub.handover = handover.child(sub_agent_factory(sub), profile.config.tools)
    if profile.config.skills is not None:  # the profile's skills: the overview, skills_list and skills_load
        sub.skills_cache.only = tuple(profile.config.skills)
    # ship.json MCP servers are the parent's, already running: a delegation must not spawn another
    # set of server processes per sub-agent (a fork_join of four would start four of each).
    sub.mcp = parent.mcp
    return sub
