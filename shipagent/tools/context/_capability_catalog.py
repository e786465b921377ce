"""The capability catalog: a snapshot of the pool and a task, rendered into an agent's system prompt.

An orchestrator decides whom to dispatch to from its prompt, so the prompt must carry the live
capability catalog; an executor that receives a task gets the same structure with the task and the
orchestrator's note. When a task needs capabilities nobody available has, the rendering says so
plainly, so the orchestrator reports the shortage instead of dispatching into the void.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from ._pool import CapabilityEntry, ResourcePool, ResourcePoolSummary

__all__ = [
    "PoolSnapshot",
    "TaskInfo",
    "build_agent_context",
    "context_to_system_prompt",
    "generate_dynamic_system_prompt",
]


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """The task an agent is handed (optional part of the context)."""

    id: str | None
    description: str | None
    required_capabilities: tuple[str, ...] = ()
    bd_task_id: str | None = None
    """The id of the task in an external tracker, when there is one."""


@dataclass(frozen=True, slots=True)
class PoolSnapshot:
    """A snapshot of what an agent should know about the pool and its task.

    Attributes:
        timestamp: when the snapshot was taken (ISO 8601, UTC).
        resource_pool: counts by status.
        available_capabilities: capabilities with at least one available resource.
        capability_to_resources: capability → ids of its *available* resources (quick lookup).
        capability_catalog: every capability with available / total counts (for the table).
        task: the task being dispatched or executed, if any.
        orchestrator_note: free text from the orchestrator, if any.
        missing_capabilities: required capabilities no available resource has.
    """

    timestamp: str
    resource_pool: ResourcePoolSummary
    available_capabilities: tuple[str, ...]
    capability_to_resources: dict[str, list[str]]
    capability_catalog: tuple[CapabilityEntry, ...] = ()
    task: TaskInfo | None = None
    orchestrator_note: str | None = None
    missing_capabilities: tuple[str, ...] = ()


def build_agent_context(
    pool: ResourcePool,
    *,
    task_id: str | None = None,
    task_description: str | None = None,
    required_capabilities: Sequence[str] | None = None,
    bd_task_id: str | None = None,
    orchestrator_note: str | None = None,
    now: datetime | None = None,
) -> PoolSnapshot:
    """Snapshot ``pool`` (and the task, when given) for one agent's prompt.

    Args:
        pool: the resource pool to describe.
        task_id: the task's id; with any task field set, the context carries a task.
        task_description: what the task is.
        required_capabilities: what the task needs; those with no available resource are recorded
            in ``missing_capabilities``.
        bd_task_id: the task's id in an external tracker.
        orchestrator_note: instructions from the orchestrator.
        now: the snapshot time (tests pin it); defaults to the current UTC time.
    """
    catalog = tuple(pool.capability_catalog())
    required = tuple(dict.fromkeys(required_capabilities or ()))
    has_task = any(v is not None for v in (task_id, task_description, bd_task_id)) or bool(required)
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    return PoolSnapshot(
        timestamp=moment.isoformat().replace("+00:00", "Z"),
        resource_pool=pool.summary(),
        available_capabilities=tuple(e.capability for e in catalog if e.available > 0),
        capability_to_resources={
            e.capability: list(e.available_resources) for e in catalog if e.available > 0
        },
        capability_catalog=catalog,
        task=TaskInfo(task_id, task_description, required, bd_task_id) if has_task else None,
        orchestrator_note=orchestrator_note.strip()
        if orchestrator_note and orchestrator_note.strip()
        else None,
        missing_capabilities=tuple(pool.missing(required)),
    )


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def context_to_system_prompt(ctx: PoolSnapshot) -> str:
    """Render ``ctx`` as markdown: pool status, capability table, task, shortage, note.

    Sections with nothing to say are left out (no table for an empty pool, no task section
    without a task).
    """
    pool = ctx.resource_pool
    sections = [
        "\n".join(
            [
                "## Resource pool status",
                f"- As of: {ctx.timestamp}",
                f"- Total resources: {pool.total}",
                f"- Available: {pool.available}",
                f"- Busy: {pool.busy}",
                f"- Error: {pool.error}",
            ]
        )
    ]
    if ctx.capability_catalog:
        rows = [
            "## Capability catalog",
            "",
            "| Capability | Available | Total | Available resource IDs |",
            "|---|---|---|---|",
        ]
        for entry in ctx.capability_catalog:
            ids = ", ".join(entry.available_resources) or "—"
            rows.append(f"| {_cell(entry.capability)} | {entry.available} | {entry.total} | {_cell(ids)} |")
        sections.append("\n".join(rows))
    if ctx.task is not None:
        task = ctx.task
        lines = ["## Current task"]
        if task.id:
            lines.append(f"- ID: {task.id}")
        if task.description:
            lines.append(f"- Description: {task.description}")
        if task.required_capabilities:
            lines.append(f"- Required capabilities: {', '.join(task.required_capabilities)}")
        if task.bd_task_id:
            lines.append(f"- Tracker task: {task.bd_task_id}")
        sections.append("\n".join(lines))
    if ctx.missing_capabilities:
        by_name = {e.capability: e for e in ctx.capability_catalog}
        short = []
        for cap in ctx.missing_capabilities:
            known = by_name.get(cap)
            short.append(f"- {cap}: 0 of {known.total if known else 0} available")
        sections.append(
            "\n".join(
                [
                    "## Missing capabilities",
                    *short,
                    "Do not dispatch this task: report which capabilities are missing, "
                    "and wait until resources are freed or added.",
                ]
            )
        )
    if ctx.orchestrator_note:
        sections.append(f"## Orchestrator note\n{ctx.orchestrator_note}")
    return "\n\n".join(sections)


def generate_dynamic_system_prompt(base_prompt: str, ctx: PoolSnapshot) -> str:
    """``base_prompt`` followed by the rendered context, separated by a blank line."""
    return f"{base_prompt}\n\n{context_to_system_prompt(ctx)}"
