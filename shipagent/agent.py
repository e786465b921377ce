"""``ShipAgent``: one project directory as an agent, one history per chat key.

A turn (DESIGN §2): validate the chat key and take that chat's lock → load the history (from
``.ship/`` after a restart) → assemble instructions → set the tool execution context → run
pydantic-ai's tool loop with the :class:`~shipagent.history.placement.ContextWindow` capability →
commit user + new messages, transcript and agent-context entries, compact when over the bound →
return an :class:`AgentResult`.

``run_stream`` is the same turn with its events (text deltas, tool steps, approvals, ``Done``)
yielded as they happen; ``run`` drives it without them.

``run`` raises only for caller mistakes (``ChatKeyError``, ``ConfigError``). Everything that can go
wrong inside a turn comes back as ``AgentResult(success=False)`` with the chat's history unchanged.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelContextWindowExceededError, ModelHTTPError
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model
from pydantic_ai.toolsets import AbstractToolset

from . import _quiet  # noqa: F401  (first of ours: pydantic-ai's banner off before any agent exists)
from . import instructions as _instructions
from ._combined import SequentialCombinedToolset
from ._explain import explain_failure
from ._guard import GuardedToolset
from ._lock import ProjectLock
from ._retry import report_retries
from ._steps import StepCallback, StepReporter, tool_call_records
from ._streaming import (
    Emit,
    PendingApprovals,
    approval_bridge,
    can_stream,
    emit_response_text,
    stream_model_request,
    stream_tool_calls,
    stream_turn,
)
from ._subagents import sub_agent_factory
from .chatkeys import ShipPaths, validate_chat_key
from .config import ShipConfig, load_config
from .context import AgentContextRuntime
from .errors import ConfigError, ShipAgentError
from .events import Compacted, RunEvent
from .execution import ApprovalCallback, ToolExecutionContext, current_tool_context, use_tool_context
from .execution import _current as _current_tool_context
from .files import CatalogToolset, ContextFiles, SpillToolset, context_toolset
from .handover import Handover
from .history.chats import ChatHistories
from .history.compaction import CompactionResult, compact
from .history.injections import InjectionToolset
from .history.placement import ContextWindow
from .history.reconcile import reconcile
from .history.stores import AgentContextLog, Transcript
from .history.summarizer import model_summarizer
from .history.tokens import TokenCalibration
from .ledger import Ledger, RequestRecord
from .mcp import McpManager
from .models import build_model, build_model_settings
from .results import AgentResult, StepEvent
from .tools import SkillsCache, builtin_toolset, load_tool_modules, warn_if_unsandboxed
from .turns import (
    CommitOutcome,
    SharedChats,
    TurnCommit,
    TurnExecutor,
    TurnHooks,
    executor_factories,
    shared_factories,
)

__all__ = ["ShipAgent", "is_context_overflow"]

log = logging.getLogger("shipagent")
_LoopResult = tuple[str, list[ModelMessage], str, Any]
"""``(run_id, all messages, output text, usage)`` of one tool loop."""
MAX_OVERFLOW_RETRIES = 3
_OVERFLOW_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "prompt is too long",
    "too many tokens",
    "input is too long",
)


def is_context_overflow(exc: BaseException) -> bool:
    """Whether a provider error says the request did not fit the model's context window."""
    if isinstance(exc, ModelContextWindowExceededError):
        return True
    if isinstance(exc, ModelHTTPError) and exc.status_code in (400, 413):
        text = f"{exc.body} {exc}".lower()
        return any(marker in text for marker in _OVERFLOW_MARKERS)
    return False


def _instrumentation(config: ShipConfig) -> list[Any] | None:
    """pydantic-ai's OpenTelemetry instrumentation when ship.json ``observability.otel`` is on."""
    if not config.observability.otel:
        return None
    from pydantic_ai.capabilities.instrumentation import Instrumentation

    return [Instrumentation()]


def _then(first: Any, second: Any) -> Any:
    """``first`` then ``second`` (if any), as one blocking callable."""
    if second is None:
        return first

    def both() -> None:
        first()
        second()

    return both


