"""The delegation tools the model calls: ``delegate_async``, ``delegation_result``, ``fork_join``,
``ask_expert``.

Every path packs its context with the one recipe (:func:`pack_context_with_instruction`):
instruction, the boxes the model names, the parent pointer. Failures come back as
``{"success": false, "error": ...}`` so the model can decide what to do; in ``fork_join`` each task
reports its own outcome and one failure never fails the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, NotRequired, Protocol

import anyio
from pydantic_ai import RunContext
from pydantic_ai.toolsets import FunctionToolset
from typing_extensions import TypedDict

from ...errors import NotFoundError, ShipAgentError
from .._deps import TurnDeps, deps_of
from ._delegation import DELEGATE_MARK, DelegationTask

if TYPE_CHECKING:
    from ...chatkeys import ShipPaths
    from ...config import HandoverConfig
    from ...store.cards._store import BoxId
    from ..execution import ToolExecutionContext

__all__ = ["DELEGATION_TOOL_NAMES", "Delegations", "ForkTask", "handover_toolset"]

DELEGATION_TOOL_NAMES = ("delegate_async", "delegation_result", "fork_join", "ask_expert")
MAX_WAIT_SECONDS = 600.0


class ForkTask(TypedDict):
    """One task of ``fork_join``."""

    profile_name: str
    instruction: str
    input_box_ids: NotRequired[list[str]]


class Delegations(Protocol):
    """What the tools need of the :class:`~shipagent.tools.handover.Handover` they are bound to.

    A protocol, so that the dependency runs one way: the handover builds its toolset from this
    module, and this module never imports the handover.
    """

    @property
    def tasks(self) -> dict[str, DelegationTask]: ...

    @property
    def paths(self) -> ShipPaths | None: ...

    @property
    def limits(self) -> HandoverConfig: ...

    async def output_box_id(self, chat_key: str) -> str: ...

    async def prepare(
        self,
        chat_key: str,
        *,
        profile_name: str,
        instruction: object,
        input_box_ids: Sequence[BoxId] | None = None,
        tool_suffix: str = "delegate_async",
        run: ToolExecutionContext | None = None,
    ) -> DelegationTask: ...

    def start(self, task: DelegationTask) -> None: ...

    async def run(self, task: DelegationTask) -> DelegationTask: ...

    async def wait(self, task_id: str, wait_seconds: float | None = None) -> DelegationTask: ...


def _error(exc: BaseException) -> dict[str, Any]:
    return {"success": False, "error": str(exc)}


def handover_toolset(handover: Delegations) -> FunctionToolset[Any]:
    """A toolset of the four delegation tools, bound to ``handover`` (one per agent)."""

    async def _clone_source_box(chat_key: str, target_ref: str | None) -> str:
        if target_ref is None or target_ref == chat_key:
            source = chat_key
        elif target_ref in handover.tasks:
            source = handover.tasks[target_ref].chat_key
        else:
            paths = handover.paths
            known = paths is not None and paths.transcript(target_ref).is_file()
            if DELEGATE_MARK not in target_ref and not known:
                raise NotFoundError(
                    f"clone source {target_ref!r} is neither a task id of this agent nor a known chat key"
                )
            source = target_ref
        return await handover.output_box_id(source)

    async def delegate_async(
        run: RunContext[TurnDeps],
        profile_name: str,
        instruction: str,
        input_box_ids: list[str] | None = None,
        target_strategy: Literal["new", "clone"] = "new",
        target_ref: str | None = None,
    ) -> dict[str, Any]:
        """Hand a task to another agent profile; it runs in the background.

        The other agent sees only the instruction, the cards of the boxes you pass and a note that
        you delegated it — nothing else of this conversation. Collect its answer with
        `delegation_result`.

        Args:
            profile_name: the profile to run (one of ship.json `profiles`).
            instruction: what it should do, self-contained.
            input_box_ids: boxes whose cards it should inherit (e.g. an `output_box_id` of an
                earlier delegation).
            target_strategy: `new` for a fresh agent; `clone` to also inherit the output box of
                `target_ref` (a task id or chat key; this chat when omitted).
            target_ref: the clone source for `clone`.
        """
        ctx = deps_of(run).tool
        try:
            boxes: list[Any] = list(input_box_ids or [])
            if target_strategy == "clone":
                boxes.append(await _clone_source_box(ctx.chat_key, target_ref))
            task = await handover.prepare(
                ctx.chat_key,
                profile_name=profile_name,
                instruction=instruction,
                input_box_ids=boxes,
                tool_suffix="delegate_async",
                run=ctx,
            )
        except ShipAgentError as exc:
            return _error(exc)
        handover.start(task)
        return {"success": True, **task.as_dict()}

    async def delegation_result(task_id: str, wait_seconds: float = 0) -> dict[str, Any]:
        """Status of a `delegate_async` task; with its answer and output box once it is done.

        Args:
            task_id: what `delegate_async` returned.
            wait_seconds: wait up to this long for it to finish (0: answer at once).
        """
        try:
            task = await handover.wait(task_id, min(max(wait_seconds, 0.0), MAX_WAIT_SECONDS))
        except ShipAgentError as exc:
            return _error(exc)
        return {"success": True, **task.as_dict()}

    async def fork_join(
        run: RunContext[TurnDeps], tasks: list[ForkTask], max_parallel: int = 4
    ) -> dict[str, Any]:
        """Run several delegated tasks concurrently and return every answer, in order.

        Each task reports its own `status` (`done` or `failed`) with its `output` or `error`; one
        failing task does not stop the others.

        Args:
            tasks: `[{profile_name, instruction, input_box_ids?}]`.
            max_parallel: how many run at the same time.
        """
        ctx = deps_of(run).tool
        slots: list[DelegationTask | dict[str, Any]] = []
        for spec in tasks:
            try:
                slots.append(
                    await handover.prepare(
                        ctx.chat_key,
                        profile_name=spec.get("profile_name", ""),
                        instruction=spec.get("instruction"),
                        input_box_ids=spec.get("input_box_ids"),
                        tool_suffix="fork_join",
                        run=ctx,
                    )
                )
            except ShipAgentError as exc:
                slots.append(
                    {"profile_name": spec.get("profile_name"), "status": "failed", "error": str(exc)}
                )
        limiter = anyio.CapacityLimiter(max(1, min(max_parallel, handover.limits.max_subagents_per_run)))

        async def one(task: DelegationTask) -> None:
            async with limiter:
                await handover.run(task)

        async with anyio.create_task_group() as group:
            for slot in slots:
                if isinstance(slot, DelegationTask):
                    group.start_soon(one, slot)
        results = [s.as_dict() if isinstance(s, DelegationTask) else s for s in slots]
        # the join itself worked: per-task outcomes are in ``results`` (a failed task is data, not a
        # failure of this tool call)
        failed = sum(1 for r in results if r["status"] != "done")
        return {"success": True, "failed": failed, "results": results}

    async def ask_expert(
        run: RunContext[TurnDeps], profile_name: str, question: str, include_history: bool = False
    ) -> dict[str, Any]:
        """Ask another agent profile a question and wait for its answer.

        Args:
            profile_name: the expert's profile (one of ship.json `profiles`).
            question: the question, self-contained.
            include_history: also give it this conversation's earlier completed turns.
        """
        ctx = deps_of(run).tool
        try:
            boxes = [await handover.output_box_id(ctx.chat_key)] if include_history else []
            task = await handover.prepare(
                ctx.chat_key,
                profile_name=profile_name,
                instruction=question,
                input_box_ids=boxes,
                tool_suffix="ask_expert",
                run=ctx,
            )
        except ShipAgentError as exc:
            return _error(exc)
        await handover.run(task)
        result = task.as_dict()
        result["answer"] = result.pop("output", None)
        return {"success": task.status == "done", **result}

    return FunctionToolset(
        [delegate_async, delegation_result, fork_join, ask_expert], id="shipagent-handover"
    )
