"""Small helpers shared by the builtin tools: failure results and size-bounded text blocks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MAX_BLOCK_CHARS = 12000
"""An injected block (history, agent context) never exceeds this many characters."""


def failure(error: str, **extra: Any) -> dict[str, Any]:
    """The result of a tool call that did not work, as data the model reads and can react to.

    Tools never raise into the run: a raised exception either kills the turn or burns a retry,
    while ``{success: false, error}`` lets the model explain or try something else.
    """
    return {"success": False, "error": error, **extra}


def fit_block(header: str, entries: Sequence[str], limit: int = MAX_BLOCK_CHARS) -> tuple[str, int]:
    """Join ``header`` and ``entries`` (oldest first) into at most ``limit`` characters.

    When they do not fit, the *oldest* entries are dropped first (the newest are what the model
    most likely needs) and a marker says how many were left out; a single entry too long on its own
    is cut at its end with a marker.

    Returns:
        the block and how many entries it shows (whole or cut).
    """
    kept: list[str] = []
    size = len(header)
    for entry in reversed(entries):
        if size + 1 + len(entry) > limit:
            break
        kept.append(entry)
        size += 1 + len(entry)
    kept.reverse()
    omitted = len(entries) - len(kept)
    if omitted == 0:
        return "\n".join([header, *kept]), len(kept)
    marker = f"[… {omitted} earlier entr{'y' if omitted == 1 else 'ies'} omitted: block limit {limit} chars]"
    while kept and len(header) + len(marker) + sum(len(e) + 1 for e in kept) + 1 > limit:
        kept.pop(0)
        omitted += 1
        marker = f"[… {omitted} earlier entries omitted: block limit {limit} chars]"
    if not kept and entries:
        # Even the newest entry alone is too long: show its beginning.
        cut_marker = " [… truncated]"
        room = max(0, limit - len(header) - len(marker) - len(cut_marker) - 2)
        newest = entries[-1][:room] + cut_marker
        omitted = len(entries) - 1
        marker = (
            f"[… {omitted} earlier entries omitted: block limit {limit} chars]"
            if omitted
            else "[… entry truncated to fit the block limit]"
        )
        return "\n".join([header, marker, newest])[:limit], 1
    return "\n".join([header, marker, *kept]), len(kept)
