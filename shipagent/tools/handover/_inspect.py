"""Boxes as text for people: what ``shipagent`` shows when someone asks what was handed over.

A box's whole point is that it can be inspected afterwards — which instruction a sub-agent got,
which cards it inherited, what it answered. This renders a box compactly and deterministically
(one header line per card, the content indented, long content shortened with the count of what
was left out) for a terminal or a log.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...store.cards._cards import Box, Card
from ._render import render_content

__all__ = ["format_box"]


def _shorten(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… (+{len(text) - limit} chars)"


def format_box(box: Box, cards: Sequence[Card], *, max_chars: int = 500) -> str:
    """``box`` and its ``cards`` (in box order) as readable text.

    Args:
        box: the box.
        cards: its cards, as :meth:`CardBoxStore.get_cards` returns them for ``box.card_ids``.
        max_chars: content beyond this many characters per card is cut (the count is shown).
    """
    stamp = box.created_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    lines = [f"box {box.box_id} · project {box.project_id} · {len(cards)} card(s) · created {stamp}"]
    for index, card in enumerate(cards, start=1):
        lines.append(
            f"[{index}] {card.type} · role {card.role} · by {card.author_id} · "
            f"{card.created_at.strftime('%H:%M:%S')} · {card.card_id}"
        )
        body = _shorten(render_content(card.content), max_chars)
        lines.extend(f"    {line}" for line in (body.splitlines() or [""]))
    return "\n".join(lines)
