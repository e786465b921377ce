"""What a :class:`~shipagent.agent.ShipAgent` is made of: its wiring and the read side of its chats.

The turn reads top to bottom in ``_turn.py`` (from the parts ``agent.py`` assembles); the
lifecycle (``async with agent``) and sub-agents are ``agent.py``'s. This base holds the wiring
of a project's stores, tools, providers, handover and durable seams (``__init__``), what a
turn's parts are made from (model, toolsets, instructions, its context window), and the
read-side API on a chat (``history``, ``expand``, ``ledger``, ``reconstruct``, ``clear``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model
from pydantic_ai.toolsets import AbstractToolset

from . import instructions as _instructions
from ._combined import SequentialCombinedToolset
from ._deps import TurnDeps, TurnStores
from ._guard import GuardedToolset
from ._lock import ProjectLock
from ._streaming import PendingApprovals
from ._turn import tool_loop_agent
from .chatkeys import ShipPaths, validate_chat_key
from .config import ShipConfig
from .context import AgentContextRuntime
from .execution import ApprovalCallback, ToolExecutionContext
from .files import SpillToolset, context_toolset
from .handover import Handover, SqliteCardBoxStore
from .handover._runtime import SubAgentFactory
from .history.chats import ChatHistories
from .history.injections import InjectionToolset
from .history.placement import ContextWindow, PriorItems
from .history.reconcile import reconcile
from .history.summarizer import model_summarizer
from .history.tokens import TokenCalibration
from .ledger import Ledger, RequestRecord
from .mcp import McpManager
from .models import build_model
from .stores._files import FileStores
from .stores._pg_cluster import PgClusterStore
from .stores._select import open_stores
from .tools import SkillsCache, builtin_toolset, load_tool_modules
from .turns import TurnExecutor, TurnHooks

__all__ = ["AgentBase"]


class AgentBase:
    """A project's wiring and the read side of its chats; :class:`~shipagent.agent.ShipAgent` is the rest.

    Nothing here names the agent or runs a turn: the one thing it needs of the agent is how a
    delegation builds its sub-agent (:attr:`_sub_agent`, which the handover is given).
    """

    _sub_agent: SubAgentFactory
    """Builds the agent a delegation to a profile runs (``ShipAgent._sub_agent``)."""

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
        # The chats' store, from ship.json: the project's ``.ship/`` files, or a durable
        # cluster's Postgres database (``open_stores``). Its commit writes a turn's every part.
        self.store: FileStores | PgClusterStore = open_stores(project_root, config)
        files = (  # this machine's .ship/: the chats' own store, or beside a cluster's (the ledger)
            self.store
            if isinstance(self.store, FileStores)
            else FileStores(
                project_root, window=config.context.agent_context.window_entries, project_id=config.name
            )
        )
        self.chats = ChatHistories(self.paths, config.context.chat_history)
        self.chats.log = files.message_log
        self.chats.store = self.store
        # Context files: spilled tool output, compacted history and the catalog, per
        # chat key. Usable without starting the agent (``shipagent context export``).
        self.context_files = self.store.sync_context_files()
        if config.context.chat_history.summarizer == "model":  # falls back to extract
            self.chats.summarizer = model_summarizer(self._summary_model)
        self._context_toolset = context_toolset()
        self.transcript = files.transcript_log
        self.agent_context = files.agent_context_log
        # a chat hydrated after a crash gets the transcript/log entries its last turns lack
        self.chats.reconciler = partial(reconcile, self.chats.log, self.transcript, self.agent_context)
        self.instruction_sources: list[_instructions.InstructionSource] = []
        # Builtin tools and ship.json ``tools.modules``; the skills overview comes first among the
        # instruction sources (after Agent.md and the default prompt) and shares the tools' cache.
        self.skills_cache = SkillsCache()
        self._builtin_toolset = builtin_toolset(skills_cache=self.skills_cache)
        self._module_toolsets = load_tool_modules(config, project_root=project_root)
        # ship.json MCP servers: started by ``async with agent``, their tools offered
        # as ``<server>__<tool>``; a server that fails is reported in ``agent.mcp.servers``.
        self.mcp = McpManager(config, project_root)
        # Context providers: the skills overview, then ``providers``, then the
        # capability catalog when ship.json declares ``capabilities``. Their additions follow
        # Agent.md and the default prompt; their tools join the toolsets; ``agent.injector``
        # registers more.
        self.context_runtime = AgentContextRuntime(
            config, project_root, providers=providers, skills=self.skills_cache, clock=lambda: self.clock()
        )
        self.injector = self.context_runtime.injector
        self.instruction_sources.append(self.context_runtime.instructions)
        # The ledger room listens to the context window; the core never imports it.
        self._ledger = Ledger(self.paths, config.context.ledger, otel=config.observability.otel)
        files.ledger_path = self._ledger.store.path  # a re-commit asks the ledger too
        self.token_calibration = TokenCalibration()
        self._prior_items = PriorItems()  # unedited history items of each chat's last request
        self.clock: Callable[[], datetime] = partial(datetime.now, UTC)
        """Today's date in the instructions comes from here (tests move it)."""
        # the pydantic-ai agent whose tool loop a turn runs; each run's context window comes from
        # ``_context_window``
        self._pa_agent: Agent[TurnDeps, str] = tool_loop_agent(
            config.name, self._context_window, otel=config.observability.otel
        )
        # Approvals streamed turns wait for (run_stream without an on_approval callback).
        self.approvals = PendingApprovals()
        # ``.ship/lock``, held while started; durable mode (several processes) turns it off
        # Durable mode shares a project between processes (workers, serve); DBOS coordinates them.
        self.project_lock = ProjectLock(project_root, enabled=project_lock and not config.durable.enabled)
        # Cards, boxes and delegation; the store opens on first use.
        cards = self.store.turn_card_store()  # a cluster's: its database; else .ship/cardbox.sqlite3
        self.handover = Handover.for_project(self.paths, config, self._sub_agent, store=cards)
        if isinstance(self.handover.store, SqliteCardBoxStore):  # one card store: turns' and delegations'
            files.cards = self.handover.store
        # -- durable seam: how a turn's effects run (inline here; recorded steps in
        # durable mode) and, when set, who runs whole turns (a queue of durable workflows).
        self.turn_hooks: TurnHooks[Any] = TurnHooks()  # handed this agent (durable's take a ShipAgent)
        self.turn_executor: TurnExecutor | None = None
        self.turn_executor_options: dict[str, Any] = {}
        self._parent_stores: Callable[[], TurnStores] | None = None  # a sub-agent's: where its parent reads

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
        agent_md = self._agent_md
        if agent_md is None:  # a stat (and a symlink check) per request: off the event loop
            agent_md = await anyio.to_thread.run_sync(_instructions.read_agent_md, self.project_root)
        parts = [agent_md, _instructions.default_prompt(self.clock())]
        parts.extend(await _instructions.collect(self.instruction_sources, ctx))
        return "\n\n".join(p for p in parts if p)

    # -- history ---------------------------------------------------------------------------------

    def history(self, chat_key: str) -> list[ModelMessage]:
        """The chat's current history (loaded from ``.ship/`` if this process has not seen it).

        In a durable cluster on Postgres: from the database, as the last turn committed it.
        """
        return self.store.history_sync(validate_chat_key(chat_key), self.chats)

    def expand(self, chat_key: str, summary_id: str) -> list[ModelMessage]:
        """The messages compaction summary ``summary_id`` replaced, exactly as they were committed.

        Raises:
            KeyError: the chat has no summary with that id.
        """
        key = validate_chat_key(chat_key)
        return self.store.message_log_sync(key).expand(key, summary_id)

    def ledger(self, chat_key: str, *, last: int | None = None) -> list[RequestRecord]:
        """What each model request of the chat carried (``.ship/chats/<key>/requests.jsonl``)."""
        return self._ledger.records(validate_chat_key(chat_key), last=last)

    def reconstruct(self, chat_key: str, request_id: str, step: int) -> list[ModelMessage]:
        """The exact messages model request ``step`` of turn ``request_id`` sent, from the stores.

        Raises:
            KeyError: no such record, or the stores no longer hold what it names.
        """
        key = validate_chat_key(chat_key)
        return self._ledger.reconstruct(key, request_id, step, messages=self.store.message_log_sync(key))

    async def clear(self, chat_key: str) -> None:
        """Empty the chat's model context (``/clear``); transcript and logs stay on disk."""
        key = validate_chat_key(chat_key)
        await self.chats.reset(key, uuid.uuid4().hex)

    # -- the turn's parts -------------------------------------------------------------------------

    def _tool_stores(self) -> TurnStores:
        """Where this agent's history tools read (a sub-agent: where the delegating agent reads)."""
        return self._parent_stores() if self._parent_stores is not None else self.turn_hooks.tool_stores(self)

    def _context_window(self, deps: TurnDeps) -> ContextWindow:
        """The run's context-window capability, configured from ship.json ``context``."""
        ctx, context = deps.tool, self.config.context
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
            prior_items=self._prior_items,
        )

    def _keep_elided(self, chat_key: str, tool_name: str, call_id: str, text: str) -> str:
        """Keep a tool result the budget elided as a context file, so the model can read it back."""
        ref = self.context_files.add_artifact(
            chat_key, text, name=f"{tool_name} result ({call_id})", source=f"tool:{tool_name}"
        )
        return ref.id

    async def _catalog_skills(self, ctx: ToolExecutionContext) -> list[Any]:
        return list(await self.skills_cache.get(ctx.project_root, ctx.config))

    def resolve_approval(self, approval_id: str, approved: bool) -> bool:
        """Answer an :class:`ApprovalRequired`; ``False`` if it is not waiting (any more)."""
        return self.approvals.resolve(approval_id, approved)
