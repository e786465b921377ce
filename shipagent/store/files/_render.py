"""Text renderings: compacted messages as a readable history file, the catalog, spill previews.

Pure functions, no I/O, so they are tested directly. A history file is meant to be grepped and
tailed by the model later, so every part is one headed block with its role, time and content, and
tool calls keep their arguments and results verbatim.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

    from ._ref import ContextRef

__all__ = ["PREVIEW_HEAD_BYTES", "PREVIEW_TAIL_BYTES", "render_catalog", "render_messages", "render_preview"]

PREVIEW_HEAD_BYTES = 1024
PREVIEW_TAIL_BYTES = 1024


def _when(value: Any) -> str:
    if isinstance(value, datetime):
        return value.strftime(
            "%Y-%m-%d %H:%M:%S UTC" if value.utcoffset() is not None else "%Y-%m-%d %H:%M:%S"
        )
    return "unknown time"


def _user_content(content: Any) -> str:
    if isinstance(content, str):
        return content
    out: list[str] = []
    for item in content:
        if isinstance(item, str):
            out.append(item)
        else:
            kind = getattr(item, "media_type", None) or getattr(item, "kind", type(item).__name__)
            where = getattr(item, "url", None)
            out.append(f"[{kind}{' ' + where if where else ''}]")
    return "\n".join(out)


def _args(part: Any) -> str:
    try:
        return str(part.args_as_json_str())
    except Exception:  # malformed args from a model are still worth keeping as they came
        return str(part.args)


def _tool_result(part: Any) -> str:
    try:
        return str(part.model_response_str())
    except Exception:
        return json.dumps(part.content, ensure_ascii=False, default=str)


def _request_block(part: Any) -> tuple[str, str] | None:
    kind = getattr(part, "part_kind", "")
    if kind == "system-prompt":
        return "system", part.content
    if kind == "user-prompt":
        return "user", _user_content(part.content)
    if kind in ("tool-return", "tool-search-return", "capability-load-return"):
        outcome = getattr(part, "outcome", "success")
        status = "" if outcome == "success" else f" [{outcome}]"
        return "tool", f"← result of `{part.tool_name}` ({part.tool_call_id}){status}:\n{_tool_result(part)}"
    if kind in ("retry-prompt", "retry-feedback"):
        return "retry", str(part.model_response())
    return None  # bookkeeping parts (deltas, baselines) carry nothing a reader needs


def _response_lines(part: Any) -> str | None:
    kind = getattr(part, "part_kind", "")
    if kind == "text":
        return str(part.content)
    if kind == "thinking":
        return f"(thinking) {part.content}" if part.content else None
    if kind in ("tool-call", "builtin-tool-call", "tool-search-call", "capability-load-call"):
        return f"→ call `{part.tool_name}` ({part.tool_call_id}): {_args(part)}"
    if kind in ("builtin-tool-return", "builtin-tool-search-return"):
        return f"← result of `{part.tool_name}` ({part.tool_call_id}):\n{_tool_result(part)}"
    content = getattr(part, "content", None)
    return f"({kind}) {content}" if isinstance(content, str) and content else None


def render_messages(messages: Sequence[ModelMessage]) -> tuple[str, str, str]:
    """Render messages as markdown-ish text; return ``(text, first time, last time)``.

    Every block starts with ``## <role> · <time>``; tool calls show ``→ call `name` (id): args`` and
    results ``← result of `name` (id): content``, so a grep for a tool name or an error finds both.
    """
    blocks: list[str] = []
    times: list[str] = []
    for message in messages:
        if message.kind == "request":
            for part in message.parts:
                rendered = _request_block(part)
                if rendered is None:
                    continue
                when = _when(getattr(part, "timestamp", None) or message.timestamp)
                times.append(when)
                blocks.append(f"## {rendered[0]} · {when}\n{rendered[1]}")
        else:
            lines = [line for line in map(_response_lines, message.parts) if line]
            if not lines:
                continue
            when = _when(message.timestamp)
            times.append(when)
            blocks.append(f"## assistant · {when}\n" + "\n".join(lines))
    known = [t for t in times if t != "unknown time"]
    header = f"# Conversation history ({len(messages)} messages)\n\n"
    return header + "\n\n".join(blocks) + "\n", (known[0] if known else ""), (known[-1] if known else "")


def render_history(messages: Sequence[ModelMessage]) -> tuple[str, str, str]:
    """``(text, name, description)`` of the ``history`` file that keeps ``messages`` (what a
    compaction removed): every store names it the same, so a re-commit can find it by name."""
    text, first, last = render_messages(messages)
    span = f"{first} – {last}" if first else "unknown time"
    return text, f"conversation {span}", f"{len(messages)} compacted messages ({span})"


def render_catalog(*, skills: Sequence[tuple[str, str]], tools: Sequence[tuple[str, str]]) -> str:
    """The catalog file: one line per skill and per tool, ``- name: description``."""

    def section(title: str, rows: Sequence[tuple[str, str]]) -> str:
        if not rows:
            return f"## {title}\n(none)\n"
        body = "\n".join(f"- {name}: {' '.join(desc.split()) or '(no description)'}" for name, desc in rows)
        return f"## {title}\n{body}\n"

    return "# Capability catalog\n\n" + section("Skills", skills) + "\n" + section("Tools", tools)


def _cut_head(data: bytes, size: int) -> bytes:
    cut = min(size, len(data))
    while 0 < cut < len(data) and 0x80 <= data[cut] <= 0xBF:
        cut -= 1
    return data[:cut]


def _cut_tail(data: bytes, size: int) -> bytes:
    cut = max(0, len(data) - size)
    while cut < len(data) and 0x80 <= data[cut] <= 0xBF:
        cut += 1
    return data[cut:]


def render_preview(text: str, ref: ContextRef, *, what: str = "output", budget: int = 2048) -> str:
    """What the model gets instead of a spilled ``text``: head, tail, the ref id and how to read on.

    Args:
        text: the full text that was spilled.
        ref: its context file.
        what: how to call it in the preview's first line (``output``, ``field 'stdout'``).
        budget: bytes of head plus tail shown (~2 KB; less when the spill threshold is lower).
    """
    data = text.encode("utf-8")
    head = _cut_head(data, min(PREVIEW_HEAD_BYTES, budget // 2))
    tail = _cut_tail(data[len(head) :], min(PREVIEW_TAIL_BYTES, budget // 2))
    omitted = len(data) - len(head) - len(tail)
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    return (
        f"[{what} too large for the context window: {len(data):,} bytes, {lines:,} lines, "
        f"kept as context file id={ref.id!r}; showing the first {len(head):,} and last {len(tail):,} bytes]\n"
        f"{head.decode('utf-8')}\n"
        f"… [{omitted:,} bytes omitted] …\n"
        f"{tail.decode('utf-8')}\n"
        f"[use context_read(id={ref.id!r}, offset=…), context_tail(id={ref.id!r}) or "
        f"context_grep(id={ref.id!r}, pattern=…) to see the rest]"
    )
