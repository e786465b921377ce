"""One turn, as a function of explicit parts: load → instructions → tool loop → commit → result.

:func:`run_turn` takes the chat's lock, loads its history, builds the run's tool execution
context and instructions, runs pydantic-ai's tool loop (compacting harder and retrying when the
provider says the request did not fit its context window), commits what the turn added and
returns an :class:`~shipagent.results.AgentResult`. Everything it runs on arrives in one
:class:`TurnParts` — the model, the toolsets, the instructions builder, the store operations,
the step and approval plumbing — so this module never sees the agent that assembled them
(``ShipAgent`` builds the parts per turn; a test builds them from a ``FunctionModel`` and a
dict).

Everything that can go wrong inside a turn comes back as ``AgentResult(success=False)`` with the
chat's history unchanged; only a cancelled turn raises (after keeping what ``chat_send`` already
delivered).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import anyio
from pydantic_ai import Agent, RunContext
from pydantic_ai.exceptions import ModelContextWindowExceededError, ModelHTTPError
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings
from pydantic_ai.toolsets import AbstractToolset

from .._paths import OutsideProjectError
from .._steps import StepReporter, final_output, tool_call_records
from ..events import Compacted
from ..results import AgentResult, Sender, StepEvent
from ..tools._deps import TurnDeps, TurnStores
from ..tools.execution import ToolExecutionContext, use_tool_context
from ..window.compaction import CompactionResult, compact
from ..window.placement import ContextWindow
from ._request import TurnRequest
from ._retry import report_retries
from ._streaming import (
    Emit,
    PendingApprovals,
    approval_bridge,
    can_stream,
    emit_response_text,
    finish_reason_of,
    keep_cut_answer,
    stream_model_request,
    stream_tool_calls,
)
from .turns import CommitOutcome, TurnCommit

__all__ = [
    "MAX_OVERFLOW_RETRIES",
    "TurnParts",
    "is_context_overflow",
    "run_turn",
    "tool_loop_agent",
]

log = logging.getLogger("shipagent")
_LoopResult = tuple[str, list[ModelMessage], str, Any]
"""``(run_id, all messages, output text, usage)`` of one tool loop."""
_Outcome = tuple[_LoopResult, list[ModelMessage], CompactionResult | None]
"""A tool loop's result, the history it ran on, and the compaction that produced that history."""
MAX_OVERFLOW_RETRIES = 3
Admit = Callable[[str, str], Awaitable[AgentResult | None]]
"""``(chat key, request id)`` → ``None`` if the turn may run, else the result that refuses it."""
_OVERFLOW_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "prompt is too long",
    "too many tokens",
    "input is too long",
    "exceed_context_size",  # llama.cpp's server
    "exceeds the available context size",
)


@dataclass(frozen=True, slots=True)
class TurnParts:
    """What one turn runs on; the turn reads nothing else.

    Attributes:
        loop: the pydantic-ai agent whose tool loop runs (see :func:`tool_loop_agent`).
        model: the model its requests go to (already wrapped for the mode: durable records them).
        toolset: the toolsets one tool loop offers, as one toolset (made afresh per attempt).
        model_settings: ship.json ``llm``'s settings for every request.
        instructions: the run's instructions, from its tool execution context.
        tool_context: ``(chat key, request id, channel)`` → the run's tool execution context.
        tool_stores: where the history tools read the chat's logs (the run's ``deps.stores``).
        request_id: the caller's request id (or ``None``) → the turn's.
        lock: the chat's lock: turns of one chat never interleave.
        load: the chat's history at the start of the turn.
        commit: writes a finished turn to every store; the compaction it made, or the failure.
        keep_sent: a turn that did not commit keeps what ``chat_send`` delivered in the transcript
            (with the turn's sender).
        history_sources: the chat's history items' sources (compaction keeps them apart).
        keep_last: ship.json ``compactKeepLastMessages``: an overflow retry keeps half, then a quarter….
        is_mcp_tool: whether a tool name is an MCP server's (its step summaries say so).
        approvals: the questions a streamed turn waits on (``resolve_approval`` answers them).
        explain: a failed run's cause, in words that name what to change.
        compact_idle: the compaction a turn starting after the provider's cache expired makes
            first (``None``: none; see ``ChatHistories.early_compaction``).
        overflowed: told the history a request overflowed the model's window with, so later
            compactions come before it (``ChatHistories.note_overflow``).
        admit: ``(chat key, request id)`` → ``None`` if the turn may run, else the result that
            refuses it (a chat over its budget); asked before anything of the turn runs.
    """

    loop: Agent[TurnDeps, str]
    model: Model
    toolset: Callable[[], AbstractToolset[Any]]
    model_settings: ModelSettings | None
    instructions: Callable[[ToolExecutionContext], Awaitable[str]]
    tool_context: Callable[[str, str, Any], ToolExecutionContext]
    tool_stores: Callable[[], TurnStores]
    request_id: Callable[[str | None], str]
    lock: Callable[[str], AbstractAsyncContextManager[Any]]
    load: Callable[[str], Awaitable[list[ModelMessage]]]
    commit: Callable[[TurnCommit], Awaitable[CommitOutcome]]
    keep_sent: Callable[[str, str, str, ToolExecutionContext, Sender | None], Awaitable[None]]
    history_sources: Callable[[str], list[str]]
    keep_last: int
    is_mcp_tool: Callable[[str], bool]
    approvals: PendingApprovals
    explain: Callable[[BaseException], str]
    compact_idle: Callable[[str, list[ModelMessage]], Awaitable[CompactionResult | None]] | None = None
    overflowed: Callable[[list[ModelMessage]], None] | None = None
    admit: Admit | None = None


