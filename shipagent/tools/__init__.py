"""The builtin tools, one module per family, behind this curated surface.

- chat: ``chat_send`` (speak to the chat), ``chat_load_history`` (earlier transcript, injected as
  an assistant message before the user's message);
- agent context: ``agent_load_context`` (summaries of earlier runs, injected as a system message);
- skills: ``skills_list``, ``skills_load`` (a SKILL.md, injected as a system message);
- shell: ``exec_shell`` (permission policy, process-group timeout, capped output).

Every tool takes pydantic-ai's ``RunContext[TurnDeps]`` and reads its run from ``ctx.deps`` (the
same :class:`~shipagent.ToolExecutionContext` :func:`shipagent.current_tool_context` returns), and
reports failures as ``{"success": false, "error": ...}`` so the model can react instead of the run
dying.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_ai import Tool
from pydantic_ai.toolsets import FunctionToolset

from ..execution import ToolExecutionContext
from ..files import NO_SPILL_METADATA
from ..skills import render_skills_overview
from ._agent_context import agent_load_context
from ._chat import HistoryWindow, chat_load_history, chat_send, read_transcript_window
from ._loader import load_tool_modules
from ._sandbox import (
    SandboxLayout,
    SandboxPlan,
    SandboxStatus,
    bwrap_argv,
    plan_sandbox,
    sandbox_check_hook,
    sandbox_report,
    sandbox_status,
    warn_if_unsandboxed,
)
from ._shell import (
    OUTPUT_CAP_BYTES,
    ShellDecision,
    ShellRun,
    decide_exec_shell,
    exec_shell,
    request_approval,
    run_shell,
)
from ._shellwords import allow_blocker
from ._skills import SkillsCache, make_skills_tools

__all__ = [
    "BUILTIN_TOOL_NAMES",
    "OUTPUT_CAP_BYTES",
    "HistoryWindow",
    "SandboxLayout",
    "SandboxPlan",
    "SandboxStatus",
    "ShellDecision",
    "ShellRun",
    "SkillsCache",
    "allow_blocker",
    "builtin_toolset",
    "bwrap_argv",
    "decide_exec_shell",
    "load_tool_modules",
    "plan_sandbox",
    "read_transcript_window",
    "request_approval",
    "run_shell",
    "sandbox_check_hook",
    "sandbox_report",
    "sandbox_status",
    "skills_overview_source",
    "warn_if_unsandboxed",
]

BUILTIN_TOOL_NAMES: tuple[str, ...] = (
    "chat_send",
    "chat_load_history",
    "agent_load_context",
    "skills_list",
    "skills_load",
    "exec_shell",
)
"""The names of the tools :func:`builtin_toolset` provides (exactly these; tests pin them)."""


def builtin_toolset(*, skills_cache: SkillsCache | None = None) -> FunctionToolset[Any]:
    """A new toolset holding the builtin tools.

    Each call returns a fresh toolset with its own skills cache (or ``skills_cache``, shared with
    :func:`skills_overview_source` so the overview and ``skills_list`` agree), so two agents in one
    process never share state. The tools need a run's :class:`~shipagent.ToolExecutionContext`:
    ``ShipAgent.run`` passes it as the run's ``deps``; a plain pydantic-ai agent running them
    inside :func:`shipagent.execution.use_tool_context` gives them that one.
    """
    cache = skills_cache if skills_cache is not None else SkillsCache()
    # exec_shell bounds its own output and keeps the full text on disk: spilling its result again
    # would replace the head/tail view the model needs with a second, less useful preview.
    # sequential: a barrier. A model that asks for twelve commands in one response gets them one
    # after another, so the per-command limits (processes, output, /tmp) hold for the chat's turn
    # instead of multiplying by the number of parallel calls.
    shell = Tool(exec_shell, metadata=dict(NO_SPILL_METADATA), sequential=True)
    return FunctionToolset(
        [chat_send, chat_load_history, agent_load_context, *make_skills_tools(cache), shell],
        id="shipagent-builtin",
    )


def skills_overview_source(
    cache: SkillsCache, *, limit: int = 40
) -> Callable[[ToolExecutionContext], Awaitable[str]]:
    """An instruction source rendering the skills overview (``name — description``, up to ``limit``).

    It reads the same cache as ``skills_list``, so ``skills_list(refresh=True)`` also updates the
    overview of later runs, while ordinary runs do not rescan the skill directories.
    """

    async def skills_overview(ctx: ToolExecutionContext) -> str:
        return render_skills_overview(await cache.get(ctx.project_root, ctx.config), limit=limit)

    return skills_overview
