"""The built-in providers: core identity, skills overview."""

from __future__ import annotations

from pathlib import Path

import pytest
from inline_snapshot import snapshot

from shipagent.config import ShipConfig
from shipagent.tools.context import AgentInstanceMeta, SessionContextInjector
from shipagent.tools.context._providers import CoreContextProvider, SkillsContextProvider

pytestmark = pytest.mark.anyio


def test_core_identity_renders_the_template_with_the_agent_meta() -> None:
    meta = AgentInstanceMeta("my-agent", "employee", backend_type="shipagent", workspace_policy="ephemeral")
    assert CoreContextProvider().get_system_context("my-agent", meta) == snapshot(
        """\
## Agent identity
You are **my-agent** (archetype: employee): you take on whole jobs on your own, plan them, and hand parts to other agents when that is faster.
Backend: shipagent; workspace: ephemeral.

## Platform
- Each conversation has its own chat key and history; older turns are compacted into a summary and stay on disk, so load them with your history tools instead of guessing.
- Large outputs are kept as context files; list, read, tail or grep them rather than asking for them again.
- Skills are playbooks in the project: load a skill before doing the work it describes.
- Tool failures come back to you as results; read them and adapt rather than repeating the same call.\
"""
    )


def write_skill(root: Path, skill_id: str, description: str) -> None:
    folder = root / "skills" / skill_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(f"---\nname: {skill_id}\ndescription: {description}\n---\nBody.\n")


async def test_skills_provider_lists_the_projects_skills_and_follows_changes_on_disk(tmp_path: Path) -> None:
    injector = SessionContextInjector()
    injector.register(SkillsContextProvider(tmp_path, ShipConfig()))
    meta = AgentInstanceMeta("bot")

    assert (await injector.session_context("bot", meta, "chat")).system_context_additions == ()

    write_skill(tmp_path, "release", "Cut a release.")
    additions = (await injector.session_context("bot", meta, "chat")).system_context_additions
    assert additions == (
        "## Skills\n"
        "Skills are task-specific instructions kept on disk. When a request matches a skill below, "
        "call `skills_load` with its id before acting, then follow it; `skills_list` lists them all.\n\n"
        "- release — Cut a release.",
    )
    # unchanged skills: the cached context (and its token) is reused
    assert (await injector.session_context("bot", meta, "chat")).system_context_additions is additions


async def test_skills_provider_takes_any_overview_callable_sync_or_async() -> None:
    meta = AgentInstanceMeta("bot")
    provider = SkillsContextProvider(overview=lambda: "## Skills\n- x — y")
    assert await provider.get_system_context("bot", meta) == "## Skills\n- x — y"
    assert await SkillsContextProvider(overview=lambda: "  ").get_system_context("bot", meta) is None

    async def from_cache() -> str:
        return "## Skills\n- cached — from the agent's cache"

    assert await SkillsContextProvider(overview=from_cache).get_system_context("bot", meta) == (
        "## Skills\n- cached — from the agent's cache"
    )
    with pytest.raises(ValueError, match="needs project_root and config"):
        SkillsContextProvider()
