"""``CatalogToolset``: keep each chat's ``catalog`` context file equal to what the agent can use.

The catalog (a context file of kind ``catalog``) lists the skills and tools available to the agent,
so a model can ``context_grep`` it instead of the instructions carrying every description. The
wrapper sees the real tool list of every run step (MCP servers come and go, skills are added) and
rewrites the file only when the rendered text changes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import anyio
from pydantic_ai import RunContext
from pydantic_ai.toolsets import ToolsetTool, WrapperToolset

from ...errors import ShipAgentError
from ...store.files._catalog_memo import already_written, forget_catalog, remember_catalog, remembered_catalog
from ...store.files._render import render_catalog
from ...store.files._store import CATALOG_ID, ContextFiles
from .._deps import run_of
from ..execution import ToolExecutionContext
from ._tools import context_files_for

__all__ = ["CatalogToolset", "SkillsSource", "forget_catalog"]

log = logging.getLogger("shipagent.tools.files")

SkillsSource = Callable[[ToolExecutionContext], Awaitable[Iterable[Any]]]
"""Returns the agent's skills: objects with ``name`` and ``description``, or ``(name, description)``."""


def _sync_catalog(files: ContextFiles, chat_key: str, text: str, description: str) -> None:
    key = str(files.folder(chat_key))
    current = files.list(chat_key, kind="catalog", limit=1)
    stamp = current[0].created_at if current else ""
    if remembered_catalog(key) == (text, stamp):
        return
    ref = files.set_catalog(chat_key, text, description=description)
    remember_catalog(key, text, ref.created_at)


def _pair(skill: Any) -> tuple[str, str]:
    if isinstance(skill, tuple):
        return str(skill[0]), str(skill[1])
    return str(skill.name), str(getattr(skill, "description", "") or "")


@dataclass
class CatalogToolset(WrapperToolset[Any]):
    """Wrap the agent's combined toolset; write the chat's catalog file when its tools change.

    Attributes:
        skills: where the skills come from (the agent's skills cache); ``None`` lists tools only.
    """

    skills: SkillsSource | None = None

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await self.wrapped.get_tools(ctx)
        run = run_of(ctx)
        if run is None:  # outside any run: nothing to write to
            return tools
        try:
            skills = [_pair(s) for s in await self.skills(run)] if self.skills else []
            rows = sorted((name, tool.tool_def.description or "") for name, tool in tools.items())
            text = render_catalog(skills=skills, tools=rows)
            files = context_files_for(run)
            if already_written(str(files.folder(run.chat_key)), text):
                return tools  # the hot path: every model request of every turn, no thread hop
            description = f"{len(skills)} skills, {len(rows)} tools available to this agent"
            async with files.session(run.chat_key, read=CATALOG_ID) as local:
                await anyio.to_thread.run_sync(lambda: _sync_catalog(local, run.chat_key, text, description))
        except (ShipAgentError, OSError) as exc:  # a stale catalog must never cost the turn
            log.error("could not write the catalog of %r: %s", run.chat_key, exc)
        return tools
