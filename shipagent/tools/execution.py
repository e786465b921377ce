"""The tool execution context: what a tool can reach of the run it is called from.

A run passes its :class:`ToolExecutionContext` to pydantic-ai as ``deps`` (``ctx.deps.tool`` of a
``RunContext[TurnDeps]``, see ``shipagent.tools._deps``); a tool written without a ``ctx`` parameter
(user-written, provider) calls :func:`current_tool_context` for the same object. Either way it
reads the chat key and the project and injects messages the model sees on every later request of
the same run.

Injected messages never enter the chat's persisted history. They travel as data: the injecting
tool call's ``ToolReturn`` carries them in its metadata (``shipagent.window.injections``), the
history placement capability (``shipagent.window.placement``) rebuilds them from the run's
messages and lays them into each request as it is sent, and the commit strips them. So they
survive anything that rebuilds the run from its messages (a replayed durable turn) while this
object only keeps the per-run dedupe state that answers ``inject_*_once``.
"""

from __future__ import annotations

import contextvars
import hashlib
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from ..errors import ToolContextError
from ..window.injections import InjectedMessage

if TYPE_CHECKING:
    from ..chatkeys import ShipPaths
    from ..config import ShipConfig
    from ..store.files._store import ContextFiles
    from .context._types import SessionContext

__all__ = [
    "ApprovalRequest",
    "FileReplyChannel",
    "InjectedMessage",
    "InjectionReason",
    "InjectionResult",
    "OutgoingFile",
    "ReplyChannel",
    "ToolExecutionContext",
    "collect_call_injections",
    "current_tool_context",
    "fingerprint_of",
    "use_tool_context",
]

InjectionReason = Literal["missing_fingerprint", "empty_content", "duplicate", "limit_reached"]


@dataclass(frozen=True, slots=True)
class InjectionResult:
    """What an ``inject_*_once`` call did: ``inserted`` or the ``reason`` it did not."""

    inserted: bool
    reason: InjectionReason | None = None


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """Passed to the ``on_approval`` callback when a tool needs the user's permission."""

    tool: str
    command: str
    chat_key: str
    request_id: str


ApprovalCallback = Callable[[ApprovalRequest], "bool | Awaitable[bool]"]


def fingerprint_of(*parts: object) -> str:
    """A short stable hash of ``parts`` (for fingerprints built from content)."""
    digest = hashlib.sha1("\x1f".join(map(str, parts)).encode("utf-8")).hexdigest()
    return digest[:16]


@runtime_checkable
class ReplyChannel(Protocol):
    """Where a turn's ``chat_send`` delivers, when the chat lives somewhere (a chat app, a terminal).

    The core knows only this: a host passes one to ``ShipAgent.run(..., channel=...)`` and the
    turn's ``chat_send`` calls it (a coroutine, or a plain function). What a chat app's channel
    does besides — streaming by edits, buttons — is the channel host's (``shipagent.hosts.channels``);
    a channel that takes files implements :class:`FileReplyChannel` too.
    """

    def send_text(self, chat_key: str, text: str) -> Awaitable[None] | None:
        """Deliver ``text`` to the chat now; raising says it could not (the model is told)."""
        ...


@dataclass(frozen=True, slots=True)
class OutgoingFile:
    """A file ``chat_send_file`` hands to a channel.

    The bytes, not a path: the tool reads the file once, after its checks (inside the project,
    not a secret, within the size cap), so what the channel sends is what was checked, whatever
    happens to the path afterwards.

    Attributes:
        name: the file name the chat shows (``report.pdf``).
        data: the file's content.
        caption: text shown with the file (Markdown, like a message), if any.
        path: where the file is, relative to the project (for logs and the transcript).
    """

    name: str
    data: bytes
    caption: str | None = None
    path: str = ""


@runtime_checkable
class FileReplyChannel(ReplyChannel, Protocol):
    """A :class:`ReplyChannel` that also delivers files (the ``chat_send_file`` tool).

    A protocol of its own rather than a method every channel must have: a terminal or an HTTP
    client has nowhere to put a file, and a channel that cannot take one simply does not implement
    this, so the tool tells the model the chat cannot receive files instead of pretending.
    """

    def send_file(self, chat_key: str, file: OutgoingFile) -> Awaitable[None] | None:
        """Deliver ``file`` to the chat now; raising says it could not (the model is told)."""
        ...


