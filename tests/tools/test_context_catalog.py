"""Resource pool, capability catalog and agent context rendering."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from inline_snapshot import snapshot

from shipagent.config import parse_config
from shipagent.errors import NotFoundError
from shipagent.tools.context import (
    AgentInstanceMeta,
    Resource,
    ResourcePool,
    build_agent_context,
    context_to_system_prompt,
)
from shipagent.tools.context._capability_catalog import generate_dynamic_system_prompt
from shipagent.tools.context._pool import Capability, CapabilityEntry, ResourcePoolSummary
from shipagent.tools.context._providers import CapabilityCatalogProvider

NOW = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)


def caps(*names: str) -> tuple[Capability, ...]:
    return tuple(Capability(n, 5) for n in names)


def seed_pool() -> ResourcePool:
    """The specification's example: 5 resources, 3 available, 2 busy."""
    return ResourcePool(
        [
            Resource("executor-research", "agent", caps("web_search", "report_generation")),
            Resource("executor-general", "agent", caps("file_ops")),
            Resource("executor-coding", "agent", caps("file_ops", "code_generation")),
            Resource("executor-research-2", "agent", caps("web_search", "report_generation"), status="busy"),
            Resource("executor-files", "agent", caps("file_ops"), status="busy"),
        ]
    )


def test_summary_and_catalog_of_the_seed_pool() -> None:
    pool = seed_pool()
    assert pool.summary() == ResourcePoolSummary(total=5, available=3, busy=2, error=0)
    assert pool.capability_catalog() == [
        CapabilityEntry("web_search", 1, 2, ("executor-research",)),
        CapabilityEntry("file_ops", 2, 3, ("executor-general", "executor-coding")),
        CapabilityEntry("code_generation", 1, 1, ("executor-coding",)),
        CapabilityEntry("report_generation", 1, 2, ("executor-research",)),
    ]


def test_seed_example_rendered_as_markdown() -> None:
    ctx = build_agent_context(
        seed_pool(),
        task_id="task-1",
        task_description="Search for DeepSeek papers",
        required_capabilities=["web_search"],
        orchestrator_note="Use executor-research for this task; assigned resource: executor-research",
        now=NOW,
    )
    assert ctx.available_capabilities == ("web_search", "file_ops", "code_generation", "report_generation")
    assert ctx.capability_to_resources == {
        "web_search": ["executor-research"],
        "file_ops": ["executor-general", "executor-coding"],
        "code_generation": ["executor-coding"],
        "report_generation": ["executor-research"],
    }
    assert ctx.missing_capabilities == ()
    assert context_to_system_prompt(ctx) == snapshot(
        """\
## Resource pool status
- As of: 2026-11-22T03:00:00Z
- Total resources: 5
- Available: 3
- Busy: 2
- Error: 0

## Capability catalog

| Capability | Available | Total | Available resource IDs |
|---|---|---|---|
| web_search | 1 | 2 | executor-research |
| file_ops | 2 | 3 | executor-general, executor-coding |
| code_generation | 1 | 1 | executor-coding |
| report_generation | 1 | 2 | executor-research |

## Current task
- ID: task-1
- Description: Search for DeepSeek papers
- Required capabilities: web_search

## Orchestrator note
Use executor-research for this task; assigned resource: executor-research\
"""
    )


def test_missing_capabilities_are_recorded_and_rendered_so_the_orchestrator_reports() -> None:
    pool = seed_pool()
    pool.set_status("executor-research", "busy")
    ctx = build_agent_context(
        pool,
        task_id="t2",
        required_capabilities=["web_search", "file_ops", "translation", "web_search"],
        now=NOW,
    )
    assert ctx.missing_capabilities == ("web_search", "translation")
    assert "web_search" not in ctx.available_capabilities
    rendered = context_to_system_prompt(ctx)
    assert "| web_search | 0 | 2 | — |" in rendered
    assert rendered[rendered.index("## Current task") :] == snapshot(
        """\
## Current task
- ID: t2
- Required capabilities: web_search, file_ops, translation

## Missing capabilities
- web_search: 0 of 2 available
- translation: 0 of 0 available
Do not dispatch this task: report which capabilities are missing, and wait until resources are freed or added.\
"""
    )


