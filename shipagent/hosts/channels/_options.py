"""How a channel answers, from its ship.json section: the options its pipeline runs with.

Every platform's section (``channels.<platform>``) has the keys :class:`ChannelSettings` names;
:meth:`PipelineOptions.of` reads them once, and a platform adds what only it has (Telegram's
``groups.historyLimit``) as keywords.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["ChannelSettings", "PipelineOptions"]


class ChannelSettings(Protocol):
    """What every platform's ship.json section says about answering (``channels.<platform>``)."""

    @property
    def streaming(self) -> str: ...
    @property
    def text_chunk_limit(self) -> int: ...
    @property
    def max_attachment_bytes(self) -> int: ...
    @property
    def rate_limit_per_minute(self) -> int: ...
    @property
    def show_tool_steps(self) -> bool: ...
    @property
    def debounce_ms(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class PipelineOptions:
    """How a channel answers: streaming by edits or not, the message limit, the edit pace."""

    stream: bool = True
    limit: int = 4000
    edit_interval: float = 1.0
    stop_grace: float = 10.0
    approval_timeout: float = 300.0
    """Seconds a tool waits for Approve / Deny; no answer is a refusal."""
    debounce_dm: float = 0.0
    """Seconds of quiet before a direct message is answered; messages within it are one turn."""
    debounce_group: float = 1.5
    """The same in groups, where people often write in bursts."""
    rate_per_minute: int = 30
    """Messages one sender may send per minute; more are ignored (with one notice). 0: no limit."""
    show_tool_steps: bool = False
    """Show one short line per tool call (its ≤ 500-character summary) while the answer is written."""
    max_attachment_bytes: int = 20 * 1024 * 1024
    """Inbound files larger than this are refused (the reply says so)."""
    history_limit: int = 0
    """Group messages that did not address the bot kept as context for its next turn there."""

    @classmethod
    def of(cls, settings: ChannelSettings, *, edit_interval: float = 1.0, **more: Any) -> PipelineOptions:
        """The options a channel's ship.json section sets (the keys every platform's section has)."""
        return cls(
            stream=settings.streaming == "edit",
            limit=settings.text_chunk_limit,
            edit_interval=edit_interval,
            max_attachment_bytes=settings.max_attachment_bytes,
            rate_per_minute=settings.rate_limit_per_minute,
            show_tool_steps=settings.show_tool_steps,
            **more,
        ).debounced(settings.debounce_ms)

    def debounced(self, milliseconds: int | None) -> PipelineOptions:
        """These options with ship.json ``debounceMs`` for direct messages and groups alike;
        ``None`` keeps the defaults (1.5 s in groups, none in direct messages)."""
        if milliseconds is None:
            return self
        return dataclasses.replace(self, debounce_dm=milliseconds / 1000, debounce_group=milliseconds / 1000)