@dataclass(eq=False)
class ToolExecutionContext:
    """Everything a tool may know about the run it executes in.

    Attributes:
        chat_key: the conversation this run belongs to.
        request_id: unique per run; also the transcript's and agent-context log's ``requestId``.
        project_root: the project directory (ship.json lives here).
        config: the validated ship.json.
        max_injected_messages: per-run cap on injected messages (ship.json
            ``context.injection.maxInjectedMessages``).
        paths: where this project's ``.ship/`` files are.
        session_token: the session token of the context injector, when one is issued.
        channel: where ``chat_send`` delivers (a :class:`ReplyChannel`), if the chat has one; a
            :class:`FileReplyChannel` also takes ``chat_send_file``'s files.
        on_approval: the permission callback for tools that ask (``exec_shell`` in ``ask`` mode).
        context_files: the project's context files store; the agent sets it, and tools
            used outside an agent make one from ``paths`` on first use.
        session: the chat's prepared session context (what the context providers contributed), once the
            run's instructions were assembled; its tools are offered for this run.
        subagents_started: sub-agents this run has started so far (ship.json
            ``handover.maxSubagentsPerRun`` counts one run's delegations, whichever tool started them).
        extras: a place for code outside shipagent (your own tools, providers) to hang per-run
            state, keyed by your subsystem's name. shipagent's own state has typed fields above.
    """

    chat_key: str
    request_id: str
    project_root: Path
    config: ShipConfig
    paths: ShipPaths
    max_injected_messages: int = 120
    session_token: str | None = None
    channel: ReplyChannel | None = None
    on_approval: ApprovalCallback | None = None
    context_files: ContextFiles | None = None
    session: SessionContext | None = None
    subagents_started: int = 0
    extras: dict[str, Any] = field(default_factory=dict)
    sent_texts: list[str] = field(default_factory=list)
    _injected: list[InjectedMessage] = field(default_factory=list, repr=False)
    _fingerprints: set[str] = field(default_factory=set, repr=False)

    # -- injection -------------------------------------------------------------------------------

    def _inject(
        self, role: Literal["system", "assistant"], content: str, fingerprint: str
    ) -> InjectionResult:
        if not fingerprint or not fingerprint.strip():
            return InjectionResult(False, "missing_fingerprint")
        if not content or not content.strip():
            return InjectionResult(False, "empty_content")
        if fingerprint in self._fingerprints:
            return InjectionResult(False, "duplicate")
        if len(self._injected) >= self.max_injected_messages:
            return InjectionResult(False, "limit_reached")
        self._fingerprints.add(fingerprint)
        message = InjectedMessage(role, content, fingerprint)
        self._injected.append(message)
        _recording(message)
        return InjectionResult(True)

    def inject_system_message_once(self, content: str, *, fingerprint: str) -> InjectionResult:
        """Add a system message at the top of every later model request of this run.

        Use it for rules, constraints and engineering summaries. Deduplicated by ``fingerprint``
        within the run; at most ``max_injected_messages`` injections per run.
        """
        return self._inject("system", content, fingerprint)

    def inject_assistant_message_once(self, content: str, *, fingerprint: str) -> InjectionResult:
        """Add an assistant message right before the current user message of later requests.

        Use it for conversational material (an earlier transcript). The user's own text is never
        rewritten.
        """
        return self._inject("assistant", content, fingerprint)

    def reset_injections(self) -> None:
        """Forget this run's injections (a retried tool loop starts without them)."""
        self._injected.clear()
        self._fingerprints.clear()

    @property
    def injected(self) -> tuple[InjectedMessage, ...]:
        """The messages injected so far in this run, in injection order."""
        return tuple(self._injected)


@dataclass(frozen=True, slots=True)
class _Scope:
    """What :data:`_current` holds: the run, and the injections of the tool call running here."""

    run: ToolExecutionContext
    call: list[InjectedMessage] | None = None


_current: contextvars.ContextVar[_Scope | ToolExecutionContext | None] = contextvars.ContextVar(
    "shipagent_tool_context", default=None
)
"""The run this code executes in, for code pydantic-ai calls without a ``RunContext``.

Tools that take ``ctx: RunContext[TurnDeps]`` read the run from ``ctx.deps``. A tool written
without that parameter (a user's plain function, a context provider's handler, a sync tool in a
worker thread) has no other way to reach its run: pydantic-ai calls it with its arguments only.
So a run sets this one variable for its duration, and each tool call narrows it to a scope with
that call's own injection list (see :func:`collect_call_injections`). A bare context (set by code
that predates the scopes) counts as a run without a call list.
"""


def _recording(message: InjectedMessage) -> None:
    scope = _current.get()
    if (
        isinstance(scope, _Scope) and scope.call is not None
    ):  # the call's own record, returned with its result
        scope.call.append(message)


@contextmanager
def collect_call_injections(run: ToolExecutionContext | None = None) -> Iterator[list[InjectedMessage]]:
    """Collect what one tool call injects, separately from concurrent calls of the same step.

    pydantic-ai runs a step's tool calls as separate asyncio tasks, each with a copy of the
    context; a scope set here inside the task is therefore that call's alone, even though the
    :class:`ToolExecutionContext` (and its dedupe state) is shared by the whole run. Sync tools
    run in a worker thread with a copy of the same context, so they append to the same list.
    ``run`` is the call's run (``ctx.deps.tool``); by default the current one.
    """
    found: list[InjectedMessage] = []
    run = run if run is not None else running_tool_context()
    if run is None:  # no run: nothing can inject
        yield found
        return
    token = _current.set(_Scope(run, found))
    try:
        yield found
    finally:
        _current.reset(token)


def running_tool_context() -> ToolExecutionContext | None:
    """The current run's context, or ``None`` outside a run (never raises)."""
    scope = _current.get()
    return scope.run if isinstance(scope, _Scope) else scope


def current_tool_context() -> ToolExecutionContext:
    """The :class:`ToolExecutionContext` of the run this code executes in.

    Raises:
        ToolContextError: when called outside a run (a tool invoked directly, a script).
    """
    ctx = running_tool_context()
    if ctx is None:
        raise ToolContextError(
            "current_tool_context() was called outside a shipagent run; tools get a context only "
            "while ShipAgent.run() executes them"
        )
    return ctx


@contextmanager
def use_tool_context(ctx: ToolExecutionContext) -> Iterator[ToolExecutionContext]:
    """Make ``ctx`` the current tool context for the duration of the block."""
    token = _current.set(_Scope(ctx))
    try:
        yield ctx
    finally:
        _current.reset(token)
