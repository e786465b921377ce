"""``SequentialCombinedToolset``: pydantic-ai's ``CombinedToolset`` without a task per child.

``CombinedToolset`` asks its children for ``for_run``, ``for_run_step`` and ``get_tools`` through
an anyio task group that spawns a task per child — several times per model request. shipagent's
children are a handful of local toolsets whose answers are already in memory, so the task
machinery costs more than the work. Awaiting the children one after another gives the same
results in the same order; a child that does I/O (the MCP manager's toolset) still does its own
fan-out inside.

Only public API is used: the overridden methods are the public ``AbstractToolset`` ones, the
tools it lists carry their source in :class:`CombinedTool` (its own ``ToolsetTool``), and the
instruction collection — whose attribution rules live in pydantic-ai's private helpers — is
inherited unchanged (it still fans out per request; a public "await children in order" switch
on ``CombinedToolset`` is what would let it stop).

A plain ``FunctionToolset`` child whose tools have no ``prepare`` function lists the same tools
on every request: its ``get_tools`` copies the run context once per tool to hand it to a
``prepare`` that does not exist. :func:`_function_tools` keeps that listing and hands it out
again while every tool is the same object with an equal definition (the check builds each
definition, which is cheap; the copies are what cost).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, replace
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.exceptions import UserError
from pydantic_ai.tools import Tool, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, CombinedToolset, FunctionToolset, ToolsetTool

from .._cache import BoundedCache

__all__ = ["CombinedTool", "SequentialCombinedToolset"]

_Listing = tuple[
    "weakref.ref[AbstractToolset[Any]]",
    list[tuple[str, Tool[Any], ToolDefinition]],
    tuple[int | None, int],
    dict[str, ToolsetTool[Any]],
]
_listings: BoundedCache[int, _Listing] = BoundedCache(256)
"""``id(toolset)`` -> (weak reference, its tools and their definitions, retry settings, listing);
bounded, as the toolsets of agents that are gone leave their entries behind."""


def _same_tools(toolset: FunctionToolset[Any], known: list[tuple[str, Tool[Any], ToolDefinition]]) -> bool:
    tools = toolset.tools
    if len(tools) != len(known):
        return False
    for (name, tool), (known_name, known_tool, known_def) in zip(tools.items(), known, strict=True):
        if name != known_name or tool is not known_tool or tool.prepare is not None:
            return False
        if tool.tool_def != known_def:  # an attribute of the tool was changed since
            return False
    return True


async def _function_tools(toolset: AbstractToolset[Any], ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
    """``toolset.get_tools(ctx)``, remembered for a plain ``FunctionToolset`` without ``prepare``."""
    if type(toolset) is not FunctionToolset:
        return await toolset.get_tools(ctx)
    retries = (toolset.max_retries, ctx.max_retries)
    found = _listings.get(id(toolset))
    if found is not None and found[0]() is toolset and found[2] == retries and _same_tools(toolset, found[1]):
        return found[3]
    tools = await toolset.get_tools(ctx)
    if all(t.prepare is None for t in toolset.tools.values()):
        known = [(name, tool, tool.tool_def) for name, tool in toolset.tools.items()]
        _listings[id(toolset)] = (weakref.ref(toolset), known, retries, tools)
    return tools


@dataclass(kw_only=True)
class CombinedTool(ToolsetTool[Any]):
    """A tool listed by :class:`SequentialCombinedToolset`: the child toolset and tool it came from."""

    source_toolset: AbstractToolset[Any]
    source_tool: ToolsetTool[Any]


@dataclass
class SequentialCombinedToolset(CombinedToolset[Any]):
    """A ``CombinedToolset`` that awaits its children in order instead of in parallel tasks."""

    async def for_run(self, ctx: RunContext[Any]) -> AbstractToolset[Any]:
        return replace(self, toolsets=[await t.for_run(ctx) for t in self.toolsets])

    async def for_run_step(self, ctx: RunContext[Any]) -> AbstractToolset[Any]:
        new = [await t.for_run_step(ctx) for t in self.toolsets]
        if all(a is b for a, b in zip(new, self.toolsets, strict=True)):
            return self
        return replace(self, toolsets=new)

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        # CombinedToolset.get_tools with the children awaited in order; the merge is unchanged.
        # pydantic-ai stamps a tool's ``toolset_id`` with its toolset's *chosen* id, which only a
        # private property tells apart from a derived one; shipagent gives every toolset that has
        # an id (MCP servers: the server name) that id itself, so the public ``id`` is the same.
        all_tools: dict[str, ToolsetTool[Any]] = {}
        for toolset in self.toolsets:
            for name, tool in (await _function_tools(toolset, ctx)).items():
                tool_toolset = tool.toolset
                if existing := all_tools.get(name):
                    label = tool_toolset.label[0].upper() + tool_toolset.label[1:]
                    raise UserError(
                        f"{label} defines a tool whose name conflicts with existing tool from "
                        f"{existing.toolset.label}: {name!r}. {toolset.tool_name_conflict_hint}"
                    )
                tool_def = tool.tool_def
                if tool_def.toolset_id is None and (toolset_id := tool_toolset.id) is not None:
                    tool_def = replace(tool_def, toolset_id=toolset_id)
                all_tools[name] = CombinedTool(
                    toolset=tool_toolset,
                    tool_def=tool_def,
                    max_retries=tool.max_retries,
                    args_validator=tool.args_validator,
                    args_validator_func=tool.args_validator_func,
                    source_toolset=toolset,
                    source_tool=tool,
                )
        return all_tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if not isinstance(tool, CombinedTool):  # listed by another toolset: pydantic-ai's own routing
            return await super().call_tool(name, tool_args, ctx, tool)
        # As CombinedToolset.call_tool: dispatch with the tool_def we were handed (a wrapper may
        # have changed it), with the source toolset's own toolset_id given back.
        source_def = replace(tool.tool_def, toolset_id=tool.source_tool.tool_def.toolset_id)
        return await tool.source_toolset.call_tool(
            name, tool_args, ctx, replace(tool.source_tool, tool_def=source_def)
        )
