"""``ShipAgent``: one project directory as an agent, one history per chat key.

The agent is the public face and the wiring: it checks a turn's arguments, hands it to the
durable queue when one is running, and otherwise assembles the turn's parts
(:meth:`ShipAgent._parts`) and runs :func:`~shipagent._turn.run_turn` on them — the turn itself
(lock → load → instructions → tool loop → commit → result) reads top to bottom in ``_turn.py``
and never sees the agent.

``run_stream`` is the same turn with its events (text deltas, tool steps, approvals, ``Done``)
yielded as they happen; ``run`` drives it without them.

``run`` raises only for caller mistakes (``ChatKeyError``, ``ConfigError``). Everything that can go
wrong inside a turn comes back as ``AgentResult(success=False)`` with the chat's history unchanged.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio
from pydantic_ai.models import Model
from pydantic_ai.toolsets import AbstractToolset

from . import _quiet  # noqa: F401  (first of ours: pydantic-ai's banner off before any agent exists)
from ._agent_base import AgentBase
from ._combined import SequentialCombinedToolset
from ._explain import explain_failure
from ._steps import StepCallback, call_outcomes
from ._streaming import Emit, stream_turn
from ._turn import MAX_OVERFLOW_RETRIES, TurnParts, is_context_overflow, run_turn
from .chatkeys import validate_chat_key
from .config import load_config
from .errors import ConfigError, ShipAgentError
from .events import RunEvent
from .execution import ApprovalCallback, ToolExecutionContext, running_tool_context
from .files import CatalogToolset
from .handover import Handover, ResolvedProfile
from .handover._delegation import profile_agent_md
from .models import build_model_settings
from .results import AgentResult
from .stores._protocols import ChatStore, TurnRecord
from .tools import warn_if_unsandboxed
from .turns import CommitOutcome, TurnCommit, TurnHooks, executor_factories

__all__ = ["MAX_OVERFLOW_RETRIES", "ShipAgent", "is_context_overflow"]

log = logging.getLogger("shipagent")


def _fresh_id() -> str:
    return uuid.uuid4().hex


def _one(toolsets: list[AbstractToolset[Any]]) -> AbstractToolset[Any]:
    """The toolsets as one: itself when there is one (pydantic-ai walks every layer per request)."""
    return toolsets[0] if len(toolsets) == 1 else SequentialCombinedToolset(toolsets)


class ShipAgent(AgentBase):
    """An agent made from a project directory (``ship.json``, ``Agent.md``, ``skills/``).

    Create it with :meth:`from_project`; use ``async with agent:`` to start what it holds (MCP
    servers) and ``await agent.run(chat_key, text)`` for each turn.
    """

    _running: AsyncExitStack | None = None
    """While started: what stops what ``async with agent`` started."""
    _entered = 0

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
    ) -> Self:
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

    def _sub_agent(self, profile: ResolvedProfile, handover: Handover) -> ShipAgent:
        """The agent a delegation to ``profile`` runs: a new agent on the same project.

        Model: ``profile_models[name]``, else the profile's ``model`` (built with ship.json
        ``llm``'s provider settings), else this agent's model. Tools: this agent's own toolsets,
        limited to the profile's ``tools`` when it has that list. MCP servers: this agent's, shared.

        Raises:
            BadRequestError: the profile's ``agentMd`` is outside the project or unreadable.
        """
        config = self.config
        model: Any = self.profile_models.get(profile.name)
        if model is None and profile.config.model:
            config = config.model_copy(
                update={"llm": config.llm.model_copy(update={"model": profile.config.model})}
            )
        elif model is None:
            model = self.model
        sub = ShipAgent(
            self.project_root,
            config,
            model=model,
            toolsets=self._user_toolsets,
            on_approval=self.on_approval,
            profile_models=self.profile_models,
            agent_md=profile_agent_md(self.project_root, profile.config),
        )
        sub.handover = handover.child(sub._sub_agent, profile.config.tools)
        if (
            profile.config.skills is not None
        ):  # the profile's skills: the overview, skills_list and skills_load
            sub.skills_cache.only = tuple(profile.config.skills)
        # ship.json MCP servers are this agent's, already running: a delegation must not spawn
        # another set of server processes per sub-agent (a fork_join of four would start four of each).
        sub.mcp = self.mcp
        sub._parent_stores = self._tool_stores  # its history tools read where ours do
        return sub

    # -- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._running is None:
            self._running = await self._start()
        self._entered += 1
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._entered = max(self._entered - 1, 0)
        if self._entered == 0 and self._running is not None:
            running, self._running = self._running, None
            await running.aclose()

    async def _start(self) -> AsyncExitStack:
        """Start what the agent holds: project lock, MCP servers, providers, the embedded model,
        the durable executor.

        The returned stack stops them in reverse order (durable workers drain first: their turns
        use the servers), each stop running even when one before it failed, so no server process
        or session token outlives the agent; a start that fails stops what had started.
        """
        stack = AsyncExitStack()
        try:
            await self.project_lock.aacquire()  # ProjectLockedError if another process has the project
            stack.push_async_callback(self.project_lock.arelease)
            stack.push_async_callback(self.store.close)  # a cluster's database connections
            # exec_shell without its sandbox is said once, at start (a log warning, or an error when required)
            await anyio.to_thread.run_sync(
                warn_if_unsandboxed, self.config.permissions.exec_shell, self.project_root
            )
            await self.mcp.start()  # in parallel; raises only for a tool-name collision
            stack.push_async_callback(self.mcp.stop)  # shielded
            await self.context_runtime.start()
            # provider MCP servers; revokes session tokens
            stack.push_async_callback(self.context_runtime.stop)
            stack.push_async_callback(lambda: self.handover.aclose())
            if (self.config.llm.provider or "").lower() == "local":  # the embedded model's server
                from ._local_model import local_model_of

                local = local_model_of(self.model)  # None when a model= override replaced it
                if local is not None:
                    await local.start()
                    stack.push_async_callback(local.stop)
            await self._start_executor(stack)
        except BaseException:
            await stack.aclose()
            raise
        return stack

    async def _start_executor(self, stack: AsyncExitStack) -> None:
        """Durable seam: ship.json ``durable.enabled`` hands turns to the registered executor."""
        if not self.config.durable.enabled or self.turn_executor is not None:
            return
        factory = executor_factories.get("durable")
        if factory is None:  # pragma: no cover - registered by the package facade
            raise ConfigError("durable.enabled: the durable room is not available", path="durable.enabled")
        self.turn_executor = await stack.enter_async_context(factory(self))
        stack.callback(setattr, self, "turn_executor", None)  # before the executor stops: no new turns

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
        if self.turn_executor is None and self.config.durable.enabled and running_tool_context() is None:
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
        return await run_turn(
            self._parts(),
            chat_key,
            text,
            on_step=on_step,
            channel=channel,
            request_id=request_id,
            emit=emit,
            ask=False,
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
        parts = self._parts()  # (a model ship.json cannot build raises here, before anything runs)
        turn = partial(
            run_turn,
            parts,
            chat_key,
            text,
            on_step=on_step,
            channel=channel,
            request_id=request_id,
            approval_timeout=approval_timeout,
        )
        return stream_turn(lambda emit: turn(emit=emit))

    def _context(self, chat_key: str, request_id: str, channel: Any) -> ToolExecutionContext:
        return ToolExecutionContext(
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

    def _parts(self) -> TurnParts:
        """What a turn runs on, assembled from this agent's wiring.

        Once per turn: the turn hooks, the model and ``on_approval`` are public attributes a
        durable worker, a test or the lazily built model may change between turns, never within one.
        """
        hooks = self.turn_hooks  # durable seam: inline by default, recorded steps in durable mode

        def toolset() -> AbstractToolset[Any]:
            # one catalog wrapper sees every tool of the step and keeps the chat's catalog file current
            return CatalogToolset(_one(hooks.toolsets(self._toolsets())), skills=self._catalog_skills)

        return TurnParts(
            loop=self._pa_agent,
            model=hooks.model(self.model),
            toolset=toolset,
            model_settings=build_model_settings(self.config.llm) or None,
            instructions=self._instructions,
            tool_context=self._context,
            tool_stores=self._tool_stores,
            request_id=lambda given: hooks.request_id(given, _fresh_id),
            lock=self.chats.lock,
            load=lambda chat_key: hooks.load(self, chat_key, partial(self.chats.aget, chat_key)),
            commit=partial(self._commit_turn, hooks),
            keep_sent=self._keep_sent,
            history_sources=self.chats.sources,
            keep_last=self.config.context.chat_history.compact_keep_last_messages,
            is_mcp_tool=self._is_mcp_tool,
            approvals=self.approvals,
            explain=self._explain,
        )

    def _explain(self, exc: BaseException) -> str:
        """Why a run failed, in words that name what to change (URL, ship.json key, variable)."""
        url = self._model.base_url if self._model is not None else self.config.llm.base_url
        return explain_failure(exc, url=url, llm=self.config.llm)

    async def _commit_turn(self, hooks: TurnHooks[Any], turn: TurnCommit) -> CommitOutcome:
        """The turn's commit part: through the turn hooks (durable mode records it) into the stores."""
        compaction, failure = await hooks.commit(self, turn, self._commit)
        return compaction, failure

    async def _commit(self, turn: TurnCommit, store: ChatStore) -> CommitOutcome:
        """Write a finished turn as ONE record; returns the compaction it triggered or the failure.

        The compaction is decided first (``ChatHistories.plan``) and is part of the record; the
        store writes every part it does not hold yet, so a durable worker that runs this again
        for the same request id completes the turn and writes nothing twice.
        """
        key, rid = turn.chat_key, turn.request_id
        summarize = True
        if self.chats.over_bound(len(turn.base) + len(turn.new)):  # a replay asks no summary again
            summarize = (await store.last_committed(key)).request_id != rid
        plan = await self.chats.plan(key, turn.base, turn.new, turn.base_compaction, summarize=summarize)
        record = TurnRecord(
            key,
            rid,
            turn.text,
            turn.output,
            plan.new,
            sent=list(turn.sent),
            tool_calls=call_outcomes(turn.records),
            base_compaction=turn.base if turn.base_compaction is not None else None,
            compaction=plan.done.history if plan.done is not None else None,
            said=turn.said,
            seq=plan.first_seq,
            base_sources=plan.before if turn.base_compaction is not None else None,
            compaction_sources=plan.final_sources if plan.done is not None else None,
            removed=plan.removed,
            ledger=self._ledger.flush(key, rid, turn.new),
        )
        try:
            report = await store.commit(record)
        except Exception as exc:  # disk full, permissions, the database refused: the turn did not stick
            self.chats.clear_memory(key)  # part of it may be written: the next turn re-reads the truth
            return None, exc
        if report.replayed:  # committed by an earlier attempt: the store's history is the truth
            loaded = await store.load(key)
            self.chats.install(key, loaded.messages, loaded.sources, loaded.next_seq)
            return None, None
        for part, error in report.failed.items():
            log.error(
                "chat %r: turn %s is saved, but writing its transcript/logs failed (%s: %s: %s); "
                "they are rebuilt from the message log before the next turn",
                key,
                rid,
                part,
                type(error).__name__,
                error,
            )
        self.chats.committed(key, plan, behind=bool(report.failed))
        return plan.done, None

    async def _keep_sent(self, chat_key: str, request_id: str, text: str, ctx: ToolExecutionContext) -> None:
        """A turn that did not commit: what ``chat_send`` already delivered stays in the transcript."""
        if ctx.sent_texts:
            try:
                await self.turn_hooks.store(self).keep_sent(chat_key, request_id, text, list(ctx.sent_texts))
            except Exception as exc:  # the turn failed already: say so, do not fail it differently
                log.error("chat %r: could not keep turn %s's chat_send lines: %s", chat_key, request_id, exc)
