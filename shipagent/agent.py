"""``ShipAgent``: one project directory as an agent, one history per chat key.

A turn: validate the chat key and take that chat's lock → load the history (from
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
from collections.abc import AsyncGenerator
from functools import partial
from typing import Any

import anyio
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelContextWindowExceededError, ModelHTTPError
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model
from pydantic_ai.toolsets import AbstractToolset

from . import _quiet  # noqa: F401  (first of ours: pydantic-ai's banner off before any agent exists)
from ._agent_base import AgentBase
from ._combined import SequentialCombinedToolset
from ._deps import TurnDeps
from ._explain import explain_failure
from ._paths import OutsideProjectError
from ._retry import report_retries
from ._steps import StepCallback, StepReporter, call_outcomes, final_output, tool_call_records
from ._streaming import (
    Emit,
    approval_bridge,
    can_stream,
    emit_response_text,
    finish_reason_of,
    keep_cut_answer,
    stream_model_request,
    stream_tool_calls,
    stream_turn,
)
from .chatkeys import validate_chat_key
from .errors import ShipAgentError
from .events import Compacted, RunEvent
from .execution import ToolExecutionContext, running_tool_context, use_tool_context
from .files import CatalogToolset
from .history.compaction import CompactionResult, compact
from .models import build_model_settings
from .results import AgentResult, StepEvent
from .stores._protocols import ChatStore, TurnRecord
from .turns import CommitOutcome, TurnCommit

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


def _run_tail(messages: list[ModelMessage], run_id: str) -> list[ModelMessage]:
    """The messages run ``run_id`` added: the tail of its message list (no walk over the history)."""
    start = len(messages)
    while start and getattr(messages[start - 1], "run_id", None) == run_id:
        start -= 1
    return messages[start:]


def _one(toolsets: list[AbstractToolset[Any]]) -> AbstractToolset[Any]:
    """The toolsets as one: itself when there is one (pydantic-ai walks every layer per request)."""
    return toolsets[0] if len(toolsets) == 1 else SequentialCombinedToolset(toolsets)


class ShipAgent(AgentBase):
    """An agent made from a project directory (``ship.json``, ``Agent.md``, ``skills/``).

    Create it with :meth:`from_project`; use ``async with agent:`` to start what it holds (MCP
    servers) and ``await agent.run(chat_key, text)`` for each turn.
    """

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
                try:
                    instructions: str | OutsideProjectError = await self._instructions(ctx)
                except OutsideProjectError as exc:  # Agent.md links out: the turn fails, naming it
                    instructions = exc
                outcome = (
                    instructions
                    if isinstance(instructions, OutsideProjectError)
                    else await self._with_overflow_retries(ctx, text, history, model, instructions, steps)
                )
        except BaseException:  # cancelled (the consumer left): nothing of the turn is committed
            with anyio.CancelScope(shield=True):
                await self._keep_sent(chat_key, request_id, text, ctx)
            raise
        if isinstance(outcome, Exception):
            await self._keep_sent(chat_key, request_id, text, ctx)
            return await self._failed(request_id, outcome, steps, overflow=is_context_overflow(outcome))
        (run_id, messages, output, usage), base, base_compaction = outcome
        new = _run_tail(messages, run_id)
        records = tool_call_records(new)
        said = output.strip()  # the model's own answer; chat_send texts are in the transcript already
        output = final_output(output, ctx.sent_texts if channel is None else (), records)
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
            finish_reason=finish_reason_of(new),
        )

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
        loop = partial(self._tool_loop, TurnDeps(ctx, self._tool_stores()), text)
        for attempt in range(MAX_OVERFLOW_RETRIES + 1):
            try:
                return await loop(base, model, instructions, steps), base, base_compaction
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
        deps: TurnDeps,
        text: str,
        history: list[ModelMessage],
        model: Model,
        instructions: str,
        steps: StepReporter,
    ) -> _LoopResult:
        streamed = steps.streaming and can_stream(model)  # else a streamed turn gets whole answers
        async with self._pa_agent.iter(
            text,
            message_history=history,
            model=model,
            deps=deps,  # what the tools read: ctx.deps
            instructions=instructions,
            # one catalog wrapper sees every tool of the step and keeps the chat's catalog file current
            toolsets=[
                CatalogToolset(_one(self.turn_hooks.toolsets(self._toolsets())), skills=self._catalog_skills)
            ],
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
                    # a streamed request: text deltas as the model writes; an answer the time
                    # limit cut after it had begun ends the run with the text it has
                    if streamed:
                        cut = await stream_model_request(node, agent_run.ctx, steps.event)
                        if cut is not None:
                            messages, said = keep_cut_answer(agent_run.all_messages(), cut)
                            return agent_run.run_id, messages, said, agent_run.usage
            result = agent_run.result
            assert result is not None
            return result.run_id, result.all_messages(), str(result.output), result.usage

    async def _keep_sent(self, chat_key: str, request_id: str, text: str, ctx: ToolExecutionContext) -> None:
        """A turn that did not commit: what ``chat_send`` already delivered stays in the transcript."""
        if ctx.sent_texts:
            try:
                await self.turn_hooks.store(self).keep_sent(chat_key, request_id, text, list(ctx.sent_texts))
            except Exception as exc:  # the turn failed already: say so, do not fail it differently
                log.error("chat %r: could not keep turn %s's chat_send lines: %s", chat_key, request_id, exc)

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
        return AgentResult(success=False, output=message, request_id=request_id, finish_reason="error")