def is_context_overflow(exc: BaseException) -> bool:
    """Whether a provider error says the request did not fit the model's context window."""
    if isinstance(exc, ModelContextWindowExceededError):
        return True
    if isinstance(exc, ModelHTTPError) and exc.status_code in (400, 413):
        text = f"{exc.body} {exc}".lower()
        return any(marker in text for marker in _OVERFLOW_MARKERS)
    return False


@dataclass
class _RunWindow(ContextWindow):
    """The agent-level stand-in for each run's :class:`ContextWindow` (``make`` builds the run's)."""

    make: Callable[[TurnDeps], ContextWindow] | None = None

    async def for_run(self, ctx: RunContext[Any]) -> ContextWindow:
        return self.make(ctx.deps) if self.make is not None and isinstance(ctx.deps, TurnDeps) else self


def tool_loop_agent(
    name: str, window: Callable[[TurnDeps], ContextWindow], *, otel: bool
) -> Agent[TurnDeps, str]:
    """The pydantic-ai agent a turn's tool loop runs, with ``window`` making each run's context window.

    The window is an agent-level capability made afresh for each run by its ``for_run``: one passed
    per run makes pydantic-ai combine and re-sort the capability tree on every run (~0.2 ms a
    turn), an agent-level one is composed once. ``otel``: ship.json ``observability.otel``.
    """
    capabilities: list[Any] = []
    if otel:
        from pydantic_ai.capabilities.instrumentation import Instrumentation

        capabilities.append(Instrumentation())
    capabilities.append(_RunWindow(make=window))
    return Agent(output_type=str, name=name, retries=1, capabilities=capabilities)


async def run_turn(
    parts: TurnParts,
    turn: TurnRequest,
    *,
    emit: Emit | None = None,
    approval_timeout: float | None = None,
    ask: bool = True,
) -> AgentResult:
    """Run ``turn`` on ``parts``, under its chat's lock.

    ``emit`` takes the turn's run events (``run_stream``); with ``ask`` a streamed turn asks its
    consumer for approvals (a durable worker's cannot). The model reads ``turn.prompt``; the
    transcript records ``turn.text`` as said by ``turn.sender``.
    """
    chat_key, text, sender, channel = turn.chat_key, turn.text, turn.sender, turn.channel
    prompt = turn.prompt
    async with parts.lock(chat_key):
        history = await parts.load(chat_key)
        request_id = parts.request_id(turn.request_id)
        if parts.admit is not None and (refused := await parts.admit(chat_key, request_id)) is not None:
            return refused  # over a budget: no model request, nothing committed
        ctx = parts.tool_context(chat_key, request_id, channel)
        if emit is not None and ask:  # a streamed turn asks its consumer
            # (an agent-wide callback, which the tool context carries, still decides)
            ctx.on_approval = approval_bridge(
                parts.approvals, emit, chat_key, ctx.on_approval, approval_timeout
            )
        steps = StepReporter(turn.on_step, parts.is_mcp_tool, emit=emit)
        try:
            with use_tool_context(ctx), report_retries(steps.emit):  # retries show as "retry" steps
                try:
                    instructions: str | OutsideProjectError = await parts.instructions(ctx)
                except OutsideProjectError as exc:  # Agent.md links out: the turn fails, naming it
                    instructions = exc
                outcome = (
                    instructions
                    if isinstance(instructions, OutsideProjectError)
                    else await _with_overflow_retries(parts, ctx, prompt, history, instructions, steps)
                )
        except BaseException:  # cancelled (the consumer left): nothing of the turn is committed
            with anyio.CancelScope(shield=True):
                await parts.keep_sent(chat_key, request_id, text, ctx, sender)
            raise
        if isinstance(outcome, Exception):
            await parts.keep_sent(chat_key, request_id, text, ctx, sender)
            return await _failed(parts, request_id, outcome, steps, overflow=is_context_overflow(outcome))
        (run_id, messages, output, usage), base, base_compaction = outcome
        new = _run_tail(messages, run_id)
        records = tool_call_records(new)
        said = output.strip()  # the model's own answer; chat_send texts are in the transcript already
        output = final_output(output, ctx.sent_texts if channel is None else (), records)
        finished = TurnCommit(
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
            sender,
        )
        compaction, failure = await parts.commit(finished)
        if failure is not None:
            log.error("chat %r: could not persist turn %s: %s", chat_key, request_id, failure)
            return await _failed(parts, request_id, failure, steps, overflow=False, saved=False)
        for done in (base_compaction, compaction):
            if done is not None:
                await _report_compaction(done, steps)
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


