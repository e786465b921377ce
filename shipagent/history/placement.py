"""The capability that decides what each model request of a run carries.

Before every model request it (1) bounds the history by the token budget and (2) lays in the
messages tools injected during this run: injected **system** messages right after any leading
system messages (the compaction summary), injected **assistant** messages immediately before the
current user message (seed 002 §3). The user's text is never rewritten.

Why not pydantic-ai's ``ProcessHistory``: what a ``ProcessHistory`` function returns is written back
into the run's message history, so injections and budget cuts would leak into what the turn
persists. A ``before_model_request`` hook that only *assigns* ``request_context.messages`` changes
the request and nothing else (see ``ModelRequestContext.messages`` in pydantic-ai), so the run's
history — and therefore what shipagent commits — stays exactly what the model and tools produced.
Since the input is the untouched run history every time, the hook is idempotent by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
)
from pydantic_ai.models import ModelRequestContext

from .budget import fit_to_budget
from .compaction import MARKER
from .injections import RunInjection, run_injections, strip_injections

__all__ = ["ContextWindow", "place_injections"]


def _is_leading_system(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and all(isinstance(p, SystemPromptPart) for p in message.parts)


def _injected_messages(injections: list[RunInjection]) -> tuple[list[ModelMessage], list[ModelMessage]]:
    """The run's injected (system, assistant) messages, in injection order."""
    systems: list[ModelMessage] = []
    assistants: list[ModelMessage] = []
    for injection in injections:
        item = injection.message
        meta = {
            MARKER: {
                "kind": "injected",
                "fingerprint": item.fingerprint,
                "toolCallId": injection.tool_call_id,
            }
        }
        if item.role == "system":
            systems.append(ModelRequest(parts=[SystemPromptPart(item.content)], metadata=meta))
        else:
            assistants.append(ModelResponse(parts=[TextPart(item.content)], metadata=meta))
    return systems, assistants


def _lay(
    prior: list[ModelMessage],
    current: list[ModelMessage],
    systems: list[ModelMessage],
    assistants: list[ModelMessage],
) -> list[ModelMessage]:
    if not systems and not assistants:
        return [*prior, *current]
    lead = 0
    while lead < len(prior) and _is_leading_system(prior[lead]):
        lead += 1
    fused = prior[lead] if lead < len(prior) else None
    if isinstance(fused, ModelRequest):
        # pydantic-ai merges consecutive requests before this hook runs, so the compaction summary
        # arrives fused with the next user request: split its leading system parts off, so that
        # injected system messages land after them and not above the summary.
        parts = list(fused.parts)
        n = 0
        while n < len(parts) and isinstance(parts[n], SystemPromptPart):
            n += 1
        if n:
            head, rest = replace(fused, parts=parts[:n]), replace(fused, parts=parts[n:])
            prior = [*prior[:lead], head, rest, *prior[lead + 1 :]]
            lead += 1
    return [*prior[:lead], *systems, *prior[lead:], *assistants, *current]


def place_injections(
    prior: list[ModelMessage], current: list[ModelMessage], *, limit: int = 120
) -> list[ModelMessage]:
    """``prior + current`` with the injections recorded in ``current`` laid in (pure)."""
    return _lay(prior, current, *_injected_messages(run_injections(current, limit)))


def _split_current(messages: list[ModelMessage], run_id: str | None) -> int:
    """Index of the current user request: the first message this run created."""
    if run_id is not None:
        for index, message in enumerate(messages):
            if getattr(message, "run_id", None) == run_id:
                return index
    for index in range(len(messages) - 1, -1, -1):  # fallback (no run id): the last request
        if isinstance(messages[index], ModelRequest):
            return index
    return 0


@dataclass
class ContextWindow(AbstractCapability[Any]):
    """Budget the history and place injected messages, for what is sent only."""

    max_history_tokens: int = 32000
    max_injected_messages: int = 120

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        messages = list(request_context.messages)
        split = _split_current(messages, ctx.run_id)
        # Rebuilt from the run's own messages (tool results carry them), never from the contextvar.
        systems, assistants = _injected_messages(run_injections(messages[split:], self.max_injected_messages))
        # Injected messages count against the budget like the run's own messages: never dropped,
        # cut when too large (a tool may inject a huge transcript or file).
        injected = [*systems, *assistants]
        prior, rest = fit_to_budget(messages[:split], [*injected, *messages[split:]], self.max_history_tokens)
        systems, assistants = rest[: len(systems)], rest[len(systems) : len(injected)]
        # The records themselves are bookkeeping: the request carries the laid-in messages only.
        current = strip_injections(rest[len(injected) :])
        request_context.messages = _lay(prior, current, systems, assistants)
        return request_context

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None
