"""Model-written compaction summaries (``chatHistory.summarizer: "model"``).

The extract summary is mechanical: the first 300 characters of every removed line. A model can
write a much better one — decisions, open questions, facts the user gave — from the previous
summary plus the messages being folded. It gets one plain request (no tools, no history), its
answer is capped in tokens, and any failure makes :class:`~.chats.ChatHistories` fall back to
the extract. The cut is the same pair-safe one either way, the summary keeps its id and seq range
(so ``context_expand`` still gives back every original message) and it is persisted like any
other.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model

from .compaction import Summarizer, message_text
from .tokens import count_tokens, cut_text

__all__ = ["SUMMARY_INSTRUCTIONS", "SUMMARY_MAX_TOKENS", "model_summarizer"]

SUMMARY_MAX_TOKENS = 400
"""The default cap (ship.json ``context.chatHistory.summaryMaxTokens``)."""
SUMMARY_INSTRUCTIONS = (
    "You summarize the earlier part of a conversation between a user and an AI agent so the agent "
    "can continue it without the original messages. Keep: what the user wants, decisions made, "
    "facts and names the user gave, results of tool calls that still matter, and open questions. "
    "Merge the previous summary in; drop chit-chat. Write plain sentences or short bullets, at most "
    "about {max_tokens} tokens. Output only the summary."
)
_INPUT_CHARS = 200_000


def _transcript(previous: str, messages: list[ModelMessage]) -> str:
    lines = [f"Previous summary:\n{previous}\n" if previous else "There is no previous summary.\n"]
    lines.append("Messages to fold into the summary:")
    for message in messages:
        lines.extend(f"{role}: {text}" for role, text in message_text(message))
    text = "\n".join(lines)
    return (
        text
        if len(text) <= _INPUT_CHARS
        else text[: _INPUT_CHARS // 2] + "\n…\n" + text[-_INPUT_CHARS // 2 :]
    )


def model_summarizer(model: Callable[[], Model], max_tokens: int = SUMMARY_MAX_TOKENS) -> Summarizer:
    """A :data:`~.compaction.Summarizer` that asks ``model()`` (resolved at call time).

    ``max_tokens`` caps the answer: the summary sits in every request until the next compaction,
    and each compaction makes a prompt cache evaluate it again.
    """
    instructions = SUMMARY_INSTRUCTIONS.format(max_tokens=max_tokens)
    agent: Agent[None, str] = Agent(output_type=str, instructions=instructions, retries=0)

    async def summarize(previous: str, messages: list[ModelMessage]) -> str:
        result = await agent.run(
            _transcript(previous, messages), model=model(), model_settings={"max_tokens": max_tokens}
        )
        body = str(result.output).strip()
        if count_tokens(body) > max_tokens:
            body = cut_text(body, max_tokens)
        return body

    return summarize
