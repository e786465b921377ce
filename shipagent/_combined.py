"""``SequentialCombinedToolset``: pydantic-ai's ``CombinedToolset`` without a task per child.

``CombinedToolset`` asks its children for ``for_run``, ``for_run_step``, ``get_tools`` and their
instructions through ``pydantic_ai._utils.gather``, which opens an anyio task group and spawns a
task per child — several times per model request. shipagent's children are a handful of local
toolsets whose answers are already in memory, so the task machinery costs more than the work
(about 1.5 ms of CPU per turn in ``bench/turn_profile.py``). Awaiting the children one after
another gives the same results in the same order; a child that does I/O (the MCP manager's
toolset) still does its own fan-out inside.

This reaches into pydantic-ai's private instruction-relay helpers to keep its attribution rules
exactly; pydantic-ai is pinned ``<3`` and the agent tests cover toolset instructions and tools.

A plain ``FunctionToolset`` child whose tools have no ``prepare`` function lists the same tools
on every request: its ``get_tools`` copies the run context once per tool to hand it to a
``prepare`` that does not exist. :func:`_function_tools` keeps that listing and hands it out
again while every tool is the same object with an equal definition (the check builds each
definition, which is cheap; the copies are what cost).

:class:`ToolLoopAgent` removes the last fan-out: pydantic-ai combines the agent's own function
toolset with the toolset a run passes, and shipagent's function toolset is always empty.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.exceptions import UserError
from pydantic_ai.tools import Tool, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, CombinedToolset, FunctionToolset, ToolsetTool
from pydantic_ai.toolsets._instruction_collection import RELAYS, InstructionContribution, RelayedPart
from pydantic_ai.toolsets.combined import _CombinedToolsetTool

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pydantic_ai.toolsets import AgentToolset

__all__ = ["SequentialCombinedToolset", "ToolLoopAgent"]

_Listing = tuple[
    "weakref.ref[AbstractToolset[Any]]",
    list[tuple[str, Tool[Any], ToolDefinition]],
    tuple[int | None, int],
    dict[str, ToolsetTool[Any]],
]
_listings: dict[int, _Listing] = {}
"""``id(toolset)`` -> (weak reference, its tools and their definitions, retry settings, listing)."""


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
        if len(_listings) > 256:  # toolsets of agents that are gone
            _listings.clear()
        _listings[id(toolset)] = (weakref.ref(toolset), known, retries, tools)
    return tools


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
                if tool_def.toolset_id is None and (toolset_id := tool_toolset._explicit_id) is not None:
                    tool_def = replace(tool_def, toolset_id=toolset_id)
                all_tools[name] = _CombinedToolsetTool(
                    toolset=tool_toolset,
                    tool_def=tool_def,
                    max_retries=tool.max_retries,
                    args_validator=tool.args_validator,
                    args_validator_func=tool.args_validator_func,
                    source_toolset=toolset,
                    source_tool=tool,
                )
        return all_tools

    async def _collect_child_instruction_contributions(
        self, ctx: RunContext[Any]
    ) -> list[InstructionContribution[Any]]:
        contributions = [
            contribution
            for child in self._instruction_children()
            for contribution in await child._collect_instruction_contributions(ctx)
        ]
        if (relays := RELAYS.get()) is not None and relays.covers(self):  # as AbstractToolset does
            relays.parts.update(
                (id(part), RelayedPart(c.source, c.source_id, part, replace(part)))
                for c in contributions
                for part in c.parts
            )
        return contributions


class ToolLoopAgent(Agent[None, str]):
    """pydantic-ai's ``Agent`` that leaves its own function toolset out while it holds no tool.

    shipagent offers every tool through the one toolset each run passes, so the agent's function
    toolset (for ``@agent.tool``) stays empty. pydantic-ai still combines it with the run's
    toolset, and a ``CombinedToolset`` of two children fans out through an anyio task group on
    ``for_run``, ``for_run_step``, ``get_tools`` and the instruction collection of every model
    request (~0.25 ms of CPU a turn in ``bench/turn_overhead.py``). With the empty toolset left
    out the combination has one child, which pydantic-ai awaits directly. A tool added to the
    function toolset brings it back.
    """

    def _build_toolset_list(
        self,
        cap_toolsets: Sequence[AgentToolset[None]] | None = None,
        *,
        ignore_overrides: bool = False,
    ) -> list[AbstractToolset[None]]:
        toolsets = super()._build_toolset_list(cap_toolsets, ignore_overrides=ignore_overrides)
        own = self._function_toolset
        return [t for t in toolsets if t is not own or own.tools]
