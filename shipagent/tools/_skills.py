"""``skills_list`` and ``skills_load``: the model pulls a skill's instructions in when it needs them.

The overview in the instructions names every skill in one line; ``skills_load`` injects the whole
``SKILL.md`` as a **system** message, because a skill is a set of rules to follow, not conversation.
The tool returns only the skill's metadata: the text is already in context once, and sending it a
second time in the tool result would double its cost.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Annotated, Any

import anyio.to_thread
from pydantic import Field
from pydantic_ai import RunContext

from ..config import ShipConfig
from ._common import failure
from ._deps import TurnDeps, deps_of
from .skills import Skill, find_skill, scan_skills

__all__ = ["SkillsCache", "make_skills_tools"]

_MAX_SKILL_CHARS = 60000


@functools.lru_cache(maxsize=64)
def _resolved(root: Path) -> Path:
    """``root.resolve()`` once per project root: the catalog and the instructions ask every turn."""
    return root.resolve()


class SkillsCache:
    """Discovered skills per project, rescanned on ``refresh`` or when a lookup misses.

    Scanning walks a few directories and parses YAML; caching keeps it off every tool call while a
    miss or ``skills_list(refresh=True)`` picks up skills added while the agent runs.
    """

    def __init__(self, *, only: Sequence[str] | None = None) -> None:
        self._by_root: dict[tuple[Path, tuple[str, ...], bool], list[Skill]] = {}
        self.only: tuple[str, ...] | None = tuple(only) if only is not None else None
        """Skill ids or names this agent may use (a profile's ``skills``); ``None`` means all."""

    @staticmethod
    def _key(root: Path, config: ShipConfig) -> tuple[Path, tuple[str, ...], bool]:
        return _resolved(root), tuple(config.skills.paths), config.skills.allow_external_paths

    async def get(self, root: Path, config: ShipConfig, *, refresh: bool = False) -> list[Skill]:
        key = self._key(root, config)
        if refresh or key not in self._by_root:
            scan = await anyio.to_thread.run_sync(scan_skills, root, config)
            self._by_root[key] = scan.skills
        skills = self._by_root[key]
        if self.only is None:
            return skills
        return [s for s in skills if s.id in self.only or s.name in self.only]


def _describe(skill: Skill, root: Path) -> dict[str, Any]:
    try:
        shown = skill.path.relative_to(root).as_posix()
    except ValueError:
        shown = str(skill.path)
    return {"id": skill.id, "name": skill.name, "description": skill.description, "path": shown}


def make_skills_tools(cache: SkillsCache) -> list[Any]:
    """The two skills tools bound to ``cache`` (one cache per builtin toolset)."""

    async def skills_list(run: RunContext[TurnDeps], refresh: bool = False) -> dict[str, Any]:
        """List the skills available in this project.

        Args:
            refresh: rescan the skill directories (after skills were added or edited).
        """
        ctx = deps_of(run).tool
        skills = await cache.get(ctx.project_root, ctx.config, refresh=refresh)
        return {
            "success": True,
            "skills": [
                {
                    "id": s.id,
                    "name": s.name,
                    "description": s.description,
                    "allowedTools": list(s.allowed_tools),
                }
                for s in skills
            ],
        }

    async def skills_load(
        run: RunContext[TurnDeps], name: Annotated[str, Field(min_length=1, max_length=200)]
    ) -> dict[str, Any]:
        """Load a skill's full instructions (its SKILL.md) into your system context, then follow them.

        Args:
            name: the skill's id or name (a unique part of it also works).
        """
        ctx = deps_of(run).tool
        skills = await cache.get(ctx.project_root, ctx.config)
        found = find_skill(skills, name)
        if found is None:
            skills = await cache.get(ctx.project_root, ctx.config, refresh=True)
            found = find_skill(skills, name)
        if found is None:
            known = ", ".join(s.id for s in skills) or "none"
            return failure(f"no skill matches '{name}'; available: {known}")
        if isinstance(found, list):
            return failure(f"'{name}' matches several skills: {', '.join(s.id for s in found)}; use an id")
        try:
            content = await anyio.to_thread.run_sync(found.read)
        except (OSError, UnicodeDecodeError) as exc:
            return failure(f"cannot read {found.path}: {exc}")
        digest = hashlib.sha1(content.encode("utf-8")).hexdigest()
        body = content if len(content) <= _MAX_SKILL_CHARS else content[:_MAX_SKILL_CHARS] + "\n[… truncated]"
        described = _describe(found, ctx.project_root)
        directory = PurePosixPath(described["path"]).parent
        message = (
            f"[Skill loaded: {found.name} (id: {found.id})] Files it mentions are relative to "
            f"{directory}/\n\n{body}"
        )
        result = ctx.inject_system_message_once(message, fingerprint=f"skill:{found.id}:{digest}")
        out: dict[str, Any] = {"success": True, "inserted": int(result.inserted), "skill": described}
        if result.reason is not None:
            out["reason"] = result.reason
        return out

    return [skills_list, skills_load]
