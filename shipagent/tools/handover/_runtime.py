"""``ShipAgent.handover``: the store, the packer, output boxes and delegation for one agent.

Usable without starting the agent (``agent.handover.store`` opens the SQLite file on first use),
so a script can inspect what was handed over without a model or a run.

This package never imports the agent: the agent hands its :class:`Handover` a
:data:`SubAgentFactory` that builds the agent of a profile, and delegations run what it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
from collections.abc import Callable, Sequence
from typing import Any

import anyio
from pydantic_ai.toolsets import AbstractToolset

from ..._cache import BoundedCache
from ...chatkeys import ShipPaths
from ...config import HandoverConfig, ShipConfig
from ...errors import BadRequestError, NotFoundError, ShipAgentError
from ...store.cards._cards import Card
from ...store.cards._ids import new_id
from ...store.cards._sqlite import SqliteCardBoxStore
from ...store.cards._store import BoxId, CardBoxStore
from ..execution import ToolExecutionContext
from ._delegation import DelegationLimitError, DelegationTask, SubAgent
from ._inspect import format_box
from ._packer import HandoverPacker
from ._render import SubAgentInput, load_sub_agent_input
from ._resources import ResolvedProfile, ResourceStore

__all__ = ["Handover", "SubAgentFactory"]

log = logging.getLogger("shipagent.tools.handover")
STORE_FILE = "cardbox.sqlite3"
MAX_REMEMBERED_TASKS = 1000
MAX_REMEMBERED_BOXES = 4096  # output box ids of the most recently used chats


SubAgentFactory = Callable[[ResolvedProfile, "Handover"], SubAgent]
"""``(profile, the delegating handover) -> the agent that runs the profile``."""


class Handover:
    """Cards, boxes and delegations of one agent.

    Attributes:
        store: the :class:`CardBoxStore` (``.ship/cardbox.sqlite3`` by default).
        resources: profiles from ship.json ``profiles`` as profile boxes.
        packer: the :class:`HandoverPacker` over both.
        project_id: recorded on every card and box this agent writes (ship.json ``name``).
        limits: ship.json ``handover`` (``maxDepth``, ``maxSubagentsPerRun``).
        depth: 0 for an agent a user runs; ``n`` for a sub-agent ``n`` delegations deep.
        paths: the project's ``.ship/`` layout (to tell a known chat key from a typo).
        sub_agents: builds the agent that runs a profile (given by the agent this belongs to).
        allowed_tools: tool-name patterns this agent may use (a profile's ``tools``), or ``None``.
        tasks: the delegations this agent started, by task id (in memory; the boxes persist).
    """

    def __init__(
        self,
        store: CardBoxStore,
        resources: ResourceStore,
        *,
        project_id: str,
        limits: HandoverConfig,
        paths: ShipPaths | None = None,
        sub_agents: SubAgentFactory | None = None,
        depth: int = 0,
        allowed_tools: Sequence[str] | None = None,
        owns_store: bool = True,
    ) -> None:
        self.store = store
        self.resources = resources
        self.packer = HandoverPacker(store, resources)
        self.project_id = project_id
        self.limits = limits
        self.depth = depth
        self.allowed_tools = None if allowed_tools is None else tuple(allowed_tools)
        self.tasks: dict[str, DelegationTask] = {}
        self.paths = paths
        self.sub_agents = sub_agents
        self._owns_store = owns_store
        self._background: set[asyncio.Task[DelegationTask]] = set()
        self._toolset: AbstractToolset[Any] | None = None
        self._output_boxes: BoundedCache[str, str] = BoundedCache(MAX_REMEMBERED_BOXES)

    @classmethod
    def for_project(
        cls,
        paths: ShipPaths,
        config: ShipConfig,
        sub_agents: SubAgentFactory | None = None,
        *,
        store: CardBoxStore | None = None,
    ) -> Handover:
        """The handover of an agent a user runs: store at ``.ship/cardbox.sqlite3``, depth 0.

        Args:
            paths: the project's ``.ship/`` layout.
            config: the validated ship.json (``name``, ``profiles``, ``handover``).
            sub_agents: how the agent builds a profile's agent; without it delegations fail.
            store: cards and boxes somewhere else (a durable cluster's database, shared by every
                worker); its owner closes it. ``None``: the project's own SQLite file.
        """
        owned = store is None
        if store is None:
            store = SqliteCardBoxStore(paths.ship_dir / STORE_FILE, project_id=config.name)
        resources = ResourceStore(store, config.profiles, author_id=config.name)
        return cls(
            store,
            resources,
            project_id=config.name,
            limits=config.handover,
            paths=paths,
            sub_agents=sub_agents,
            owns_store=owned,
        )

    def child(self, sub_agents: SubAgentFactory | None, allowed_tools: Sequence[str] | None) -> Handover:
        """The handover of a sub-agent: same store and profiles, one level deeper.

        Args:
            sub_agents: the sub-agent's own factory (its delegations build from it).
            allowed_tools: the profile's ``tools`` patterns, or ``None`` for all.
        """
        return Handover(
            self.store,
            self.resources,
            project_id=self.project_id,
            limits=self.limits,
            paths=self.paths,
            sub_agents=sub_agents,
            depth=self.depth + 1,
            allowed_tools=allowed_tools,
            owns_store=False,
        )

    # -- output boxes and inspection ------------------------------------------------------------

    async def output_box_id(self, chat_key: str) -> str:
        """The chat's output box (created empty on first use): every completed turn, as cards."""
        box_id = self._output_boxes.get(chat_key)
        if box_id is None:  # named boxes never change: one lookup per chat while it is in use
            box_id = self._output_boxes[chat_key] = await self.store.named_box(f"output:{chat_key}")
        return box_id

    async def read_box(self, box_id: BoxId) -> list[Card]:
        """The cards of a box, in order (for inspection)."""
        box = await self.store.get_box(box_id)
        return await self.store.get_cards(box.card_ids)

    async def describe_box(self, box_id: BoxId, *, max_chars: int = 500) -> str:
        """A box as readable text (see :func:`format_box`) — for a CLI or a log."""
        box = await self.store.get_box(box_id)
        return format_box(box, await self.store.get_cards(box.card_ids), max_chars=max_chars)

    async def render_box(self, box_id: BoxId) -> SubAgentInput:
        """What a sub-agent given this context box would receive."""
        return await load_sub_agent_input(self.store, box_id)

    # -- delegation ----------------------------------------------------------------------------

    def _check_limits(self, run: ToolExecutionContext | None, count: int = 1) -> None:
        if self.depth >= self.limits.max_depth:
            raise DelegationLimitError(
                f"delegation depth limit reached: this agent runs {self.depth} delegation(s) deep and "
                f"ship.json handover.maxDepth is {self.limits.max_depth}; answer the task yourself"
            )
        if run is not None and run.subagents_started + count > self.limits.max_subagents_per_run:
            raise DelegationLimitError(
                f"this run already started {run.subagents_started} sub-agent(s); ship.json "
                f"handover.maxSubagentsPerRun is {self.limits.max_subagents_per_run}"
            )

    async def prepare(
        self,
        chat_key: str,
        *,
        profile_name: str,
        instruction: object,
        input_box_ids: Sequence[BoxId] | None = None,
        tool_suffix: str = "delegate_async",
        run: ToolExecutionContext | None = None,
    ) -> DelegationTask:
        """Check the limits, pack the context box and register a task (not started yet).

        ``run`` is the delegating run's context: ``maxSubagentsPerRun`` counts one run's
        delegations, whichever tools started them, and resets with the next run.

        Raises:
            DelegationLimitError: the depth or per-run limit would be exceeded.
            BadRequestError, NotFoundError: from packing (unknown profile, missing box, …).
        """
        self._check_limits(run)
        if instruction is None or (isinstance(instruction, str) and not instruction.strip()):
            raise BadRequestError("instruction must not be empty")
        packed = await self.packer.pack_context_with_instruction(
            project_id=self.project_id,
            tool_suffix=tool_suffix,
            source_agent_id=chat_key,
            profile_name=profile_name,
            instruction=instruction,
            input_box_ids=list(input_box_ids or []),
        )
        profile = await self.resources.get_profile(packed.target_profile_box_id)
        task = DelegationTask.new(chat_key, packed.context_box_id, profile)
        self._forget_old_tasks()
        self.tasks[task.task_id] = task
        if run is not None:
            run.subagents_started += 1
        return task

    def _forget_old_tasks(self) -> None:
        """Keep at most ``MAX_REMEMBERED_TASKS`` finished tasks: a long-lived server must not grow
        without bound. Their boxes stay in the store; only ``delegation_result`` forgets them."""
        finished = [t for t in self.tasks.values() if t.status != "running"]
        for task in finished[: max(len(finished) - MAX_REMEMBERED_TASKS + 1, 0)]:
            del self.tasks[task.task_id]

    async def run(self, task: DelegationTask) -> DelegationTask:
        """Run a prepared task to its end. Never raises: every failure is recorded on the task.

        One broken delegation (a crashing model, a bad profile file) must not take down its
        siblings in a fork-join or the parent's run.
        """
        try:
            if self.sub_agents is None:
                raise ShipAgentError("this handover belongs to no agent; it cannot run sub-agents")
            rendered = await load_sub_agent_input(self.store, task.context_box_id)
            sub = self.sub_agents(task.profile, self)
            # Not entered (``async with``): it shares the parent's started MCP servers, and entering
            # would start (and on exit stop) servers of its own.
            await _seed(sub, task.chat_key, rendered)
            result = await sub.run(task.chat_key, rendered.prompt or "(no instruction was given)")
            task.output = result.output
            task.status = "done" if result.success else "failed"
            if not result.success:
                task.error = result.output
            task.output_box_id = await self.output_box_id(task.chat_key)
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

    def start(self, task: DelegationTask) -> None:
        """Run a prepared task in the background; :meth:`wait` or ``delegation_result`` collect it."""
        background = asyncio.get_running_loop().create_task(self.run(task))
        self._background.add(background)
        background.add_done_callback(self._background.discard)

    async def wait(self, task_id: str, wait_seconds: float | None = None) -> DelegationTask:
        """The task, after waiting up to ``wait_seconds`` (``None``: until it ends) for it to end.

        Raises:
            NotFoundError: no task of that id was started by this agent.
        """
        task = self.tasks.get(task_id)
        if task is None:
            raise NotFoundError(f"delegation task {task_id!r} not found (was it started by this agent?)")
        if task.status == "running" and (wait_seconds is None or wait_seconds > 0):
            with anyio.move_on_after(wait_seconds):
                await task.finished.wait()
        return task

    # -- tools -----------------------------------------------------------------------------------

    @property
    def toolset(self) -> AbstractToolset[Any] | None:
        """The delegation tools, or ``None`` when ship.json configures no profiles to delegate to."""
        if not self.resources.profiles:
            return None
        if self._toolset is None:
            from ._tools import handover_toolset

            self._toolset = handover_toolset(self)
        return self._toolset

    def allows(self, tool_name: str) -> bool:
        """Whether this agent may use ``tool_name`` (``fnmatch`` patterns in the profile's ``tools``)."""
        if self.allowed_tools is None:
            return True
        return any(fnmatch.fnmatchcase(tool_name, pattern) for pattern in self.allowed_tools)

    def restrict(self, toolsets: Sequence[AbstractToolset[Any]]) -> list[AbstractToolset[Any]]:
        """``toolsets`` limited to the tools this agent may use (unchanged for a top-level agent)."""
        if self.allowed_tools is None:
            return list(toolsets)
        return [t.filtered(lambda _ctx, tool_def: self.allows(tool_def.name)) for t in toolsets]

    # -- lifecycle -------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Cancel delegations still running in the background and close the store (if owned)."""
        for background in list(self._background):
            background.cancel()
        for background in list(self._background):
            with contextlib.suppress(BaseException):  # CancelledError; the task records it
                await background
        if self._owns_store:
            await self.store.close()


async def _seed(sub: SubAgent, chat_key: str, rendered: SubAgentInput) -> None:
    """Commit the inherited history as the delegate chat's opening messages (persisted like a turn)."""
    if not rendered.history:
        return
    async with sub.chats.lock(chat_key):
        base = await sub.chats.aget(chat_key)
        await sub.chats.seed(chat_key, f"handover-{new_id()}", base, list(rendered.history))
