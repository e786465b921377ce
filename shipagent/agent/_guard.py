"""A toolset wrapper that turns a tool's exception into a failure result the model can read.

pydantic-ai lets any exception other than ``ModelRetry`` escape a tool and end the run. In a chat
runtime one broken tool must not cost the user the turn: the model
gets ``{"success": false, "error": "..."}`` and decides what to do next.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry
from pydantic_ai.toolsets import WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

__all__ = ["GuardedToolset"]

log = logging.getLogger("shipagent.tools")
_PASS_THROUGH = (ModelRetry, CallDeferred, ApprovalRequired)


@dataclass
class GuardedToolset(WrapperToolset[Any]):
    """Wraps any toolset; exceptions from its tools become ``{success: false, error}`` results."""

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        try:
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            log.warning("tool %s raised %s: %s", name, type(exc).__name__, exc)
            return {"success": False, "error": f"{name} failed: {type(exc).__name__}: {exc}"}