class ShipAgent:
    """An agent made from a project directory (``ship.json``, ``Agent.md``, ``skills/``).

    Create it with :meth:`from_project`; use ``async with agent:`` to start what it holds (MCP
    servers) and ``await agent.run(chat_key, text)`` for each turn.
    """

    def __init__(
        self,
        project_root: Path,
        config: ShipConfig,
        *,
        model: Model | str | None = None,
        toolsets: Sequence[AbstractToolset[Any]] = (),
        on_approval: ApprovalCallback | None = None,
        providers: Sequence[Any] = (),
        profile_models: Mapping[str, Model | str] | None = None,
        agent_md: str | None = None,
        project_lock: bool = True,
    ) -> None:
        self.project_root = project_root
        self.config = config
        self.paths = ShipPaths(project_root)
        self.on_approval = on_approval
        self.profile_models = dict(profile_models or {})
        self._model_override = model
        self._model: Model | None = None
        self._user_toolsets = list(toolsets)
        self._agent_md = agent_md
        self.chats = ChatHistories(self.paths, config.context.chat_history)
        # Context files (seed 003): spilled tool output, compacted history and the catalog, per
        # chat key. Usable without starting the agent (``shipagent context export``).
        self.context_files = ContextFiles(self.paths)
        # A durable cluster (issue 14): its chats and context files live in a database every
        # worker shares; ``None`` when they are this project's ``.ship/`` files.
        shared = shared_factories.get("durable") if config.durable.enabled else None
        self.shared: SharedChats | None = shared(project_root, config) if shared is not None else None
        if self.shared is not None:
            self.context_files = self.shared.context_files
        self.chats.compaction_hooks.append(self._keep_compacted)
        if config.context.chat_history.summarizer == "model":  # issue 13 §6; falls back to extract
            self.chats.summarizer = model_summarizer(self._summary_model)
        self._context_toolset = context_toolset()
        self.transcript = Transcript(self.paths)
        self.agent_context = AgentContextLog(self.paths, window=config.context.agent_context.window_entries)
        # a chat hydrated after a crash gets the transcript/log entries its last turns lack
        self.chats.reconciler = partial(reconcile, self.chats.log, self.transcript, self.agent_context)
        self.instruction_sources: list[_instructions.InstructionSource] = []
        # Builtin tools and ship.json ``tools.modules``; the skills overview comes first among the
        # instruction sources (after Agent.md and the default prompt) and shares the tools' cache.
        self.skills_cache = SkillsCache()
        self._builtin_toolset = builtin_toolset(skills_cache=self.skills_cache)
        self._module_toolsets = load_tool_modules(config, project_root=project_root)
        # ship.json MCP servers (issue 4): started by ``async with agent``, their tools offered
        # as ``<server>__<tool>``; a server that fails is reported in ``agent.mcp.servers``.
        self.mcp = McpManager(config, project_root)
        # Context providers (seed 000/004): the skills overview, then ``providers``, then the
        # capability catalog when ship.json declares ``capabilities``. Their additions follow
        # Agent.md and the default prompt; their tools join the toolsets; ``agent.injector``
        # registers more.
        self.context_runtime = AgentContextRuntime(
            config, project_root, providers=providers, skills=self.skills_cache
        )
        self.injector = self.context_runtime.injector
        self.instruction_sources.append(self.context_runtime.instructions)
        # The ledger room (issue 13 §2) listens to the context window; the core never imports it.
        self._ledger = Ledger(self.paths, config.context.ledger, otel=config.observability.otel)
        self.token_calibration = TokenCalibration()
        self.clock: Callable[[], datetime] = partial(datetime.now, UTC)
        """Today's date in the instructions comes from here (tests move it)."""
        self._pa_agent: Agent[None, str] = Agent(
            output_type=str, name=config.name, retries=1, capabilities=_instrumentation(config)
        )
        # Approvals streamed turns wait for (run_stream without an on_approval callback).
        self.approvals = PendingApprovals()
        self._entered = 0
        # ``.ship/lock``, held while started; durable mode (several processes) turns it off
        # Durable mode shares a project between processes (workers, serve); DBOS coordinates them.
        self.project_lock = ProjectLock(project_root, enabled=project_lock and not config.durable.enabled)
        # Cards, boxes and delegation (seed 001); the store opens on first use.
        cards = self.shared.cards if self.shared is not None else None  # a cluster's: its database
        self.handover = Handover.for_project(self.paths, config, sub_agent_factory(self), store=cards)
        # -- durable seam (issue 14): how a turn's effects run (inline here; recorded steps in
        # durable mode) and, when set, who runs whole turns (a queue of durable workflows).
        self.turn_hooks = TurnHooks()
        self.turn_executor: TurnExecutor | None = None
        self.turn_executor_options: dict[str, Any] = {}
        self._executor_cm: AbstractAsyncContextManager[TurnExecutor | None] | None = None

    @classmethod
    def from_project(
        cls,
        root: str | Path,
        *,
        model: Model | str | None = None,
        toolsets: Sequence[AbstractToolset[Any]] = (),
        on_approval: ApprovalCallback | None = None,
        providers: Sequence[Any] = (),
        profile_models: Mapping[str, Model | str] | None = None,
        project_lock: bool = True,
    ) -> ShipAgent:
        """Load ``root/ship.json`` (defaults when absent) and build the agent.

        Args:
            root: the project directory.
            model: overrides ship.json's model: a pydantic-ai ``Model`` (tests pass a
                ``FunctionModel``) or a model string.
            toolsets: extra pydantic-ai toolsets, beside the builtins.
            on_approval: called when a tool needs permission (``exec_shell`` in ``ask`` mode).
            providers: context providers to register (see ``shipagent.context``).
            profile_models: per-profile model overrides for sub-agents.
            project_lock: hold ``.ship/lock`` while started, so a second process on the project
                gets ``ProjectLockedError`` (off only for durable mode's coordinated processes).

        Raises:
            ConfigError: ship.json is invalid, or the directory does not exist.
        """
        path = Path(root).expanduser().resolve()
        if not path.is_dir():
            raise ConfigError(f"project directory {str(root)!r} does not exist", path=None)
        return cls(
            path,
            load_config(path),
            model=model,
            toolsets=toolsets,
            on_approval=on_approval,
            providers=providers,
            profile_models=profile_models,
            project_lock=project_lock,
        )

    # -- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> ShipAgent:
        if self._entered == 0:
            await self.project_lock.aacquire()  # ProjectLockedError if another process has the project
            try:
                # exec_shell without its sandbox is said once, at start (a log warning, or an error when required)
                await anyio.to_thread.run_sync(
                    warn_if_unsandboxed, self.config.permissions.exec_shell, self.project_root
                )
                await self.mcp.start()  # in parallel; raises only for a tool-name collision
                try:
                    await self.context_runtime.start()
                except BaseException:
                    await self.mcp.stop()  # a failed start leaves no MCP server process behind
                    raise
            except BaseException:
                await self.project_lock.arelease()
                raise
            try:
                await self._start_executor()
            except BaseException:
                await self._stop_all()
                raise
        self._entered += 1
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._entered = max(self._entered - 1, 0)
        if self._entered:
            return
        try:
            await self._stop_executor()  # durable workers drain first: their turns use the servers
        finally:
            await self._stop_all()

    async def _start_executor(self) -> None:
        """Durable seam: ship.json ``durable.enabled`` hands turns to the registered executor."""
        if not self.config.durable.enabled or self.turn_executor is not None:
            return
        factory = executor_factories.get("durable")
        if factory is None:  # pragma: no cover - registered by the package facade
            raise ConfigError("durable.enabled: the durable room is not available", path="durable.enabled")
        self._executor_cm = factory(self)
        self.turn_executor = await self._executor_cm.__aenter__()

    async def _stop_executor(self) -> None:
        cm, self._executor_cm = self._executor_cm, None
        if cm is not None:
            self.turn_executor = None
            await cm.__aexit__(None, None, None)

    async def _stop_all(self) -> None:
        # Each stop runs even when the one before it failed: no server or token outlives the agent.
        try:
            await self.mcp.stop()  # shielded: no server process outlives the agent
        finally:
            try:
                await self.context_runtime.stop()  # provider MCP servers; revokes session tokens
            finally:
                try:
                    await self.handover.aclose()
                finally:
                    await self.project_lock.arelease()

    # -- assembly --------------------------------------------------------------------------------

    @property
    def model(self) -> Model:
        """The model runs use (built lazily so stores and tools work without one)."""
        if self._model is None:
            self._model = build_model(self.config.llm, self._model_override)
        return self._model

    def _summary_model(self) -> Model:
        """The model that writes compaction summaries: ``chatHistory.summaryModel`` or the agent's."""
        name = self.config.context.chat_history.summary_model
        return build_model(self.config.llm, name) if name else self.model

    def _toolsets(self) -> list[AbstractToolset[Any]]:
        """Every toolset a run offers the model, guarded so a crash becomes a failure result."""
        toolsets: list[AbstractToolset[Any]] = [
            self._builtin_toolset,
            self._context_toolset,
            *self._module_toolsets,
            *self._user_toolsets,
            self.mcp.toolset,
            *self.context_runtime.mcp_toolsets(),
            self.context_runtime.toolset,
        ]
        if self.handover.toolset is not None:
            toolsets.append(self.handover.toolset)
        # a sub-agent's profile may limit its tools (ship.json profiles.<name>.tools); the guard and
        # the spill wrap them all once (per tool call they act alike), not each toolset: pydantic-ai
        # walks every wrapper layer for tools and instructions on every model request. Outermost:
        # each call's injections travel with its result (history.injections)
        combined = SequentialCombinedToolset(self.handover.restrict(toolsets))
        return [InjectionToolset(GuardedToolset(SpillToolset(combined)))]

    def _is_mcp_tool(self, name: str) -> bool:
        return self.mcp.is_mcp_tool(name) or self.context_runtime.is_mcp_tool(name)

    async def _instructions(self, ctx: ToolExecutionContext) -> str:
        agent_md = (
            self._agent_md if self._agent_md is not None else _instructions.read_agent_md(self.project_root)
        )
        parts = [agent_md, _instructions.default_prompt(self.clock())]
        parts.extend(await _instructions.collect(self.instruction_sources, ctx))
        return "\n\n".join(p for p in parts if p)

    # -- history ---------------------------------------------------------------------------------

    def history(self, chat_key: str) -> list[ModelMessage]:
        """The chat's current history (loaded from ``.ship/`` if this process has not seen it).

        In a durable cluster on Postgres: from the database, as the last turn committed it.
        """
        if self.shared is not None:
            return self.shared.history(validate_chat_key(chat_key))
        return self.chats.get(validate_chat_key(chat_key))

    def expand(self, chat_key: str, summary_id: str) -> list[ModelMessage]:
        """The messages compaction summary ``summary_id`` replaced, exactly as they were committed.

        Raises:
            KeyError: the chat has no summary with that id.
        """
        key = validate_chat_key(chat_key)
        log = self.shared.message_log(key) if self.shared is not None else self.chats.log
        return log.expand(key, summary_id)

    def ledger(self, chat_key: str, *, last: int | None = None) -> list[RequestRecord]:
        """What each model request of the chat carried (``.ship/chats/<key>/requests.jsonl``)."""
        return self._ledger.records(validate_chat_key(chat_key), last=last)

    def reconstruct(self, chat_key: str, request_id: str, step: int) -> list[ModelMessage]:
        """The exact messages model request ``step`` of turn ``request_id`` sent, from the stores.

        Raises:
            KeyError: no such record, or the stores no longer hold what it names.
        """
        key = validate_chat_key(chat_key)
        log = self.shared.message_log(key) if self.shared is not None else None
        return self._ledger.reconstruct(key, request_id, step, messages=log)

    async def clear(self, chat_key: str) -> None:
        """Empty the chat's model context (``/clear``); transcript and logs stay on disk."""
        key = validate_chat_key(chat_key)
        if self.shared is not None:  # a durable cluster: every worker's next turn starts afresh
            async with self.chats.lock(key):  # queues behind a turn of the chat running here
                await self.shared.clear(key, uuid.uuid4().hex)
                self.chats.clear_memory(key)
            return
        await self.chats.reset(key, uuid.uuid4().hex)

    # -- running ---------------------------------------------------------------------------------

    def run_sync(
        self,
        chat_key: str,
        text: str,
        *,
        on_step: StepCallback | None = None,
        channel: Any = None,
        request_id: str | None = None,
    ) -> AgentResult:
        """:meth:`run` for code without an event loop."""
        return anyio.run(
            partial(self.run, chat_key, text, on_step=on_step, channel=channel, request_id=request_id)
        )

    async def run(
        self,
        chat_key: str,
        text: str,
        *,
        on_step: StepCallback | None = None,
        channel: Any = None,
        request_id: str | None = None,
    ) -> AgentResult:
        """Run one turn of ``chat_key`` with the user's ``text``.

        ``request_id`` names the turn (default: a fresh id). In durable mode it is the turn's
        workflow id: submitting the same id twice returns the first turn's result.

        Raises:
            ChatKeyError: the chat key is unusable.
            ConfigError: no usable model is configured.
        """
        self._check_turn(chat_key, text, request_id)
        if self.turn_executor is not None:  # durable seam: the turn runs as a queued workflow
            return await self.turn_executor.submit(
                chat_key, text, request_id=request_id, on_step=on_step, channel=channel
            )
        return await self.execute_turn(
            chat_key, text, on_step=on_step, channel=channel, request_id=request_id
        )

    def _check_turn(self, chat_key: str, text: Any, request_id: Any) -> None:
        validate_chat_key(chat_key)
        if not isinstance(text, str):
            raise ShipAgentError(f"text must be a string, got {type(text).__name__}")
        if request_id is not None and not (
            isinstance(request_id, str) and 0 < len(request_id) <= 200 and request_id.isprintable()
        ):
            raise ShipAgentError("request_id must be 1-200 printable characters")
        if self.turn_executor is None and self.config.durable.enabled and _current_tool_context.get() is None:
            # (a run started by a tool of a running turn — a delegation — is part of that turn's
            # step and runs inline; any other run must go through the durable queue)
            raise ShipAgentError(
                "durable.enabled is set in ship.json: start the agent with `async with agent:` "
                "(or run `shipagent worker`) so turns go through the durable queue"
            )

    async def execute_turn(
        self,
        chat_key: str,
        text: str,
        *,
        on_step: StepCallback | None = None,
        channel: Any = None,
        request_id: str | None = None,
        emit: Emit | None = None,
    ) -> AgentResult:
        """The turn itself, here and now (what :meth:`run` does without an executor).

        Durable workers call this inside the turn's workflow, where :attr:`turn_hooks` record
        its effects as steps. ``emit`` takes the turn's run events (as :meth:`run_stream` yields
        them) for a durable worker to publish; such a turn cannot ask for approval.
        """
        validate_chat_key(chat_key)
        model = self.model
        async with self.chats.lock(chat_key):
            return await self._run_locked(
                chat_key, text, model, on_step, channel, request_id, emit=emit, ask=False
            )

    def run_stream(
        self,
        chat_key: str,
        text: str,
        *,
        channel: Any = None,
        on_step: StepCallback | None = None,
        approval_timeout: float | None = None,
        request_id: str | None = None,
    ) -> AsyncGenerator[RunEvent, None]:
        """Run one turn like :meth:`run`, yielding its events as they happen; :class:`Done` is last.

        Model requests are streamed from the provider, so :class:`TextDelta`s arrive as the model
        writes. Stopping early (``break``, ``aclose()``, the consumer's task cancelled) cancels the
        turn: nothing of it is committed, and the chat's next turn runs. Prefer
        ``async with contextlib.aclosing(agent.run_stream(...)) as events:`` so that happens at once.
        A tool needing approval emits :class:`ApprovalRequired` and waits for
        :meth:`resolve_approval` (up to ``approval_timeout`` seconds; ``None``: no limit), unless the
        agent has an ``on_approval`` callback, which then decides.

        Raises:
            ChatKeyError: the chat key is unusable (raised here, before anything runs).
            ConfigError: no usable model is configured.
        """
        self._check_turn(chat_key, text, request_id)
        executor = self.turn_executor
        if executor is not None:  # durable seam: the queued turn's events come from its worker

            async def queued(emit: Emit) -> AgentResult:
                return await executor.submit(
                    chat_key, text, request_id=request_id, on_step=on_step, channel=channel, emit=emit
                )

            return stream_turn(queued)
        model = self.model

        async def turn(emit: Emit) -> AgentResult:
            async with self.chats.lock(chat_key):
                return await self._run_locked(
                    chat_key,
                    text,
                    model,
                    on_step,
                    channel,
                    request_id,
                    emit=emit,
                    approval_timeout=approval_timeout,
                )

        return stream_turn(turn)

    def resolve_approval(self, approval_id: str, approved: bool) -> bool:
        """Answer an :class:`ApprovalRequired`; ``False`` if it is not waiting (any more)."""
        return self.approvals.resolve(approval_id, approved)

    def _context(self, chat_key: str, request_id: str, channel: Any) -> ToolExecutionContext:
        ctx = ToolExecutionContext(
            chat_key=chat_key,
            request_id=request_id,
            project_root=self.project_root,
            config=self.config,
            paths=self.paths,
            max_injected_messages=self.config.context.injection.max_injected_messages,
            channel=channel,
            on_approval=self.on_approval,
            context_files=self.context_files,
        )
        return ctx

    async def _run_locked(
        self,
        chat_key: str,
        text: str,
        model: Model,
        on_step: StepCallback | None,
        channel: Any,
        given_request_id: str | None = None,
        *,
        emit: Emit | None = None,
        approval_timeout: float | None = None,
        ask: bool = True,
    ) -> AgentResult:
        hooks = self.turn_hooks  # durable seam: inline by default, recorded steps in durable mode
        history = await hooks.load(self, chat_key, partial(self.chats.aget, chat_key))
        request_id = hooks.request_id(given_request_id, lambda: uuid.uuid4().hex)
        model = hooks.model(model)
        ctx = self._context(chat_key, request_id, channel)
        if emit is not None and ask:  # a streamed turn asks its consumer
            ctx.on_approval = approval_bridge(
                self.approvals, emit, chat_key, self.on_approval, approval_timeout
            )
        steps = StepReporter(on_step, self._is_mcp_tool, emit=emit)
        try:
            with use_tool_context(ctx), report_retries(steps.emit):  # retries show as "retry" steps
                instructions = await self._instructions(ctx)
                outcome = await self._with_overflow_retries(ctx, text, history, model, instructions, steps)
        except BaseException:  # cancelled (the consumer left): nothing of the turn is committed
            with anyio.CancelScope(shield=True):
                await self._keep_sent(chat_key, request_id, text, ctx)
            raise
        if isinstance(outcome, Exception):
            await self._keep_sent(chat_key, request_id, text, ctx)
            return await self._failed(request_id, outcome, steps, overflow=is_context_overflow(outcome))
        (run_id, messages, output, usage), base, base_compaction = outcome
        new = [m for m in messages if getattr(m, "run_id", None) == run_id]
        records = tool_call_records(new)
        said = output.strip()  # the model's own answer; chat_send texts are in the transcript already
        output = self._final_output(output, ctx, channel, records)
        turn = TurnCommit(
            chat_key,
            request_id,
            text,
            said,
            output,
            records,
            list(ctx.sent_texts),
            base,
            new,
            base_compaction,
        )
        compaction, failure = await hooks.commit(self, turn, self._commit)
        if failure is not None:
            log.error("chat %r: could not persist turn %s: %s", chat_key, request_id, failure)
            return await self._failed(request_id, failure, steps, overflow=False, saved=False)
        for done in (base_compaction, compaction):
            if done is not None:
                await steps.emit(
                    StepEvent(
                        "compaction",
                        f"compacted {len(done.removed)} older messages into a summary",
                        {
                            "removed": len(done.removed),
                            "kept": len(done.history) - 1,
                            "summarizer": done.summarizer,
                            "summaryId": done.span.id if done.span else None,
                        },
                    )
                )
                await steps.event(Compacted(len(done.removed), len(done.history) - 1))
        await steps.emit(StepEvent("done", output, {"requestId": request_id}))
        return AgentResult(
            success=True,
            output=output,
            request_id=request_id,
            had_tool_failure=any(not r.success for r in records),
            tool_calls=records,
            usage=usage,
        )

    async def _commit(self, turn: TurnCommit) -> CommitOutcome:
        """Write a finished turn to every store; returns the compaction it triggered or the failure."""
        compaction: CompactionResult | None = None
        failure: Exception | None = None
        # The card store joins the JSONL stores' thread hop when it can (one hop per turn).
        cards = self.handover.turn_writer(turn.chat_key, turn.request_id, turn.text, turn.output)

        async def commit_history() -> None:
            nonlocal compaction, failure
            logs = partial(
                self._write_logs,
                turn.chat_key,
                turn.request_id,
                turn.text,
                turn.said,
                turn.output,
                turn.records,
                turn.sent,
                cards,
            )
            # the ledger's records of this turn's requests go in the same worker-thread hop
            logs = _then(logs, self._ledger.flush(turn.chat_key, turn.request_id, turn.new))
            try:
                compaction = await self.chats.commit(
                    turn.chat_key,
                    turn.request_id,
                    turn.base,
                    turn.new,
                    base_compaction=turn.base_compaction,
                    also=logs,
                )
            except Exception as exc:  # disk full, permissions: the turn did not stick
                failure = exc

        if cards is not None:
            await commit_history()
        else:  # the chat's first turn in this process: its output box is looked up on the way
            async with anyio.create_task_group() as group:
                group.start_soon(commit_history)
                group.start_soon(
                    self.handover.record_turn, turn.chat_key, turn.request_id, turn.text, turn.output
                )
        return compaction, failure

    async def _with_overflow_retries(
        self,
        ctx: ToolExecutionContext,
        text: str,
        history: list[ModelMessage],
        model: Model,
        instructions: str,
        steps: StepReporter,
    ) -> tuple[_LoopResult, list[ModelMessage], CompactionResult | None] | Exception:
        """Run the tool loop; on a context overflow compact harder and retry, at most 3 times.

        Returns the loop's result with the history it ran on (and the compaction that produced
        it, to be persisted only if the run then succeeds), or the exception that ended the run.
        """
        base, base_compaction = history, None
        keep = self.config.context.chat_history.compact_keep_last_messages
        for attempt in range(MAX_OVERFLOW_RETRIES + 1):
            try:
                return await self._tool_loop(text, base, model, instructions, steps), base, base_compaction
            except Exception as exc:
                if not is_context_overflow(exc) or attempt == MAX_OVERFLOW_RETRIES:
                    return exc
                sources = self.chats.sources(ctx.chat_key)
                shrunk = compact(history, max(keep >> (attempt + 1), 1), sources=sources) or compact(
                    history, 0, sources=sources
                )
                if shrunk is not None:
                    base, base_compaction = shrunk.history, shrunk
                ctx.reset_injections()  # the retry is a fresh tool loop
                log.warning(
                    "chat %r: context overflow, retrying with a compacted history (attempt %d)",
                    ctx.chat_key,
                    attempt + 1,
                )
        raise AssertionError("unreachable: the last attempt returns")  # pragma: no cover

    async def _tool_loop(
        self,
        text: str,
        history: list[ModelMessage],
        model: Model,
        instructions: str,
        steps: StepReporter,
    ) -> _LoopResult:
        window = self._context_window()
        streamed = steps.streaming and can_stream(model)  # else a streamed turn gets whole answers
        async with self._pa_agent.iter(
            text,
            message_history=history,
            model=model,
            instructions=instructions,
            # one catalog wrapper sees every tool of the step and keeps the chat's catalog file current
            toolsets=[
                CatalogToolset(
                    SequentialCombinedToolset(self.turn_hooks.toolsets(self._toolsets())),
                    skills=self._catalog_skills,
                )
            ],
            capabilities=[window],
            model_settings=build_model_settings(self.config.llm) or None,
        ) as agent_run:
            async for node in agent_run:
                if Agent.is_call_tools_node(node):
                    await steps.on_response(node.model_response)
                    if steps.streaming:  # run the tools here, so each start and finish is an event
                        if not streamed:
                            await emit_response_text(node.model_response, steps.event)
                        await stream_tool_calls(node, agent_run.ctx, steps.event, self._is_mcp_tool)
                elif Agent.is_model_request_node(node):
                    await steps.on_request(node.request)
                    if streamed:  # a streamed request: text deltas as the model writes
                        await stream_model_request(node, agent_run.ctx, steps.event)
            result = agent_run.result
            assert result is not None
            return result.run_id, result.all_messages(), str(result.output), result.usage

    def _context_window(self) -> ContextWindow:
        """The run's context-window capability, configured from ship.json ``context``."""
        ctx, context = current_tool_context(), self.config.context
        return ContextWindow(
            context.chat_history.max_history_tokens,
            max_injected_messages=context.injection.max_injected_messages,
            max_tokens=context.budget.max_tokens,
            reserve_output=context.budget.reserve_output,
            section_caps=context.budget.sections.model_dump(exclude_none=True, by_alias=True),
            keep_result=partial(self._keep_elided, ctx.chat_key),
            history_sources=self.chats.sources(ctx.chat_key),
            observer=self._ledger.recorder(ctx.chat_key, ctx.request_id),
            calibration=self.token_calibration,
            chat_key=ctx.chat_key,
        )

    def _keep_elided(self, chat_key: str, tool_name: str, call_id: str, text: str) -> str:
        """Keep a tool result the budget elided as a context file, so the model can read it back."""
        ref = self.context_files.add_artifact(
            chat_key, text, name=f"{tool_name} result ({call_id})", source=f"tool:{tool_name}"
        )
        return ref.id

    def _final_output(self, output: str, ctx: ToolExecutionContext, channel: Any, records: list[Any]) -> str:
        pieces: list[str] = []
        if channel is None:
            pieces.extend(t for t in ctx.sent_texts if t.strip())
        if output.strip() and (not pieces or output.strip() != pieces[-1].strip()):
            pieces.append(output.strip())
        failures = [r for r in records if not r.success]
        if failures:
            lines = "\n".join(f"- {r.tool}: {(r.error or '')[:200]}" for r in failures)
            pieces.append(f"Tool errors:\n{lines}")
        return "\n\n".join(pieces)

    async def _keep_sent(self, chat_key: str, request_id: str, text: str, ctx: ToolExecutionContext) -> None:
        """A turn that did not commit: what ``chat_send`` already delivered stays in the transcript."""
        if ctx.sent_texts:
            sent = list(ctx.sent_texts)
            if self.shared is not None:  # a durable cluster's transcript is in its database
                await self.shared.keep_sent(chat_key, request_id, text, sent)
                return
            await anyio.to_thread.run_sync(
                partial(self.transcript.append_turn, chat_key, request_id, text, "", sent=sent)
            )

    def _keep_compacted(self, chat_key: str, result: CompactionResult) -> None:
        """Compaction hook: what leaves the model's window stays greppable as a ``history`` file."""
        if result.removed:
            self.context_files.add_history_messages(chat_key, result.removed)

    async def _catalog_skills(self, ctx: ToolExecutionContext) -> list[Any]:
        return list(await self.skills_cache.get(ctx.project_root, ctx.config))

    def _write_logs(
        self,
        chat_key: str,
        request_id: str,
        text: str,
        said: str,
        output: str,
        records: list[Any],
        sent: Sequence[str] = (),
        cards: Callable[[], None] | None = None,
    ) -> None:
        self.transcript.append_turn(chat_key, request_id, text, said, sent=sent)
        self.agent_context.append(
            chat_key,
            request_id,
            text,
            output,
            [{"tool": r.tool, "success": r.success, "error": r.error} for r in records],
        )
        if cards is not None:
            cards()  # logs its own failure: the turn is committed either way

    async def _failed(
        self, request_id: str, exc: BaseException, steps: StepReporter, *, overflow: bool, saved: bool = True
    ) -> AgentResult:
        kind = type(exc).__name__
        if not saved:
            message = (
                f"The turn ran but could not be saved ({kind}: {exc}). The chat continues from what "
                f"is on disk."
            )
        elif overflow:
            message = (
                f"The conversation no longer fits the model's context window even after compacting "
                f"{MAX_OVERFLOW_RETRIES} times ({kind}: {exc}). The chat's history is unchanged."
            )
        else:  # in words that name what to change (URL, ship.json key, variable)
            url = self._model.base_url if self._model is not None else self.config.llm.base_url
            reason = explain_failure(exc, url=url, llm=self.config.llm)
            message = f"The run failed: {reason.rstrip('.')}. The chat's history is unchanged."
        log.warning("run %s failed: %s: %s", request_id, kind, exc)
        await steps.emit(StepEvent("done", message, {"requestId": request_id, "success": False}))
        return AgentResult(success=False, output=message, request_id=request_id)
