"""``ShipAgent``: one project directory as an agent, one history per chat key.

A turn (DESIGN §2): validate the chat key and take that chat's lock → load the history (from
``.ship/`` after a restart) → assemble instructions → set the tool execution context → run
pydantic-ai's tool loop with the :class:`~shipagent.history.placement.ContextWindow` capability →
commit user + new messages, transcript and agent-context entries, compact when over the bound →
return an :class:`AgentResult`.

``run`` raises only for caller mistakes (``ChatKeyError``, ``ConfigError``). Everything that can go
wrong inside a turn comes back as ``AgentResult(success=False)`` with the chat's history unchanged.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
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

from . import instructions as _instructions
from ._combined import SequentialCombinedToolset
from ._guard import GuardedToolset
from ._steps import StepCallback, StepReporter, tool_call_records
from .chatkeys import ShipPaths, validate_chat_key
from .config import ShipConfig, load_config
from .context import AgentContextRuntime
from .errors import ConfigError, ShipAgentError
from .execution import ApprovalCallback, ToolExecutionContext, use_tool_context
from .files import CatalogToolset, ContextFiles, SpillToolset, context_toolset
from .handover import Handover
from .history.chats import ChatHistories
from .history.compaction import CompactionResult, compact
from .history.placement import ContextWindow
from .history.stores import AgentContextLog, Transcript
from .mcp import McpManager
from .models import build_model, build_model_settings
from .results import AgentResult, StepEvent
from .tools import SkillsCache, builtin_toolset, load_tool_modules

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
        self.chats.compaction_hooks.append(self._keep_compacted)
        self._context_toolset = context_toolset()
        self.transcript = Transcript(self.paths)
        self.agent_context = AgentContextLog(self.paths, window=config.context.agent_context.window_entries)
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
        self._pa_agent: Agent[None, str] = Agent(output_type=str, name=config.name, retries=1)
        self._entered = 0
        # Cards, boxes and delegation (seed 001); the store opens on first use.
        self.handover = Handover.for_agent(self)

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
        )

    # -- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> ShipAgent:
        if self._entered == 0:
            await self.mcp.start()  # in parallel; raises only for a tool-name collision
            try:
                await self.context_runtime.start()
            except BaseException:
                await self.mcp.stop()  # a failed start leaves no MCP server process behind
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
        # Each stop runs even when the one before it failed: no server or token outlives the agent.
        try:
            await self.mcp.stop()  # shielded: no server process outlives the agent
        finally:
            try:
                await self.context_runtime.stop()  # provider MCP servers; revokes session tokens
            finally:
                await self.handover.aclose()

    # -- assembly --------------------------------------------------------------------------------

    @property
    def model(self) -> Model:
        """The model runs use (built lazily so stores and tools work without one)."""
        if self._model is None:
            self._model = build_model(self.config.llm, self._model_override)
        return self._model

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
        # walks every wrapper layer for tools and instructions on every model request
        return [GuardedToolset(SpillToolset(SequentialCombinedToolset(self.handover.restrict(toolsets))))]

    def _is_mcp_tool(self, name: str) -> bool:
        return self.mcp.is_mcp_tool(name) or self.context_runtime.is_mcp_tool(name)

    async def _instructions(self, ctx: ToolExecutionContext) -> str:
        agent_md = (
            self._agent_md if self._agent_md is not None else _instructions.read_agent_md(self.project_root)
        )
        parts = [agent_md, _instructions.default_prompt()]
        parts.extend(await _instructions.collect(self.instruction_sources, ctx))
        return "\n\n".join(p for p in parts if p)

    # -- history ---------------------------------------------------------------------------------

    def history(self, chat_key: str) -> list[ModelMessage]:
        """The chat's current history (loaded from ``.ship/`` if this process has not seen it)."""
        return self.chats.get(validate_chat_key(chat_key))

    async def clear(self, chat_key: str) -> None:
        """Empty the chat's model context (``/clear``); transcript and logs stay on disk."""
        await self.chats.reset(validate_chat_key(chat_key), uuid.uuid4().hex)

    # -- running ---------------------------------------------------------------------------------

    def run_sync(
        self,
        chat_key: str,
        text: str,
        *,
        on_step: StepCallback | None = None,
        channel: Any = None,
    ) -> AgentResult:
        """:meth:`run` for code without an event loop."""
        return anyio.run(partial(self.run, chat_key, text, on_step=on_step, channel=channel))

    async def run(
        self,
        chat_key: str,
        text: str,
        *,
        on_step: StepCallback | None = None,
        channel: Any = None,
    ) -> AgentResult:
        """Run one turn of ``chat_key`` with the user's ``text``.

        Raises:
            ChatKeyError: the chat key is unusable.
            ConfigError: no usable model is configured.
        """
        validate_chat_key(chat_key)
        if not isinstance(text, str):
            raise ShipAgentError(f"text must be a string, got {type(text).__name__}")
        model = self.model
        async with self.chats.lock(chat_key):
            return await self._run_locked(chat_key, text, model, on_step, channel)

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
        )
        ctx.extras["agent"] = self
        ctx.extras["context_files"] = self.context_files
        return ctx

    async def _run_locked(
        self,
        chat_key: str,
        text: str,
        model: Model,
        on_step: StepCallback | None,
        channel: Any,
    ) -> AgentResult:
        history = await self.chats.aget(chat_key)
        request_id = uuid.uuid4().hex
        ctx = self._context(chat_key, request_id, channel)
        steps = StepReporter(on_step, self._is_mcp_tool)
        with use_tool_context(ctx):
            instructions = await self._instructions(ctx)
            outcome = await self._with_overflow_retries(ctx, text, history, model, instructions, steps)
        if isinstance(outcome, Exception):
            if ctx.sent_texts:  # already delivered to the user: the transcript keeps it
                await anyio.to_thread.run_sync(
                    partial(
                        self.transcript.append_turn, chat_key, request_id, text, "", sent=list(ctx.sent_texts)
                    )
                )
            return await self._failed(request_id, outcome, steps, overflow=is_context_overflow(outcome))
        (run_id, messages, output, usage), base, base_compaction = outcome
        new = [m for m in messages if getattr(m, "run_id", None) == run_id]
        records = tool_call_records(new)
        said = output.strip()  # the model's own answer; chat_send texts are in the transcript already
        output = self._final_output(output, ctx, channel, records)
        compaction: CompactionResult | None = None
        failure: Exception | None = None

        # The card store joins the JSONL stores' thread hop when it can (one hop per turn).
        cards = self.handover.turn_writer(chat_key, request_id, text, output)

        async def commit_history() -> None:
            nonlocal compaction, failure
            logs = partial(
                self._write_logs, chat_key, request_id, text, said, output, records, ctx.sent_texts, cards
            )
            try:
                compaction = await self.chats.commit(
                    chat_key, request_id, base, new, base_compaction=base_compaction, also=logs
                )
            except Exception as exc:  # disk full, permissions: the turn did not stick
                failure = exc

        if cards is not None:
            await commit_history()
        else:  # the chat's first turn in this process: its output box is looked up on the way
            async with anyio.create_task_group() as group:
                group.start_soon(commit_history)
                group.start_soon(self.handover.record_turn, chat_key, request_id, text, output)
        if failure is not None:
            log.error("chat %r: could not persist turn %s: %s", chat_key, request_id, failure)
            return await self._failed(request_id, failure, steps, overflow=False, saved=False)
        for done in (base_compaction, compaction):
            if done is not None:
                await steps.emit(
                    StepEvent(
                        "compaction",
                        f"compacted {len(done.removed)} older messages into a summary",
                        {"removed": len(done.removed), "kept": len(done.history) - 1},
                    )
                )
        await steps.emit(StepEvent("done", output, {"requestId": request_id}))
        return AgentResult(
            success=True,
            output=output,
            request_id=request_id,
            had_tool_failure=any(not r.success for r in records),
            tool_calls=records,
            usage=usage,
        )

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
                shrunk = compact(history, max(keep >> (attempt + 1), 1)) or compact(history, 0)
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
        window = ContextWindow(self.config.context.chat_history.max_history_tokens)
        async with self._pa_agent.iter(
            text,
            message_history=history,
            model=model,
            instructions=instructions,
            # one catalog wrapper sees every tool of the step and keeps the chat's catalog file current
            toolsets=[
                CatalogToolset(SequentialCombinedToolset(self._toolsets()), skills=self._catalog_skills)
            ],
            capabilities=[window],
            model_settings=build_model_settings(self.config.llm) or None,
        ) as agent_run:
            async for node in agent_run:
                if Agent.is_call_tools_node(node):
                    await steps.on_response(node.model_response)
                elif Agent.is_model_request_node(node):
                    await steps.on_request(node.request)
            result = agent_run.result
            assert result is not None
            return result.run_id, result.all_messages(), str(result.output), result.usage

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
        else:
            message = f"The run failed: {kind}: {exc}. The chat's history is unchanged."
        log.warning("run %s failed: %s: %s", request_id, kind, exc)
        await steps.emit(StepEvent("done", message, {"requestId": request_id, "success": False}))
        return AgentResult(success=False, output=message, request_id=request_id)
