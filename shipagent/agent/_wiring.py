"""What a turn runs on: the agent's parts, assembled into :class:`~._turn.TurnParts` once per turn.

:class:`TurnWiring` is the agent's half that only turns use: the toolsets a run offers, the
instructions, the run's context window, the tool execution context, the commit and the request
ids. It holds the parts made once (builtin toolsets, the pydantic-ai loop, the ledger recorder's
memory of each chat's last request) and reads the rest through :class:`WiredAgent` — the agent's
public attributes a durable worker, a sub-agent or a test may reassign between turns (the turn
hooks, the model, ``on_approval``, the handover, the MCP servers, the budgets), never within one.
It is composition, not a base class: the agent holds one and hands its turns its :meth:`parts`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import anyio
from pydantic_ai import Agent
from pydantic_ai.models import Model
from pydantic_ai.toolsets import AbstractToolset

from .._cache import BoundedCache
from ..chatkeys import ShipPaths
from ..config import ShipConfig
from ..results import Sender
from ..store._protocols import ChatStore
from ..store.chats import ChatHistories
from ..store.files import ContextFiles
from ..store.pins import PinStore
from ..tools import SkillsCache, builtin_toolset, load_tool_modules
from ..tools._deps import TurnDeps, TurnStores
from ..tools.context import ProviderRuntime
from ..tools.execution import ApprovalCallback, ReplyChannel, ToolExecutionContext
from ..tools.files._catalog import CatalogToolset
from ..tools.files._tools import context_toolset
from ..tools.handover._runtime import Handover
from ..tools.mcp import McpManager
from ..tools.pins import pins_toolset
from ..window.placement import ContextWindow, PriorItems
from ..window.tokens import TokenCalibration
from . import instructions as _instructions
from ._assembly import build_instructions, context_window, guarded, one_toolset
from ._budgets import Budgets
from ._commit import commit_turn
from ._streaming import PendingApprovals
from ._turn import TurnParts, tool_loop_agent
from .ledger import Ledger
from .models import build_model_settings
from .turns import CommitOutcome, TurnCommit, TurnHooks

__all__ = ["TurnWiring", "WiredAgent"]

log = logging.getLogger("shipagent")

_MINTED = 4096
"""Request ids minted by an agent and not committed yet, remembered (a failed turn's expire)."""


class WiredAgent(Protocol):
    """The agent as its turns read it: what hosts, sub-agents and tests may reassign between turns."""

    project_root: Path
    config: ShipConfig
    paths: ShipPaths
    on_approval: ApprovalCallback | None
    turn_hooks: TurnHooks[Any]
    handover: Handover
    mcp: McpManager
    budgets: Budgets
    chats: ChatHistories
    context_files: ContextFiles
    context_runtime: ProviderRuntime
    instruction_sources: list[_instructions.InstructionSource]
    skills_cache: SkillsCache
    pin_store: PinStore
    approvals: PendingApprovals
    token_calibration: TokenCalibration
    clock: Callable[[], datetime]

    @property
    def model(self) -> Model: ...


class TurnWiring:
    """One agent's turn assembly (see the module docstring)."""

    def __init__(
        self,
        agent: WiredAgent,
        *,
        ledger: Ledger,
        toolsets: Sequence[AbstractToolset[Any]],
        agent_md: str | None,
        explain: Callable[[BaseException], str],
    ) -> None:
        self.agent = agent
        self.ledger = ledger
        self.agent_md = agent_md
        self.explain = explain
        config = agent.config
        self.user_toolsets = list(toolsets)
        self.builtin_toolset = builtin_toolset(skills_cache=agent.skills_cache)
        self.context_toolset = context_toolset()
        self.pins_toolsets = [pins_toolset()] if config.context.pins.enabled else []
        self.module_toolsets = load_tool_modules(config, project_root=agent.project_root)
        self.prior_items = PriorItems()  # unedited history items of each chat's last request
        # the pydantic-ai agent whose tool loop a turn runs; each run's context window comes from
        # ``context_window``
        self.loop: Agent[TurnDeps, str] = tool_loop_agent(
            config.name, self.context_window, otel=config.observability.otel
        )
        self.parent_stores: Callable[[], TurnStores] | None = None
        """A sub-agent's: where the delegating agent's history tools read."""
        self.minted: BoundedCache[str, bool] = BoundedCache(_MINTED)

    def parts(self) -> TurnParts:
        """What a turn runs on, assembled from the agent's wiring.

        Once per turn: the turn hooks, the model and ``on_approval`` are public attributes a
        durable worker, a test or the lazily built model may change between turns, never within one.
        """
        agent = self.agent
        hooks = agent.turn_hooks  # durable seam: inline by default, recorded steps in durable mode

        def toolset() -> AbstractToolset[Any]:
            # one catalog wrapper sees every tool of the step and keeps the chat's catalog file current
            return CatalogToolset(one_toolset(hooks.toolsets(self.toolsets())), skills=self.catalog_skills)

        meter = agent.budgets.turn()  # counts the turn's responses once its admit lets it run
        chats = agent.chats
        return TurnParts(
            loop=self.loop,
            model=meter.wrap(hooks.model(agent.model)),
            toolset=toolset,
            model_settings=build_model_settings(agent.config.llm) or None,
            instructions=self.instructions,
            tool_context=self.tool_context,
            tool_stores=self.tool_stores,
            request_id=lambda given: hooks.request_id(given, self.mint),
            lock=chats.lock,
            load=lambda chat_key: hooks.load(agent, chat_key, partial(chats.aget, chat_key)),
            commit=lambda turn: hooks.commit(agent, turn, self.commit),
            keep_sent=self.keep_sent,
            history_sources=chats.sources,
            keep_last=agent.config.context.chat_history.compact_keep_last_messages,
            is_mcp_tool=self.is_mcp_tool,
            approvals=agent.approvals,
            explain=self.explain,
            compact_idle=chats.early_compaction,
            overflowed=chats.note_overflow,
            admit=meter.admit,
        )

    def tool_context(
        self, chat_key: str, request_id: str, channel: ReplyChannel | None
    ) -> ToolExecutionContext:
        """The run's tool execution context (its ``deps.tool``)."""
        agent = self.agent
        return ToolExecutionContext(
            chat_key=chat_key,
            request_id=request_id,
            project_root=agent.project_root,
            config=agent.config,
            paths=agent.paths,
            max_injected_messages=agent.config.context.injection.max_injected_messages,
            channel=channel,
            on_approval=agent.on_approval,
            context_files=agent.context_files,
        )

    async def commit(self, turn: TurnCommit, store: ChatStore) -> CommitOutcome:
        """Write a finished turn as ONE record (see ``_commit.commit_turn``)."""
        fresh = self.minted.pop(turn.request_id, False)  # minted here: no store can hold it yet
        return await commit_turn(self.agent.chats, self.ledger, store, turn, fresh=fresh)

    def mint(self) -> str:
        """A fresh request id for a turn the caller did not name (remembered until its commit)."""
        request_id = uuid.uuid4().hex
        self.minted[request_id] = True
        return request_id

    async def keep_sent(
        self, chat_key: str, request_id: str, text: str, ctx: ToolExecutionContext, sender: Sender | None
    ) -> None:
        """A turn that did not commit: what ``chat_send`` already delivered stays in the transcript."""
        if ctx.sent_texts:
            try:
                await self.agent.turn_hooks.store(self.agent).keep_sent(
                    chat_key, request_id, text, list(ctx.sent_texts), sender=sender
                )
            except Exception as exc:  # the turn failed already: say so, do not fail it differently
                log.error("chat %r: could not keep turn %s's chat_send lines: %s", chat_key, request_id, exc)

    def toolsets(self) -> list[AbstractToolset[Any]]:
        """Every toolset a run offers the model (a sub-agent's profile may limit them), guarded."""
        agent = self.agent
        toolsets: list[AbstractToolset[Any]] = [
            self.builtin_toolset,
            self.context_toolset,
            *self.pins_toolsets,
            *self.module_toolsets,
            *self.user_toolsets,
            agent.mcp.toolset,
            *agent.context_runtime.mcp_toolsets(),
            agent.context_runtime.toolset,
        ]
        if agent.handover.toolset is not None:
            toolsets.append(agent.handover.toolset)
        return guarded(agent.handover.restrict(toolsets))

    def is_mcp_tool(self, name: str) -> bool:
        return self.agent.mcp.is_mcp_tool(name) or self.agent.context_runtime.is_mcp_tool(name)

    async def instructions(self, ctx: ToolExecutionContext) -> str:
        """Agent.md (or the default prompt), the instruction sources' additions, then the pins.

        Agent.md (unless given; a stat and a symlink check per turn) and the chat's pins are read
        in one worker-thread hop: both are small files every turn reads, and a hop costs more
        than either read.
        """
        agent, given = self.agent, self.agent_md
        pins_tool = agent.config.context.pins.enabled

        def read() -> tuple[str, str]:
            agent_md = given if given is not None else _instructions.read_agent_md(agent.project_root)
            return agent_md, _instructions.pinned_facts(agent.pin_store, ctx.chat_key, tool=pins_tool)

        agent_md, pins = await anyio.to_thread.run_sync(read)
        text = await build_instructions(agent_md, agent.clock(), agent.instruction_sources, ctx)
        return f"{text}\n\n{pins}" if pins else text

    def tool_stores(self) -> TurnStores:
        """Where this agent's history tools read (a sub-agent: where the delegating agent reads)."""
        if self.parent_stores is not None:
            return self.parent_stores()
        return self.agent.turn_hooks.tool_stores(self.agent)

    def context_window(self, deps: TurnDeps) -> ContextWindow:
        """The run's context-window capability (``_turn.tool_loop_agent`` asks for one per run)."""
        agent = self.agent
        key, request_id = deps.tool.chat_key, deps.tool.request_id
        return context_window(
            agent.config.context,
            key,
            keep_result=partial(self.keep_elided, key),
            history_sources=agent.chats.sources(key),
            observer=self.ledger.recorder(key, request_id),
            calibration=agent.token_calibration,
            prior_items=self.prior_items,
            on_room=agent.chats.note_room,
        )

    def keep_elided(self, chat_key: str, tool_name: str, call_id: str, text: str) -> str:
        """Keep a tool result the budget elided as a context file, so the model can read it back."""
        ref = self.agent.context_files.add_artifact(
            chat_key, text, name=f"{tool_name} result ({call_id})", source=f"tool:{tool_name}"
        )
        return ref.id

    async def catalog_skills(self, ctx: ToolExecutionContext) -> list[Any]:
        return list(await self.agent.skills_cache.get(ctx.project_root, ctx.config))
