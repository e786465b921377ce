"""``SpillToolset``: wrap any toolset so an oversized tool result becomes a context file.

A 2 MB shell output sent to the model as-is either blows the context window or gets truncated
and lost. Wrapped, a result larger than ``context.files.spillThresholdBytes`` (ship.json, default
16384) is written to an ``artifact`` file and the model gets a ~2 KB preview — head, tail, the ref
id, the size and a hint to page with ``context_read`` / ``context_tail`` / ``context_grep``.

Structure survives where it matters: for a dict result (``{"stdout": ..., "stderr": ..., "exit_code":
0}``) each oversized string field is spilled on its own, as readable text with real newlines, and
the dict keeps its other keys (``success`` included); only if it is still too big is the whole
JSON spilled. Tools whose definition carries :data:`NO_SPILL_METADATA` (the context tools, whose
results are bounded pages) are never spilled.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import anyio
import pydantic
import pydantic_core
from pydantic_ai import RunContext
from pydantic_ai.messages import ToolReturn
from pydantic_ai.toolsets import ToolsetTool, WrapperToolset

from ...errors import ShipAgentError
from ...store.files._ref import ContextRef
from ...store.files._render import render_preview
from ...store.files._store import ContextFiles
from .._deps import run_of
from ._tools import CONTEXT_TOOL_NAMES, NO_SPILL_METADATA, context_files_for

__all__ = ["SpillToolset", "spill_text", "spill_value"]

log = logging.getLogger("shipagent.tools.files")

_json = pydantic.TypeAdapter[Any](
    Any, config=pydantic.ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")
)
_PREVIEW_BUDGET = 2048


def _json_text(value: Any) -> str:
    """The JSON text pydantic-ai would send for a non-``str`` result."""
    return _json.dump_json(value, by_alias=True).decode("utf-8")


def spill_text(
    files: ContextFiles,
    chat_key: str,
    text: str,
    *,
    name: str,
    source: str,
    threshold: int,
    mime: str = "text/plain",
) -> tuple[ContextRef, str]:
    """Keep ``text`` as an artifact; return its ref and the preview to show instead.

    Builtin tools that manage their own output (``exec_shell`` keeping stdout and stderr apart)
    call this directly; everything else goes through :class:`SpillToolset`.
    """
    ref = files.add_artifact(
        chat_key,
        text,
        name=name,
        source=source,
        mime=mime,
        description=f"full {name} ({len(text.encode()):,} bytes)",
    )
    return ref, render_preview(text, ref, what=name, budget=min(_PREVIEW_BUDGET, threshold))


def spill_value(files: ContextFiles, chat_key: str, value: Any, *, tool_name: str, threshold: int) -> Any:
    """``value`` itself when it fits in ``threshold`` bytes, else its spilled form (see module doc)."""
    source = f"tool:{tool_name}"
    if isinstance(value, ToolReturn):
        inner = spill_value(files, chat_key, value.return_value, tool_name=tool_name, threshold=threshold)
        return value if inner is value.return_value else replace(value, return_value=inner)
    if isinstance(value, str):
        if len(value.encode("utf-8")) <= threshold:
            return value
        return spill_text(
            files, chat_key, value, name=f"{tool_name} output", source=source, threshold=threshold
        )[1]
    if value is None or isinstance(value, bool | int | float):
        return value
    try:
        text = _json_text(value)
    except pydantic_core.PydanticSerializationError:
        return value  # multimodal or exotic content: not ours to rewrite
    if len(text.encode("utf-8")) <= threshold:
        return value
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        shrunk = dict(value)
        big = sorted(
            (k for k, v in shrunk.items() if isinstance(v, str) and len(v.encode("utf-8")) > _PREVIEW_BUDGET),
            key=lambda k: -len(shrunk[k]),
        )
        for key in big:
            shrunk[key] = spill_text(
                files, chat_key, shrunk[key], name=f"{tool_name} {key}", source=source, threshold=threshold
            )[1]
            if len(_json_text(shrunk).encode("utf-8")) <= threshold:
                return shrunk
    ref, preview = spill_text(
        files,
        chat_key,
        text,
        name=f"{tool_name} output",
        source=source,
        threshold=threshold,
        mime="application/json",
    )
    out: dict[str, Any] = {"spilled": True, "id": ref.id, "sizeBytes": ref.size_bytes, "preview": preview}
    if isinstance(value, Mapping) and isinstance(value.get("success"), bool):
        out = {"success": value["success"], **out}  # a failure must still read as a failure
    return out


@dataclass
class SpillToolset(WrapperToolset[Any]):
    """Wrap ``wrapped`` so its oversized results are spilled to context files.

    The chat key, project and threshold come from the run (``ctx.deps``); outside
    a shipagent run results pass through unchanged.
    """

    def _skips(self, name: str, tool: ToolsetTool[Any]) -> bool:
        metadata = tool.tool_def.metadata or {}
        flag = next(iter(NO_SPILL_METADATA))
        return bool(metadata.get(flag)) or name in CONTEXT_TOOL_NAMES

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        result = await self.wrapped.call_tool(name, tool_args, ctx, tool)
        if self._skips(name, tool):
            return result
        run = run_of(ctx)
        if run is None:  # outside any run: nothing to write to
            return result
        threshold = run.config.context.files.spill_threshold_bytes
        try:
            async with context_files_for(run).session(run.chat_key) as files:
                return await anyio.to_thread.run_sync(
                    lambda: spill_value(files, run.chat_key, result, tool_name=name, threshold=threshold)
                )
        except (ShipAgentError, OSError) as exc:
            # Losing the spill must not lose the turn: log it and let the full result through.
            log.error("could not spill the result of %s for %r: %s", name, run.chat_key, exc)
            return result
