"""Injections as data on the tool call that made them: the toolset wrapper that records them.

A tool asks for an injection through its tool execution context
(``inject_system_message_once``); :class:`InjectionToolset` wraps the agent's toolset so that what
each call asked for comes back in that call's ``ToolReturn`` metadata, from where the context
window (:mod:`shipagent.window.injections`) places it in every later request of the run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.messages import ToolReturn
from pydantic_ai.toolsets import ToolsetTool, WrapperToolset

from ..window.injections import INJECTIONS_KEY, InjectedMessage
from ._deps import TurnDeps
from .execution import collect_call_injections

__all__ = ["InjectionToolset", "attach_injections"]


def attach_injections(result: Any, injected: Sequence[InjectedMessage]) -> Any:
    """``result`` as a ``ToolReturn`` whose metadata also records ``injected``.

    A tool that already returns a ``ToolReturn`` keeps its value, content and metadata; dict
    metadata gains the key, other metadata is kept under ``"tool"`` beside it.
    """
    if not injected:
        return result
    records = [m.to_json() for m in injected]
    if isinstance(result, ToolReturn):
        meta = result.metadata
        if meta is None:
            merged: Any = {INJECTIONS_KEY: records}
        elif isinstance(meta, dict):
            merged = {**meta, INJECTIONS_KEY: [*meta.get(INJECTIONS_KEY, []), *records]}
        else:
            merged = {"tool": meta, INJECTIONS_KEY: records}
        return dataclasses.replace(result, metadata=merged)
    return ToolReturn(return_value=result, metadata={INJECTIONS_KEY: records})


@dataclass
class InjectionToolset(WrapperToolset[Any]):
    """Wrap a toolset so each tool call's injections come back in its result's metadata.

    The collecting list is the call's own scope of the run's context (see
    :func:`~shipagent.tools.execution.collect_call_injections`): pydantic-ai runs each tool call of a
    step in its own task (a context copy), so concurrent calls never see each other's injections. An injection made by a call that then raises ``ModelRetry`` is lost with the
    call's result (the retry is a new call that may inject again — dedupe allows it then only if
    the fingerprint differs).
    """

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        run = ctx.deps.tool if isinstance(ctx.deps, TurnDeps) else None
        with collect_call_injections(run) as injected:
            result = await self.wrapped.call_tool(name, tool_args, ctx, tool)
        return attach_injections(result, injected)
