"""The builtin tools, one module per family, behind this curated surface.

- chat: ``chat_send`` (speak to the chat), ``chat_send_file`` (a project file into the chat, where
  the chat's channel takes files), ``chat_load_history`` (earlier transcript, injected as an
  assistant message before the user's message);
- the agent-context log: ``agent_load_context`` (summaries of earlier turns, injected as a system
  message);
- skills: ``skills_list``, ``skills_load`` (a SKILL.md, injected as a system message);
- shell: ``exec_shell`` (permission policy, process-group timeout, capped output).

Every tool takes pydantic-ai's ``RunContext[TurnDeps]`` and reads its run from ``ctx.deps`` (the
same :class:`~shipagent.ToolExecutionContext` :func:`shipagent.current_tool_context` returns), and
reports failures as ``{"success": false, "error": ...}`` so the model can react instead of the run
dying.

The other tools have packages of their own here: :mod:`.files` (context files), :mod:`.handover`
(work handed to other agents), :mod:`.mcp` (MCP servers), :mod:`.context` (context providers and
the capability catalog), and :mod:`.skills` reads a project's ``skills/``.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import Tool
from pydantic_ai.toolsets import FunctionToolset

from ._agent_context import agent_load_context
from ._chat import chat_load_history, chat_send
from ._loader import load_tool_modules
from ._sandbox import sandbox_check_hook, sandbox_report, warn_if_unsandboxed
from ._send_file import chat_send_file
from ._shell import ShellDecision, decide_exec_shell, exec_shell, request_approval
from ._skills import SkillsCache, make_skills_tools
from .files._tools import NO_SPILL_METADATA

__all__ = [
    "BUILTIN_TOOL_NAMES",
    "ShellDecision",
    "SkillsCache",
    "builtin_toolset",
    "decide_exec_shell",
    "load_tool_modules",
    "request_approval",
    "sandbox_check_hook",
    "sandbox_report",
    "warn_if_unsandboxed",
]

BUILTIN_TOOL_NAMES: tuple[str, ...] = (
    "chat_send",
    "chat_send_file",
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
    the agent's skills overview so the overview and ``skills_list`` agree), so two agents in one
    process never share state. The tools need a run's :class:`~shipagent.ToolExecutionContext`:
    ``ShipAgent.run`` passes it as the run's ``deps``; a plain pydantic-ai agent running them
    inside :func:`shipagent.tools.execution.use_tool_context` gives them that one.
    """
    cache = skills_cache if skills_cache is not None else SkillsCache()
    # exec_shell bounds its own output and keeps the full text on disk: spilling its result again
    # would replace the head/tail view the model needs with a second, less useful preview.
    # sequential: a barrier. A model that asks for twelve commands in one response gets them one
    # after another, so the per-command limits (processes, output, /tmp) hold for the chat's turn
    # instead of multiplying by the number of parallel calls.
    shell = Tool(exec_shell, metadata=dict(NO_SPILL_METADATA), sequential=True)
    return FunctionToolset(
        [chat_send, chat_send_file, chat_load_history, agent_load_context, *make_skills_tools(cache), shell],
        id="shipagent-builtin",
    )
