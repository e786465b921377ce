"""``ShipAgent``: one project directory as an agent, one history per chat key.

One class, no base: the agent is the public face and holds its parts, which live in modules of
their own — the turn (``_turn``), what a turn runs on, assembled per turn (``_wiring``), the
commit of a turn as one store record (``_commit``), starting and stopping what it holds
(``_lifecycle``), the chats' store (``store``). It checks a turn's arguments, hands it to the
durable queue when one is running, and otherwise runs :func:`~shipagent.agent._turn.run_turn` on
the turn's parts — the turn itself (lock → load → instructions → tool loop → commit → result)
reads top to bottom in ``_turn.py`` and never sees the agent.

``run_stream`` is the same turn with its events (text deltas, tool steps, approvals, ``Done``)
yielded as they happen; ``run`` drives it without them.

``run`` raises only for caller mistakes (``ChatKeyError``, ``ConfigError``). Everything that can go
wrong inside a turn comes back as ``AgentResult(success=False)`` with the chat's history unchanged.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model
from pydantic_ai.toolsets import AbstractToolset

from .. import _quiet  # noqa: F401  (first of ours: pydantic-ai's banner off before any agent exists)
from .._lock import ProjectLock
from .._steps import StepCallback
from ..chatkeys import ShipPaths, validate_chat_key
from ..config import ShipConfig, load_config
from ..errors import ConfigError, ShipAgentError
from ..events import RunEvent
from ..results import AgentResult, Sender
from ..store._files import FileStores
from ..store._pg_cluster import PgClusterStore
from ..store._select import open_stores
from ..store.cards import SqliteCardBoxStore
from ..store.pins import Pin, PinAuthor, PinStore
from ..store.usage import UsageStore
from ..tools import SkillsCache
from ..tools.context import ProviderRuntime
from ..tools.execution import ApprovalCallback, ReplyChannel, running_tool_context
from ..tools.handover._delegation import profile_agent_md
from ..tools.handover._resources import ResolvedProfile
from ..tools.handover._runtime import Handover
from ..tools.mcp import McpManager
from ..window.tokens import TokenCalibration
from . import instructions as _instructions
from ._budgets import Budgets, ChatUsageReport
from ._cache_policy import chat_histories
from ._explain import explain_failure
from ._lifecycle import start_services
from ._request import TurnRequest
from ._streaming import Emit, PendingApprovals, stream_turn
from ._turn import MAX_OVERFLOW_RETRIES, is_context_overflow, run_turn
from ._wiring import TurnWiring
from .ledger import Ledger, RequestRecord
from .models import build_model
from .turns import TurnExecutor, TurnHooks

__all__ = ["MAX_OVERFLOW_RETRIES", "ShipAgent", "is_context_overflow"]

log = logging.getLogger("shipagent")


class ShipAgent:
    """An agent made from a project directory (``ship.json``, ``Agent.md``, ``skills/``).

    Create it with :meth:`from_project`; use ``async with agent:`` to start what it holds (MCP
    servers) and ``await agent.run(chat_key, text)`` for each turn.
    """

    _running: AsyncExitStack | None = None
    """While started: what stops what ``async with agent`` started."""
    _entered = 0

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
        self.chats = chat_histories(
            self.paths,
            config,
            self.store,
            files,
            model_in_code=model is not None,
            summary_model=self._summary_model,
        )
        # Context files: spilled tool output, compacted history and the catalog, per
        # chat key. Usable without starting the agent (``shipagent context export``).
        self.context_files = self.store.sync_context_files()
        self.pin_store = PinStore(self.paths, config.context.pins)  # pins.json: out of compaction's reach
        self.transcript = files.transcript_log
        self.agent_context = files.agent_context_log
        self.instruction_sources: list[_instructions.InstructionSource] = []
        # The skills overview comes first among the instruction sources (after Agent.md and the
        # default prompt) and shares the builtin tools' cache.
        self.skills_cache = SkillsCache()
        # ship.json MCP servers: started by ``async with agent``, their tools offered
        # as ``<server>__<tool>``; a server that fails is reported in ``agent.mcp.servers``.
        self.mcp = McpManager(config, project_root)
        # Context providers: the skills overview, then ``providers``, then the
        # capability catalog when ship.json declares ``capabilities``. Their additions follow
        # Agent.md and the default prompt; their tools join the toolsets; ``agent.injector``
        # registers more.
        self.context_runtime = ProviderRuntime(
            config, project_root, providers=providers, skills=self.skills_cache, clock=lambda: self.clock()
        )
        self.injector = self.context_runtime.injector
        self.instruction_sources.append(self.context_runtime.instructions)
        # The ledger room listens to the context window; the core never imports it.
        self._ledger = Ledger(
            self.paths,
            config.context.ledger,
            otel=config.observability.otel,
            config_hash=Ledger.hash_config(config),
        )
        files.ledger_path = self._ledger.store.path  # a re-commit asks the ledger too
        self.token_calibration = TokenCalibration()
        self.clock: Callable[[], datetime] = partial(datetime.now, UTC)
        """Today's date in the instructions and the budgets' day come from here (tests move it)."""
        # ship.json context.budgets: each response counted into its chat's usage.json; a turn over refused
        self.budgets = Budgets(
            config.context.budgets,
            UsageStore(self.paths),
            now=lambda: self.clock(),
            model_names=lambda: (config.llm.model or "", self.model.model_name),
            replays=config.durable.enabled,
        )
        # What a turn runs on: builtin tools, ship.json ``tools.modules``, ``toolsets``, the
        # instructions, the context window, the commit (assembled per turn by ``_wiring.parts``).
        self._wiring = TurnWiring(
            self, ledger=self._ledger, toolsets=toolsets, agent_md=agent_md, explain=self._explain
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
            providers: context providers to register (see ``shipagent.tools.context``).
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
            toolsets=self._wiring.user_toolsets,
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
        sub._wiring.parent_stores = self._wiring.tool_stores  # its history tools read where ours do
        sub.budgets = self.budgets  # what it uses counts into the delegating chat
        return sub

    # -- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._running is None:
            self._running = await start_services(self)  # see ``_lifecycle``
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

    # -- running ---------------------------------------------------------------------------------

    def run_sync(
        self,
        chat_key: str,
        text: str,
        *,
        on_step: StepCallback | None = None,
        channel: ReplyChannel | None = None,
        request_id: str | None = None,
        sender: Sender | None = None,
        preface: str | None = None,
    ) -> AgentResult:
        """:meth:`run` for code without an event loop."""
        turn = TurnRequest(chat_key, text, on_step, channel, request_id, sender, preface)
        return anyio.run(self._run, turn)

    async def run(
        self,
        chat_key: str,
        text: str,
        *,
        on_step: StepCallback | None = None,
        channel: ReplyChannel | None = None,
        request_id: str | None = None,
        sender: Sender | None = None,
        preface: str | None = None,
    ) -> AgentResult:
        """Run one turn of ``chat_key`` with the user's ``text``.

        ``request_id`` names the turn (default: a fresh id). In durable mode it is the turn's
        workflow id: submitting the same id twice returns the first turn's result.

        ``sender`` says who wrote ``text`` in a chat with many speakers: the transcript's user
        line records it and the model reads ``Ada (id 7): text``. ``preface`` is context the model
        reads before it that nobody in particular said (a channel puts there what a group said
        since the bot's last reply); the transcript records ``text`` only. In durable mode the
        queued turn carries only its text, so both are folded into it (the model reads the same;
        the transcript's user line has no ``sender`` field then).

        Raises:
            ChatKeyError: the chat key is unusable.
            ConfigError: no usable model is configured.
        """
        return await self._run(TurnRequest(chat_key, text, on_step, channel, request_id, sender, preface))

    async def _run(self, turn: TurnRequest) -> AgentResult:
        self._check_durable()
        if (executor := self.turn_executor) is not None:  # durable seam: the turn runs as a queued workflow
            return await _queued(executor, turn)
        return await run_turn(self._wiring.parts(), turn, ask=False)

    def _check_durable(self) -> None:
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
        channel: ReplyChannel | None = None,
        request_id: str | None = None,
        emit: Emit | None = None,
        sender: Sender | None = None,
        preface: str | None = None,
    ) -> AgentResult:
        """The turn itself, here and now (what :meth:`run` does without an executor).

        Durable workers call this inside the turn's workflow, where :attr:`turn_hooks` record
        its effects as steps. ``emit`` takes the turn's run events (as :meth:`run_stream` yields
        them) for a durable worker to publish; such a turn cannot ask for approval.
        """
        turn = TurnRequest(chat_key, text, on_step, channel, request_id, sender, preface)
        return await run_turn(self._wiring.parts(), turn, emit=emit, ask=False)

    def run_stream(
        self,
        chat_key: str,
        text: str,
        *,
        channel: ReplyChannel | None = None,
        on_step: StepCallback | None = None,
        approval_timeout: float | None = None,
        request_id: str | None = None,
        sender: Sender | None = None,
        preface: str | None = None,
    ) -> AsyncGenerator[RunEvent, None]:
        """Run one turn like :meth:`run`, yielding its events as they happen; :class:`Done` is last.

        Model requests are streamed from the provider, so :class:`TextDelta`s arrive as the model
        writes. Stopping early (``break``, ``aclose()``, the consumer's task cancelled) cancels the
        turn: nothing of it is committed, and the chat's next turn runs. Prefer
        ``async with contextlib.aclosing(agent.run_stream(...)) as events:`` so that happens at once.
        A tool needing approval emits :class:`ApprovalRequired` and waits for
        :meth:`resolve_approval` (up to ``approval_timeout`` seconds; ``None``: no limit), unless the
        agent has an ``on_approval`` callback, which then decides. ``sender`` and ``preface`` are
        those of :meth:`run`.

        Raises:
            ChatKeyError: the chat key is unusable (raised here, before anything runs).
            ConfigError: no usable model is configured.
        """
        turn = TurnRequest(chat_key, text, on_step, channel, request_id, sender, preface)
        self._check_durable()
        if (executor := self.turn_executor) is not None:  # durable seam: the events come from its worker
            return stream_turn(partial(_queued, executor, turn))
        parts = self._wiring.parts()  # (a model ship.json cannot build raises here, before anything runs)
        return stream_turn(lambda emit: run_turn(parts, turn, emit=emit, approval_timeout=approval_timeout))

    def _explain(self, exc: BaseException) -> str:
        """Why a run failed, in words that name what to change (URL, ship.json key, variable)."""
        url = self._model.base_url if self._model is not None else self.config.llm.base_url
        return explain_failure(exc, url=url, llm=self.config.llm)

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

    # -- history ---------------------------------------------------------------------------------

    def history(self, chat_key: str) -> list[ModelMessage]:
        """The chat's current history (loaded from ``.ship/`` if this process has not seen it).

        In a durable cluster on Postgres: from the database, as the last turn committed it (code on
        an event loop awaits :meth:`ahistory`, :meth:`aexpand` and :meth:`areconstruct` there).
        """
        return self.store.history_sync(validate_chat_key(chat_key), self.chats)

    async def ahistory(self, chat_key: str) -> list[ModelMessage]:
        """:meth:`history` for code on an event loop."""
        return await self.store.history_async(validate_chat_key(chat_key), self.chats)

    def expand(self, chat_key: str, summary_id: str) -> list[ModelMessage]:
        """The messages compaction summary ``summary_id`` replaced, exactly as they were committed.

        Raises:
            KeyError: the chat has no summary with that id.
        """
        key = validate_chat_key(chat_key)
        return self.store.message_log_sync(key).expand(key, summary_id)

    async def aexpand(self, chat_key: str, summary_id: str) -> list[ModelMessage]:
        """:meth:`expand` for code on an event loop."""
        return await self.store.expand(validate_chat_key(chat_key), summary_id)

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

    async def areconstruct(self, chat_key: str, request_id: str, step: int) -> list[ModelMessage]:
        """:meth:`reconstruct` for code on an event loop (the ledger's files are read in a thread)."""
        key = validate_chat_key(chat_key)
        log = await self.store.message_log_async(key)
        return await anyio.to_thread.run_sync(
            partial(self._ledger.reconstruct, key, request_id, step, messages=log)
        )

    async def note_undelivered(self, chat_key: str, request_id: str, reason: str) -> None:
        """Record in the chat's transcript that turn ``request_id``'s answer never reached the user.

        A host calls it when its delivery gave up (a chat platform refused the message for good):
        the loss is kept where the conversation is, so it survives a restart and ``/status`` can
        say it. Call it once per lost answer.
        """
        key = validate_chat_key(chat_key)
        await self.turn_hooks.store(self).note_undelivered(key, request_id, reason)

    async def pin(self, chat_key: str, text: str, *, by: PinAuthor = "api") -> Pin:
        """Pin ``text``: every request of the chat carries it, no compaction folds it (``store.pins``)."""
        return await self.pin_store.add(validate_chat_key(chat_key), text, by=by)

    async def unpin(self, chat_key: str, pin_id: str) -> bool:
        """Remove pin ``pin_id`` (``p3``); ``False`` if the chat has no such pin."""
        return await self.pin_store.remove(validate_chat_key(chat_key), pin_id)

    async def pins(self, chat_key: str) -> list[Pin]:
        """The chat's pins, oldest first."""
        return await self.pin_store.load(validate_chat_key(chat_key))

    async def usage(self, chat_key: str) -> ChatUsageReport:
        """The chat's use today and this month against its budgets (ship.json ``context.budgets``).

        Raises:
            UsageFileError: the chat's ``usage.json`` is not usage data (the message names it).
        """
        return await self.budgets.report(validate_chat_key(chat_key))

    async def clear(self, chat_key: str) -> None:
        """Empty the chat's model context (``/clear``); transcript and logs stay on disk."""
        key = validate_chat_key(chat_key)
        await self.chats.reset(key, uuid.uuid4().hex)

    def resolve_approval(self, approval_id: str, approved: bool) -> bool:
        """Answer an :class:`ApprovalRequired`; ``False`` if it is not waiting (any more)."""
        return self.approvals.resolve(approval_id, approved)


async def _queued(executor: TurnExecutor, turn: TurnRequest, emit: Emit | None = None) -> AgentResult:
    """``turn`` as a queued durable workflow (``emit`` takes its run events when streamed)."""
    return await executor.submit(
        turn.chat_key,
        turn.prompt,
        request_id=turn.request_id,
        on_step=turn.on_step,
        channel=turn.channel,
        emit=emit,
    )