def test_empty_pool_renders_only_the_status_section() -> None:
    ctx = build_agent_context(ResourcePool(), now=NOW)
    assert ctx.task is None
    assert context_to_system_prompt(ctx) == snapshot(
        """\
## Resource pool status
- As of: 2026-11-22T03:00:00Z
- Total resources: 0
- Available: 0
- Busy: 0
- Error: 0\
"""
    )


def test_generate_dynamic_system_prompt_is_base_blank_line_context() -> None:
    ctx = build_agent_context(ResourcePool(), now=NOW)
    assert generate_dynamic_system_prompt(
        "You orchestrate.", ctx
    ) == "You orchestrate.\n\n" + context_to_system_prompt(ctx)


def test_capabilities_come_from_tools_through_the_table_and_grant_tool_completes_them() -> None:
    pool = ResourcePool(
        capability_tools={"schedule_task": ["scheduler"], "file_ops": ["read_file", "write_file"]}
    )
    stored = pool.add_resource(Resource("worker", "agent", tools=("web_search", "read_file")))
    assert [c.type for c in stored.capabilities] == ["web_search"]  # read_file alone is not file_ops

    assert pool.grant_tool("worker", "write_file") == ["file_ops"]
    assert pool.grant_tool("worker", "write_file") == []  # already held
    assert pool.grant_tool("worker", "unrelated") == []
    assert pool.grant_tool("worker", "scheduler") == ["schedule_task"]
    assert [(e.capability, e.available, e.total) for e in pool.capability_catalog()] == [
        ("web_search", 1, 1),
        ("file_ops", 1, 1),
        ("schedule_task", 1, 1),
    ]
    with pytest.raises(NotFoundError, match="no resource 'ghost'"):
        pool.grant_tool("ghost", "scheduler")


def test_catalog_orders_table_capabilities_first_then_others_as_resources_bring_them() -> None:
    pool = ResourcePool(
        [
            Resource("a", "agent", caps("zeta", "report_generation")),
            Resource("b", "agent", caps("alpha", "web_search")),
        ]
    )
    assert [e.capability for e in pool.capability_catalog()] == [
        "web_search",
        "report_generation",
        "zeta",
        "alpha",
    ]


def test_pool_changes_bump_the_revision_and_errors_are_counted() -> None:
    pool = seed_pool()
    start = pool.revision
    pool.set_status("executor-general", "error")
    assert pool.summary() == ResourcePoolSummary(total=5, available=2, busy=2, error=1)
    removed = pool.remove_resource("executor-files")
    assert removed.id == "executor-files"
    assert pool.summary().total == 4
    assert pool.revision == start + 2
    assert pool.missing(["file_ops", "code_generation"]) == []
    pool.set_status("executor-coding", "busy")
    assert pool.missing(["file_ops", "code_generation"]) == ["file_ops", "code_generation"]
    with pytest.raises(ValueError, match="already in the pool"):
        pool.add_resource(Resource("executor-coding", "agent"))
    with pytest.raises(ValueError, match="status must be one of"):
        pool.set_status("executor-coding", "sleeping")  # type: ignore[arg-type]


def test_pool_from_config_has_a_resource_per_profile_with_shipjson_capabilities() -> None:
    config = parse_config(
        {
            "capabilities": {"triage": ["ticket_read", "ticket_label"]},
            "profiles": {
                "researcher": {"tools": ["web_search", "report_generator"]},
                "triager": {"tools": ["ticket_read", "ticket_label"]},
                "plain": {},
            },
        }
    )
    pool = ResourcePool.from_config(config)
    assert [(r.id, [c.type for c in r.capabilities]) for r in pool.resources] == [
        ("researcher", ["web_search", "report_generation"]),
        ("triager", ["triage"]),
        ("plain", []),
    ]


def test_agent_context_provider_renders_the_live_pool_each_time() -> None:
    pool = ResourcePool([Resource("worker", "agent", tools=("read_file",))])
    provider = CapabilityCatalogProvider(pool)
    meta = AgentInstanceMeta("orchestrator", "employee")
    before = provider.get_system_context("orchestrator", meta)
    assert "## Capability catalog" not in before
    # Between pool changes the rendering is reused byte for byte (a stable prompt prefix)
    assert provider.revision() == provider.revision()
    assert provider.get_system_context("orchestrator", meta) == before
    revision = provider.revision()

    pool.grant_tool("worker", "write_file")
    assert provider.revision() != revision
    after = provider.get_system_context("orchestrator", meta)
    assert "| file_ops | 1 | 1 | worker |" in after
