"""Where shipagent's own leading notes go in a request: the compaction summary and the budget note.

The chat's history keeps a compaction summary as a marked system part at its start. Two
provider-facing facts decide how a request carries it: pydantic-ai fuses it with the next request
before the context window sees the messages (:func:`split_fused_summary` undoes that, so the
window's items line up with the history), and provider mappings put leading system prompts before
the instructions, which would change the first message at every compaction
(:func:`summary_after_instructions` sends the notes as user text after them instead).
"""

from __future__ import annotations

from dataclasses import replace

from pydantic_ai.messages import ModelMessage, ModelRequest, SystemPromptPart, UserPromptPart

from .compaction import MARKER, is_summary

__all__ = ["is_leading_system", "split_fused_summary", "summary_after_instructions"]


def is_leading_system(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and all(isinstance(p, SystemPromptPart) for p in message.parts)


def split_fused_summary(prior: list[ModelMessage]) -> list[ModelMessage]:
    """Undo pydantic-ai's fusing of the leading summary with the next request.

    pydantic-ai merges consecutive requests before this hook runs, so the compaction summary
    arrives fused with the next request; splitting its leading system parts off makes ``prior``
    line up one-to-one with the chat's history again (and injected system messages land after the
    summary, not above it). pydantic-ai merges them back before sending.
    """
    if not prior or not isinstance(prior[0], ModelRequest) or is_leading_system(prior[0]):
        return prior
    parts = list(prior[0].parts)
    n = 0
    while n < len(parts) and isinstance(parts[n], SystemPromptPart):
        n += 1
    if not n or not is_summary(replace(prior[0], parts=parts[:n])):
        return prior
    return [replace(prior[0], parts=parts[:n]), replace(prior[0], parts=parts[n:]), *prior[1:]]


def _is_summary_part(part: object) -> bool:
    meta = part.metadata if isinstance(part, SystemPromptPart) else None
    info = meta.get(MARKER) if isinstance(meta, dict) else None
    return isinstance(info, dict) and info.get("kind") == "summary"


def _own_note(message: ModelMessage) -> bool:
    """Whether ``message`` is shipagent's own leading note: the summary or the budget note."""
    if not isinstance(message, ModelRequest) or not message.parts:
        return False
    meta = message.metadata.get(MARKER) if isinstance(message.metadata, dict) else None
    kind = meta.get("kind") if isinstance(meta, dict) else None
    return kind in ("summary", "budget-note") or _is_summary_part(message.parts[0])


def summary_after_instructions(sent: list[ModelMessage]) -> list[ModelMessage]:
    """Send the compaction summary (and the budget note) as user text, not as system prompts.

    Provider mappings put the system prompts that open a history *before* the instructions
    (pydantic-ai's OpenAI Chat Completions mapping inserts the instructions after them), so a
    summary sent as a system prompt changes the very first message at every compaction and a
    prompt cache loses the instructions and tool definitions with it. Sent as user text it follows
    them: a compaction changes the request from the summary on, never before. System messages a
    tool injected stay leading system messages (ahead of the notes), as in a chat without a
    summary. The chat's history keeps the summary as the marked system part it is; only the
    request changes.
    """
    lead = 0
    while lead < len(sent) and is_leading_system(sent[lead]):
        lead += 1
    notes = [m for m in sent[:lead] if _own_note(m)]
    if not notes:
        return sent
    others = [m for m in sent[:lead] if not _own_note(m)]
    as_user = [
        replace(
            m,
            parts=[
                UserPromptPart(p.content, timestamp=p.timestamp)
                for p in m.parts
                if isinstance(p, SystemPromptPart)
            ],
        )
        for m in notes
        if isinstance(m, ModelRequest)
    ]
    return [*others, *as_user, *sent[lead:]]
