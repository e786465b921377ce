"""``agent_load_context``: what earlier runs of this chat did, as an engineering summary.

Each run leaves one line in ``.ship/memory/agent-context/<key>.jsonl`` (request id, previews of the
user message and the output, which tools ran and whether they failed). Loading a window of it as a
**system** message gives the model the facts of past work — rules and records, not conversation —
without replaying the conversation itself.
"""

from __future__ import annotations

from typing import Annotated, Any

import anyio.to_thread
from pydantic import Field
from pydantic_ai import RunContext

from ..jsonl import read_last
from ._common import MAX_BLOCK_CHARS, fit_block
from ._deps import TurnDeps, deps_of
from .execution import fingerprint_of

__all__ = ["agent_load_context", "format_agent_context_entry"]

_PREVIEW = 400  # per field: an entry is a summary, a window of 200 must stay readable


def _clip(value: Any) -> str:
    text = " ".join(str(value).split()) if value is not None else ""
    return text if len(text) <= _PREVIEW else text[: _PREVIEW - 1] + "…"


def _tools_line(calls: Any) -> str:
    if not isinstance(calls, list) or not calls:
        return "none"
    parts = []
    for call in calls:
        if not isinstance(call, dict):
            continue
        name = str(call.get("tool", "?"))
        if call.get("success", True):
            parts.append(f"{name} ok")
        else:
            error = _clip(call.get("error")) or "failed"
            parts.append(f"{name} FAILED ({error[:160]})")
    return ", ".join(parts) or "none"


def format_agent_context_entry(entry: dict[str, Any]) -> str:
    """One agent-context log entry as a few readable lines (a summary entry is marked as such)."""
    ts = entry.get("ts", "?")
    if entry.get("summary"):
        runs = entry.get("runs")
        label = f"summary of {runs} earlier runs" if runs else "summary of earlier runs"
        lines = [f"- {ts} [{label}]"]
        lines += [f"  {_clip(entry[k])}" for k in ("text", "userPreview", "outputPreview") if entry.get(k)]
        return "\n".join(lines)
    lines = [
        f"- {ts} request {entry.get('requestId', '?')}",
        f"  user: {_clip(entry.get('userPreview'))}",
        f"  tools: {_tools_line(entry.get('toolCalls'))}",
        f"  output: {_clip(entry.get('outputPreview'))}",
    ]
    return "\n".join(lines)


async def agent_load_context(
    run: RunContext[TurnDeps],
    count: Annotated[int, Field(ge=1, le=200)] = 20,
    offset: Annotated[int, Field(ge=0, le=2000)] = 0,
) -> dict[str, Any]:
    """Load summaries of earlier runs in this chat (what was asked, which tools ran, the outcome).

    Use it when the user refers to earlier work you cannot see. The summaries are added to your
    system context.

    Args:
        count: how many run summaries to load (the newest ones).
        offset: how many of the newest summaries to skip, to page further back.
    """
    deps = deps_of(run)
    ctx, store = deps.tool, deps.stores.agent_context
    if store is not None:  # the chat lives in a shared store (Postgres), not in this machine's files
        raw: list[Any] = await store.last(ctx.chat_key, count, skip=offset)
    else:
        path = ctx.paths.agent_context(ctx.chat_key)
        raw = await anyio.to_thread.run_sync(lambda: read_last(path, count, skip=offset))
    entries = [e for e in raw if isinstance(e, dict)]
    if not entries:
        return {"success": True, "inserted": 0, "note": "No agent context available.", "entries": 0}
    header = (
        f"[Agent context: summaries of earlier runs in chat {ctx.chat_key}] "
        f"entries: {len(entries)} | offset: {offset} | oldest first"
    )
    block, shown = fit_block(header, [format_agent_context_entry(e) for e in entries], MAX_BLOCK_CHARS)
    fingerprint = f"agent_context:{ctx.chat_key}:{count}:{offset}:{fingerprint_of(block)}"
    result = ctx.inject_system_message_once(block, fingerprint=fingerprint)
    out: dict[str, Any] = {"success": True, "inserted": int(result.inserted), "entries": len(entries)}
    if result.reason is not None:
        out["reason"] = result.reason
    if shown < len(entries):
        out["note"] = f"{len(entries) - shown} older entries left out to stay within the block limit"
    return out
