"""Delegated runs: a task record, and running the sub-agent of a profile on it.

A sub-agent run is a normal shipagent run of another profile: an agent on the same project, whose
Agent.md text is the profile's instructions, whose model is the profile's (or
``profile_models[name]``), whose tools are the profile's ``tools`` list, and whose chat key is
``<parent chat key>#delegate:<task id>``. Its input is its context box and nothing else — the
parent's history never reaches it — and it leaves its own transcript and output box.

The agent is built by the :data:`~shipagent.tools.handover.SubAgentFactory` the delegating agent gave
its handover (a ``ShipAgent`` builds one of its own class): this package needs only the
:class:`SubAgent` protocol, never the agent class. Running a task is the handover's
(:meth:`Handover.run <shipagent.tools.handover.Handover.run>`); this module is what a task is.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import anyio

from ...config import ProfileConfig
from ...errors import BadRequestError, ShipAgentError
from ...results import AgentResult
from ...store.cards._ids import new_id
from ...store.chats import ChatHistories
from ._resources import ResolvedProfile

__all__ = [
    "DelegationLimitError",
    "DelegationTask",
    "SubAgent",
    "TaskStatus",
    "delegate_chat_key",
    "profile_agent_md",
]

log = logging.getLogger("shipagent.tools.handover")

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
