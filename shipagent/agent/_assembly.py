"""What a turn's parts are made of: the toolsets a run offers, its instructions, its context window.

Functions of what they are given, so the agent (``agent.py``) only says which of its pieces go in:
the order of the toolsets and their wrappers, how the instructions are put together, and how
ship.json ``context`` configures each run's :class:`~shipagent.window.placement.ContextWindow`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from pydantic_ai.toolsets import AbstractToolset

from ..config import ContextConfig
from ..tools._injections import InjectionToolset
from ..tools.execution import ToolExecutionContext
from ..tools.files._spill import SpillToolset
from ..window.placement import ContextWindow, PriorItems, RequestObserver
from ..window.tokens import TokenCalibration
from . import instructions as _instructions
from ._combined import SequentialCombinedToolset
from ._guard import GuardedToolset

__all__ = ["build_instructions", "context_window", "guarded", "one_toolset"]


def guarded(toolsets: Sequence[AbstractToolset[Any]]) -> list[AbstractToolset[Any]]:
    """Every toolset of a run behind one guard, one spill and one injection carrier.

    The wrappers go around all of them once (per tool call they act alike), not around each:
    pydantic-ai walks every wrapper layer for tools and instructions on every model request. The
    guard turns a crash into a failure result, the spill keeps a big result as a context file,
    and the outermost carries each call's injections with its result (``history.injections``).
    """
    combined = SequentialCombinedToolset(list(toolsets))
    return [InjectionToolset(GuardedToolset(SpillToolset(combined)))]


def one_toolset(toolsets: list[AbstractToolset[Any]]) -> AbstractToolset[Any]:
    """The toolsets as one: itself when there is one (pydantic-ai walks every layer per request)."""
    return toolsets[0] if len(toolsets) == 1 else SequentialCombinedToolset(toolsets)


async def build_instructions(
    agent_md: str,
    now: datetime,
    sources: Sequence[_instructions.InstructionSource],
    ctx: ToolExecutionContext,
) -> str:
    """``Agent.md``'s text, the default prompt dated ``now``, then ``sources``."""
    parts = [agent_md, _instructions.default_prompt(now)]
    parts.extend(await _instructions.collect(list(sources), ctx))
    return "\n\n".join(p for p in parts if p)


def context_window(
    context: ContextConfig,
    chat_key: str,
    *,
    keep_result: Callable[[str, str, str], str],
    history_sources: list[str],
    observer: RequestObserver | None,
    calibration: TokenCalibration,
    prior_items: PriorItems,
    on_room: Callable[[int], None] | None = None,
) -> ContextWindow:
    """One run's context-window capability, configured from ship.json ``context``."""
    return ContextWindow(
        context.chat_history.max_history_tokens,
        max_injected_messages=context.injection.max_injected_messages,
        max_tokens=context.budget.max_tokens,
        reserve_output=context.budget.reserve_output,
        section_caps=context.budget.sections.model_dump(exclude_none=True, by_alias=True),
        keep_result=keep_result,
        history_sources=history_sources,
        observer=observer,
        calibration=calibration,
        chat_key=chat_key,
        prior_items=prior_items,
        on_room=on_room,
    )
