"""Tools with effects outside the turn run as DBOS steps; read-only tools run inline.

A step's result is recorded, so a turn resumed after a crash does not run ``exec_shell`` or
``chat_send`` again: it gets the recorded result back. Read-only tools (the ``context_*`` readers,
skills, history and agent-context loaders) simply run again on replay — cheaper than a database
write per call, and they change nothing.

What a tool does to the run besides returning a value — texts it sent (``chat_send``) and
messages it injected (``inject_*_once``) — lives on the run's :class:`ToolExecutionContext`, which
a replay builds afresh. So a step records those effects with its result, and on replay the
wrapper lays them back onto the context: the resumed turn's later model requests carry the same
injections, and its transcript the same sent texts, as the first attempt's would have.

Tool calls run one at a time in durable mode (every tool is marked ``sequential``): DBOS numbers
steps in the order they start, and only a sequential order is the same on replay.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dbos import DBOS
from pydantic_ai import RunContext
from pydantic_ai.toolsets import ToolsetTool, WrapperToolset

from ..execution import InjectedMessage, _current

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
        run_ctx = _current.get()
        ran = False

        async def step() -> tuple[Any, list[str], list[InjectedMessage]]:
            nonlocal ran
            ran = True
            sent_before = len(run_ctx.sent_texts) if run_ctx is not None else 0
            injected_before = len(run_ctx.injected) if run_ctx is not None else 0
            result = await self.wrapped.call_tool(name, tool_args, ctx, tool)
            if run_ctx is None:
                return result, [], []
            return result, run_ctx.sent_texts[sent_before:], list(run_ctx.injected[injected_before:])

        result, sent, injected = await DBOS.run_step_async({"name": f"shipagent.tool.{name}"}, step)
        if not ran and run_ctx is not None:  # replayed: lay the recorded effects back onto this run
            run_ctx.sent_texts.extend(sent)
            for item in injected:
                if item.role == "system":
                    run_ctx.inject_system_message_once(item.content, fingerprint=item.fingerprint)
                else:
                    run_ctx.inject_assistant_message_once(item.content, fingerprint=item.fingerprint)
        return result
