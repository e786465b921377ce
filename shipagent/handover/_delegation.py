"""Delegated runs: a task record, and running the sub-agent of a profile on it.

A sub-agent run is a normal shipagent run of another profile: an agent on the same project, whose
Agent.md text is the profile's instructions, whose model is the profile's (or
``profile_models[name]``), whose tools are the profile's ``tools`` list, and whose chat key is
``<parent chat key>#delegate:<task id>``. Its input is its context box and nothing else — the
parent's history never reaches it — and it leaves its own transcript and output box.

The agent is built by the :data:`SubAgentFactory` the delegating agent gave its handover
(a ``ShipAgent`` builds one of its own class): this package needs only the
:class:`SubAgent` protocol, never the agent class.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio

from ..config import ProfileConfig
from ..errors import BadRequestError, ShipAgentError
from ..history.chats import ChatHistories
from ..results import AgentResult
from ._ids import new_id
from ._render import SubAgentInput, load_sub_agent_input
from ._resources import ResolvedProfile

if TYPE_CHECKING:
    from ._runtime import Handover

__all__ = [
    "DelegationLimitError",
    "DelegationTask",
    "SubAgent",
    "SubAgentFactory",
    "TaskStatus",
    "delegate_chat_key",
    "profile_agent_md",
]

log = logging.getLogger("shipagent.handover")

TaskStatus = Literal["running", "done", "failed"]
DELEGATE_MARK = "#delegate:"


class SubAgent(Protocol):
    """What a delegation needs of the agent that runs a profile."""

    @property
    def chats(self) -> ChatHistories:
        """The chats' histories (the inherited context is committed as the delegate chat's start)."""
        ...

    async def run(self, chat_key: str, text: str) -> AgentResult:
        """Run one turn; never raises for a failure inside the turn."""
        ...


SubAgentFactory = Callable[[ResolvedProfile, "Handover"], SubAgent]
"""``(profile, the delegating handover) -> the agent that runs the profile``."""


class DelegationLimitError(ShipAgentError):
    """A delegation would exceed ship.json ``handover.maxDepth`` or ``handover.maxSubagentsPerRun``."""


def delegate_chat_key(parent_chat_key: str, task_id: str) -> str:
    """The chat key of a delegated run: its transcript and output box live under it."""
    return f"{parent_chat_key}{DELEGATE_MARK}{task_id}"


@dataclass(eq=False)
class DelegationTask:
    """One delegated run, from packing to its answer.

    Attributes:
        task_id: uuid7 hex; what ``delegation_result`` takes.
        profile_name: the profile that runs it.
        chat_key: the sub-agent's chat key (``<parent>#delegate:<task_id>``).
        parent_chat_key: the chat that delegated.
        context_box_id: the packed context box (what the sub-agent sees).
        profile_box_id: the profile box it resolved to.
        status: ``running`` until the run ends, then ``done`` or ``failed``.
        output: the sub-agent's answer (or the failure message of a failed run).
        output_box_id: the sub-agent chat's output box, once it ran.
        error: why it failed, when it did.
    """

    task_id: str
    profile_name: str
    chat_key: str
    parent_chat_key: str
    context_box_id: str
    profile_box_id: str
    profile: ResolvedProfile = field(repr=False)
    status: TaskStatus = "running"
    output: str | None = None
    output_box_id: str | None = None
    error: str | None = None
    finished: anyio.Event = field(default_factory=anyio.Event, repr=False)

    @classmethod
    def new(cls, parent_chat_key: str, context_box_id: str, profile: ResolvedProfile) -> DelegationTask:
        task_id = new_id()
        return cls(
            task_id=task_id,
            profile_name=profile.name,
            chat_key=delegate_chat_key(parent_chat_key, task_id),
            parent_chat_key=parent_chat_key,
            context_box_id=context_box_id,
            profile_box_id=profile.box_id,
            profile=profile,
        )

    def as_dict(self) -> dict[str, Any]:
        """The task as a tool result: ids, status, and the answer or the error once finished."""
        out: dict[str, Any] = {
            "task_id": self.task_id,
            "profile_name": self.profile_name,
            "status": self.status,
            "chat_key": self.chat_key,
            "context_box_id": self.context_box_id,
        }
        if self.status != "running":
            out["output"] = self.output
            out["output_box_id"] = self.output_box_id
        if self.error is not None:
            out["error"] = self.error
        return out


def profile_agent_md(project_root: Path, profile: ProfileConfig) -> str:
    """The sub-agent's Agent.md text: the profile's ``instructions`` then its ``agentMd`` file.

    The sub-agent never inherits the parent's Agent.md: that is the parent's role, not its own.

    Raises:
        BadRequestError: ``agentMd`` points outside the project or cannot be read.
    """
    parts = [profile.instructions.strip()] if profile.instructions else []
    if profile.agent_md:
        root = project_root.resolve()
        path = (root / profile.agent_md).resolve()
        if not path.is_relative_to(root):
            raise BadRequestError(f"profile agentMd {profile.agent_md!r} points outside the project")
        try:
            parts.append(path.read_text(encoding="utf-8").strip())
        except OSError as exc:
            raise BadRequestError(f"profile agentMd {profile.agent_md!r}: {exc.strerror or exc}") from None
    return "\n\n".join(p for p in parts if p)


async def _seed(sub: SubAgent, chat_key: str, rendered: SubAgentInput) -> None:
    """Commit the inherited history as the delegate chat's opening messages (persisted like a turn)."""
    if not rendered.history:
        return
    async with sub.chats.lock(chat_key):
        base = await sub.chats.aget(chat_key)
        await sub.chats.commit(chat_key, f"handover-{new_id()}", base, list(rendered.history))


async def run_task(handover: Handover, task: DelegationTask) -> DelegationTask:
    """Run a packed task to the end. Never raises: every failure is recorded on the task.

    One broken delegation (a crashing model, a bad profile file) must not take down its siblings
    in a fork-join or the parent's run.
    """
    try:
        if handover.sub_agents is None:
            raise ShipAgentError("this handover belongs to no agent; it cannot run sub-agents")
        rendered = await load_sub_agent_input(handover.store, task.context_box_id)
        sub = handover.sub_agents(task.profile, handover)
        # Not entered (``async with``): it shares the parent's started MCP servers, and entering
        # would start (and on exit stop) servers of its own.
        await _seed(sub, task.chat_key, rendered)
        result = await sub.run(task.chat_key, rendered.prompt or "(no instruction was given)")
        task.output = result.output
        task.status = "done" if result.success else "failed"
        if not result.success:
            task.error = result.output
        task.output_box_id = await handover.output_box_id(task.chat_key)
    except anyio.get_cancelled_exc_class():
        task.status, task.error = "failed", "cancelled: the delegating agent shut down"
        raise
    except Exception as exc:
        log.warning(
            "delegation %s (%s) failed: %s: %s", task.task_id, task.profile_name, type(exc).__name__, exc
        )
        task.status = "failed"
        task.error = f"{type(exc).__name__}: {exc}"
    finally:
        task.finished.set()
    return task
