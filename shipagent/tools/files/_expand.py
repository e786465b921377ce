"""``context_expand``: the exact messages a compaction summary replaced, paged.

A summary is lossy by design; the messages it replaced are still in the chat's message log,
each with a stable seq, and the summary records the seq range (``S<from>-<to>``). This tool gives
them back verbatim, rendered like the history context files (role, time, tool call ids), paged by
UTF-8 byte offset under the same token cap as ``context_read`` so a page always arrives whole.
"""

from __future__ import annotations

import json
from typing import Any

from ...store.files._render import render_messages
from ...store.logs import MessageLog
from ...window.tokens import count_tokens

__all__ = ["EXPAND_LIMIT_MAX", "expand_page", "expand_result"]

EXPAND_LIMIT_MAX = 65536


def _boundary(data: bytes, at: int) -> int:
    """``at`` moved back to the start of a UTF-8 character."""
    at = max(0, min(at, len(data)))
    while 0 < at < len(data) and 0x80 <= data[at] <= 0xBF:
        at -= 1
    return at


def expand_page(text: str, offset: int, limit: int, cap: int) -> tuple[str, int, int]:
    """``(content, start, next offset)`` of ``text`` from byte ``offset``, at most ``limit`` bytes
    and ``cap`` tokens (as JSON), never splitting a character."""
    data = text.encode("utf-8")
    start = _boundary(data, offset)
    end = _boundary(data, start + limit) if start + limit < len(data) else len(data)
    while True:
        content = data[start:end].decode("utf-8")
        if end - start <= 256 or count_tokens(json.dumps({"content": content}, ensure_ascii=False)) <= cap:
            return content, start, end
        end = _boundary(data, start + (end - start) * 3 // 4)


def expand_result(
    log: MessageLog, chat_key: str, summary_id: str, offset: int, limit: int, cap: int
) -> dict[str, Any]:
    """The ``context_expand`` result (blocking: reads the message log)."""
    try:
        messages = log.expand(chat_key, summary_id)
    except KeyError:
        return {"success": False, "error": f"no summary with id {summary_id!r} in this chat"}
    text = render_messages(messages)[0]
    content, start, end = expand_page(text, max(offset, 0), max(1, min(limit, EXPAND_LIMIT_MAX)), cap)
    size = len(text.encode("utf-8"))
    return {
        "success": True,
        "summaryId": summary_id,
        "messages": len(messages),
        "offset": start,
        "nextOffset": end,
        "size": size,
        "done": end >= size,
        "content": content,
    }
