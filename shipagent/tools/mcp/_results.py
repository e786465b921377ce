"""What the model sees of an MCP tool result.

Text content is joined; images, audio and embedded resources become a one-line placeholder with
their mime type and size, because a base64 blob in a tool result spends the context window on bytes
no model reads as text. An ``isError`` result, and every call that could not complete (timeout,
dead server, protocol error), becomes ``{"success": false, "error": ...}``: the shape every
shipagent tool uses for failures, so the model can read what went wrong and the run records the
call as failed instead of dying.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import mcp_types

__all__ = ["convert_result", "failure", "render_content"]


def failure(error: str) -> dict[str, Any]:
    """The failed-tool-call value (``success`` false) the agent records and the model reads."""
    return {"success": False, "error": error}


def _base64_size(data: str) -> int:
    """Decoded byte length of base64 ``data``, without decoding it (blobs can be megabytes)."""
    compact = "".join(data.split())
    return max(0, len(compact) * 3 // 4 - compact[-2:].count("="))


def _size(n: int) -> str:
    return f"{n} bytes" if n < 10 * 1024 else f"{n / 1024:.1f} KiB"


def _render_block(block: mcp_types.ContentBlock) -> str:
    import mcp_types  # the MCP types cost ~0.5 s to import: only once a server answers

    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.ImageContent):
        return f"[image: {block.mime_type}, {_size(_base64_size(block.data))}]"
    if isinstance(block, mcp_types.AudioContent):
        return f"[audio: {block.mime_type}, {_size(_base64_size(block.data))}]"
    if isinstance(block, mcp_types.EmbeddedResource):
        res = block.resource
        mime = res.mime_type or "unknown type"
        if isinstance(res, mcp_types.TextResourceContents):
            size = len(res.text.encode("utf-8"))
        else:
            size = _base64_size(res.blob)
        return f"[embedded resource {res.uri}: {mime}, {_size(size)}]"
    if isinstance(block, mcp_types.ResourceLink):
        mime = f", {block.mime_type}" if block.mime_type else ""
        sized = f", {_size(block.size)}" if block.size is not None else ""
        return f"[resource link {block.uri} ({block.name}){mime}{sized}]"
    return f"[{getattr(block, 'type', 'unknown')} content]"  # a content type newer than this code


def render_content(blocks: Sequence[mcp_types.ContentBlock], structured: Any = None) -> str:
    """Join text blocks and placeholders with newlines.

    Structured content is used only when there are no content blocks at all: servers that return
    both put the same JSON in a text block, and sending it twice wastes tokens.
    """
    if not blocks and structured is not None:
        return json.dumps(structured, ensure_ascii=False)
    return "\n".join(_render_block(block) for block in blocks)


def convert_result(result: mcp_types.CallToolResult, *, tool: str, server: str) -> str | dict[str, Any]:
    """The value a tool call returns to pydantic-ai: text on success, a failure dict on ``isError``."""
    text = render_content(result.content, result.structured_content)
    if result.is_error:
        return failure(text or f"MCP tool {tool!r} of server {server!r} reported an error without a message")
    return text
