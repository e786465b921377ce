"""The one-line ``step_finish`` summary of an MCP tool call (seed 002 §4.3).

Users see a summary, not raw tool output: ``MCP tool <name>: <result>``, at most 500 characters.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["SUMMARY_LIMIT", "summarize_call"]

SUMMARY_LIMIT = 500


def summarize_call(tool_name: str, output: Any, *, limit: int = SUMMARY_LIMIT) -> str:
    """``MCP tool <tool_name>: <output>`` cut to ``limit`` characters, whitespace collapsed.

    A failure dict reads ``MCP tool <name> failed: <error>``.
    """
    if isinstance(output, dict) and output.get("success") is False:
        head, body = f"MCP tool {tool_name} failed: ", str(output.get("error", ""))
    else:
        head = f"MCP tool {tool_name}: "
        body = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False, default=str)
    text = head + " ".join(body.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
