"""When a chat's history is compacted, and what a compaction keeps: the high and low marks.

A compaction rewrites the start of what a provider has cached, so it should come rarely and late:
when the history passes a high mark (messages or tokens, ship.json ``context.chatHistory``) or,
when ship.json names the model's window (``context.budget.maxTokens``), when the provider's own
count says the last request filled most of it. What it keeps is bounded by the low marks. Pure
functions of messages and configuration; :class:`~shipagent.store.chats.ChatHistories` applies
them at every commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from pydantic_ai.messages import ModelMessage, ModelResponse

from .._context_config import ContextConfig
from .sections import message_facts

__all__ = ["SUMMARY_TOKENS", "WINDOW_SHARE", "Marks", "history_tokens", "marks_of", "window_full"]

SUMMARY_TOKENS = 400
"""The default cap of a compaction summary (``context.chatHistory.summaryMaxTokens``)."""


def history_tokens(messages: Sequence[ModelMessage]) -> int:
    """Our o200k count of ``messages`` (remembered per message: a commit recounts nothing)."""
    return sum(message_facts(m)[0] for m in messages)


WINDOW_SHARE = 0.85
"""A chat compacts once its last request filled this share of the model's window (as the
provider counted it): late enough that compactions are rare, early enough that the next turn fits."""


def window_full(messages: Sequence[ModelMessage], window: int) -> bool | None:
    """Whether the newest request in ``messages`` (prompt + answer, as the provider reported its
    usage) filled :data:`WINDOW_SHARE` of ``window`` tokens; ``None`` when no usage was reported.

    The provider's own count is exact where ours is an estimate: it knows its tokenizer and its
    chat template (which may add or drop whole sections, such as tool definitions).
    """
    for message in reversed(messages):
        if isinstance(message, ModelResponse) and message.usage.input_tokens:
            used = message.usage.input_tokens + message.usage.output_tokens
            return used > window * WINDOW_SHARE
    return None


@dataclass(frozen=True, slots=True)
class Marks:
    """When a history is compacted and what the compaction keeps.

    A history past ``high_messages`` messages or ``high_tokens`` tokens is compacted; the kept tail
    is at most ``low_messages`` messages and ``low_tokens`` tokens (summary not counted). With
    ``t`` tokens per turn and a summary of ``S`` tokens, one compaction makes a prompt-caching
    provider evaluate about ``S + low`` tokens again, once every ``(high - low) / t`` turns.
    """

    high_messages: int
    low_messages: int
    high_tokens: int | None = None
    low_tokens: int | None = None
    summary_tokens: int = SUMMARY_TOKENS
    fixed: bool = False
    """The token marks were set explicitly: :meth:`within` leaves them as they are."""

    def within(self, room: int | None, limit: int | None = None) -> Marks:
        """These marks with the token marks lowered to fit.

        ``room``: the tokens a request's messages may use (``None``: unknown); past four fifths of
        it the chat compacts, before the budget must leave messages out of every request — unless
        the token marks were set explicitly. ``limit``: a history that overflowed the model's
        window; the marks always stay below it. The low mark stays at most a quarter of the high, and
        the high mark at least twice the summary's cap.
        """
        bounds = [r for r in ((None if self.fixed else room), limit) if r is not None]
        if not bounds:
            return self
        # never below two summaries' worth: a compacted history must fit under the high mark, or
        # every commit would compact again
        cap = max(min(bounds) * 4 // 5, 2 * self.summary_tokens)
        high = min(self.high_tokens or cap, cap)
        low = min(self.low_tokens or high // 4, high // 4)
        if (high, low) == (self.high_tokens, self.low_tokens):
            return self
        return replace(self, high_tokens=high, low_tokens=low)

    def over(self, messages: Sequence[ModelMessage]) -> bool:
        """Whether ``messages`` is past the high mark."""
        if len(messages) > self.high_messages:
            return True
        return self.high_tokens is not None and history_tokens(messages) > self.high_tokens

    def over_low(self, messages: Sequence[ModelMessage], share: float) -> bool:
        """Whether ``messages`` is past the low mark by ``share`` of the gap between the marks."""
        gap = max(self.high_messages - self.low_messages, 1)
        if len(messages) > self.low_messages + share * gap:
            return True
        if self.high_tokens is None or self.low_tokens is None:
            return False
        return history_tokens(messages) > self.low_tokens + share * (self.high_tokens - self.low_tokens)


def marks_of(context: ContextConfig) -> Marks:
    """The compaction marks ship.json ``context`` sets, token defaults filled in.

    The high mark in tokens defaults to three quarters of the history's budget (the request's
    ``budget.maxTokens`` less ``reserveOutput`` when set, else ``chatHistory.maxHistoryTokens``),
    so compaction comes before the budget would have to drop messages from every request (which
    would change the request's start on every turn); the low mark to a quarter of the high one.
    Unless ``compactAtTokens`` is set, the requests' room lowers them further (``Marks.within``).
    """
    history = context.chat_history
    budget = context.budget
    room = budget.max_tokens - budget.reserve_output if budget.max_tokens else history.max_history_tokens
    high = history.compact_at_tokens or max(room * 3 // 4, 256)
    low = history.compact_to_tokens or high // 4
    return Marks(
        history.in_memory_max_messages,
        history.compact_keep_last_messages,
        high,
        min(low, high),
        history.summary_max_tokens,
        fixed=history.compact_at_tokens is not None,
    )
