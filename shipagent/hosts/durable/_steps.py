"""Tools with effects outside the turn run as DBOS steps; read-only tools run inline.

A step's result is recorded, so a turn resumed after a crash does not run ``exec_shell`` or
``chat_send`` again: it gets the recorded result back. Read-only tools (the ``context_*`` readers,
skills, history and agent-context loaders) simply run again on replay — cheaper than a database
write per call, and they change nothing.

Messages a tool injects need nothing here: they travel in the call's ``ToolReturn`` metadata
(``shipagent.window.injections``), so the recorded result carries them and the context window
rebuilds them on replay. Texts a tool *sent* (``chat_send``) live on the run's
:class:`ToolExecutionContext`, which a replay builds afresh, so the step records them with its
result and the wrapper lays them back: the resumed turn's transcript has the same sent texts as
the first attempt's would have had.

A tool step is preemptible: when its workflow is cancelled (``/stop`` of a chat channel), DBOS
stops the call (it polls for cancellations about once a second), as a cancelled in-process turn
stops its running tool; nothing of a stopped call is recorded.

Tool calls run one at a time in durable mode (every tool is marked ``sequential``): DBOS numbers
steps in the order they start, and only a sequential order is the same on replay.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dbos import DBOS
from pydantic_ai import RunContext
from pydantic_ai.toolsets import ToolsetTool, WrapperToolset

from ...tools._deps import TurnDeps

__all__ = ["READ_ONLY_TOOLS", "StepToolset"]

READ_ONLY_TOOLS = frozenset(
    {
        "chat_load_history",
        "agent_load_context",
        "skills_list",
        "skills_load",
        "context_list",
        "context_read",
        "context_tail",
        "context_grep",
        "delegation_result",
    }
)
"""Builtin tools that only read: they run inline and are simply re-run on replay."""


class StepToolset(WrapperToolset[Any]):
    """Run each call of a tool with effects as a named DBOS step (inline outside a workflow)."""

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await super().get_tools(ctx)
        return {
            name: replace(tool, tool_def=replace(tool.tool_def, sequential=True))
            for name, tool in tools.items()
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if name in READ_ONLY_TOOLS:
            return await super().call_tool(name, tool_args, ctx, tool)
        run_ctx = ctx.deps.tool if isinstance(ctx.deps, TurnDeps) else None
        ran = False

        async def step() -> tuple[Any, list[str]]:
            nonlocal ran
            ran = True
            sent_before = len(run_ctx.sent_texts) if run_ctx is not None else 0
            result = await self.wrapped.call_tool(name, tool_args, ctx, tool)
            return result, (run_ctx.sent_texts[sent_before:] if run_ctx is not None else [])

        result, sent = await DBOS.run_step_async(
            {"name": f"shipagent.tool.{name}", "preemptible": True}, step
        )
        if not ran and run_ctx is not None:  # replayed: lay the recorded sent texts back onto this run
            run_ctx.sent_texts.extend(sent)
        return result