async def _with_overflow_retries(
    parts: TurnParts,
    ctx: ToolExecutionContext,
    text: str,
    history: list[ModelMessage],
    instructions: str,
    steps: StepReporter,
) -> _Outcome | Exception:
    """Run the tool loop; on a context overflow compact harder and retry, at most 3 times.

    Returns the loop's result with the history it ran on (and the compaction that produced
    it, to be persisted only if the run then succeeds), or the exception that ended the run.
    """
    base, base_compaction = history, None
    early = await parts.compact_idle(ctx.chat_key, history) if parts.compact_idle is not None else None
    if early is not None:  # the cache is cold anyway: compact now, for free, down to the low mark
        base, base_compaction = early.history, early
    deps = TurnDeps(ctx, parts.tool_stores())
    for attempt in range(MAX_OVERFLOW_RETRIES + 1):
        try:
            return await _tool_loop(parts, deps, text, base, instructions, steps), base, base_compaction
        except Exception as exc:
            if not is_context_overflow(exc) or attempt == MAX_OVERFLOW_RETRIES:
                return exc
            if parts.overflowed is not None:
                parts.overflowed(base)
            sources = parts.history_sources(ctx.chat_key)
            shrunk = compact(history, max(parts.keep_last >> (attempt + 1), 1), sources=sources) or compact(
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
    parts: TurnParts,
    deps: TurnDeps,
    text: str,
    history: list[ModelMessage],
    instructions: str,
    steps: StepReporter,
) -> _LoopResult:
    model = parts.model
    streamed = steps.streaming and can_stream(model)  # else a streamed turn gets whole answers
    async with parts.loop.iter(
        text,
        message_history=history,
        model=model,
        deps=deps,  # what the tools read: ctx.deps
        instructions=instructions,
        toolsets=[parts.toolset()],
        model_settings=parts.model_settings,
    ) as agent_run:
        async for node in agent_run:
            if Agent.is_call_tools_node(node):
                await steps.on_response(node.model_response)
                if steps.streaming:  # run the tools here, so each start and finish is an event
                    if not streamed:
                        await emit_response_text(node.model_response, steps.event)
                    await stream_tool_calls(node, agent_run.ctx, steps.event, parts.is_mcp_tool)
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


def _run_tail(messages: list[ModelMessage], run_id: str) -> list[ModelMessage]:
    """The messages run ``run_id`` added: the tail of its message list (no walk over the history)."""
    start = len(messages)
    while start and getattr(messages[start - 1], "run_id", None) == run_id:
        start -= 1
    return messages[start:]


async def _report_compaction(done: CompactionResult, steps: StepReporter) -> None:
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


async def _failed(
    parts: TurnParts,
    request_id: str,
    exc: BaseException,
    steps: StepReporter,
    *,
    overflow: bool,
    saved: bool = True,
) -> AgentResult:
    kind = type(exc).__name__
    if not saved:
        message = (
            f"The turn ran but could not be saved ({kind}: {exc}). The chat continues from what is on disk."
        )
    elif overflow:
        message = (
            f"The conversation no longer fits the model's context window even after compacting "
            f"{MAX_OVERFLOW_RETRIES} times ({kind}: {exc}). The chat's history is unchanged."
        )
    else:  # in words that name what to change (URL, ship.json key, variable)
        message = f"The run failed: {parts.explain(exc).rstrip('.')}. The chat's history is unchanged."
    log.warning("run %s failed: %s: %s", request_id, kind, exc)
    await steps.emit(StepEvent("done", message, {"requestId": request_id, "success": False}))
    return AgentResult(success=False, output=message, request_id=request_id, finish_reason="error")
