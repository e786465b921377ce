"""The capability that decides what each model request of a run carries, and reports it.

Before every model request it (1) plans the request by sections with the token budget
(:mod:`shipagent.window.budget`) and (2) lays in the messages tools injected during this run:
injected **system** messages right after any leading system messages (the compaction summary),
injected **assistant** messages immediately before the current user message. The
user's text is never rewritten. Then it tells its :class:`RequestObserver` (if any) exactly what
was sent and why — the ledger room listens there; the core never imports it.

Why not pydantic-ai's ``ProcessHistory``: what a ``ProcessHistory`` function returns is written back
into the run's message history, so injections and budget cuts would leak into what the turn
persists. A ``before_model_request`` hook that only *assigns* ``request_context.messages`` changes
the request and nothing else (see ``ModelRequestContext.messages`` in pydantic-ai), so the run's
history — and therefore what shipagent commits — stays exactly what the model and tools produced.
Since the input is the untouched run history every time, the hook is idempotent by construction.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters

from .._cache import BoundedCache
from .budget import Budget, Plan, plan_request, render_prior
from .compaction import MARKER, is_summary
from .injections import RunInjection, run_injections, strip_injections
from .layout import is_leading_system, split_fused_summary, summary_after_instructions
from .sections import Item, message_facts, message_tokens, render_item
from .tokens import TokenCalibration, count_tokens

__all__ = [
    "ContextWindow",
    "PriorItems",
    "RequestObserver",
    "RequestReport",
    "build_items",
    "injected_message",
    "lay_injections",
    "place_injections",
    "prefix_of",
    "prefix_parts",
    "render_plan",
    "split_fused_summary",
    "summary_after_instructions",
]

log = logging.getLogger("shipagent.window")
KeepResult = Callable[[str, str, str], str]
"""``(tool name, tool call id, result text) -> context file id`` (blocking; run in a thread)."""


def injected_message(injection: RunInjection) -> ModelMessage:
    """The message an injection is sent as (marked in metadata, never persisted)."""
    item = injection.message
    meta = {
        MARKER: {"kind": "injected", "fingerprint": item.fingerprint, "toolCallId": injection.tool_call_id}
    }
    when = injection.timestamp
    if item.role == "system":
        part = (
            SystemPromptPart(item.content) if when is None else SystemPromptPart(item.content, timestamp=when)
        )
        return ModelRequest(parts=[part], metadata=meta, timestamp=when)
    if when is None:
        return ModelResponse(parts=[TextPart(item.content)], metadata=meta)
    return ModelResponse(parts=[TextPart(item.content)], metadata=meta, timestamp=when)


def lay_injections(
    prior: list[ModelMessage],
    current: list[ModelMessage],
    systems: Sequence[ModelMessage],
    assistants: Sequence[ModelMessage],
) -> list[ModelMessage]:
    """``prior + current`` with injected system messages after the leading system messages and
    injected assistant messages right before the current user request."""
    if not systems and not assistants:
        return [*prior, *current]
    prior = split_fused_summary(prior)
    lead = 0
    while lead < len(prior) and is_leading_system(prior[lead]):
        lead += 1
    return [*prior[:lead], *systems, *prior[lead:], *assistants, *current]


def place_injections(
    prior: list[ModelMessage], current: list[ModelMessage], *, limit: int = 120
) -> list[ModelMessage]:
    """``prior + current`` with the injections recorded in ``current`` laid in (pure)."""
    injected = [injected_message(i) for i in run_injections(current, limit)]
    systems = [m for m in injected if isinstance(m, ModelRequest)]
    assistants = [m for m in injected if isinstance(m, ModelResponse)]
    return lay_injections(prior, current, systems, assistants)


def _split_current(messages: list[ModelMessage], run_id: str | None) -> int:
    """Index of the current user request: the first message this run created."""
    if run_id is not None:
        # the run's messages are the tail of the list: walk back over them, not over the history
        index = len(messages)
        while index and getattr(messages[index - 1], "run_id", None) == run_id:
            index -= 1
        if index < len(messages):
            return index
    for index in range(len(messages) - 1, -1, -1):  # fallback (no run id): the last request
        if isinstance(messages[index], ModelRequest):
            return index
    return 0


def build_items(
    prior: Sequence[ModelMessage],
    sources: Sequence[str] | None,
    injections: Sequence[RunInjection],
    current: Sequence[ModelMessage],
    *,
    reuse: Sequence[Item] = (),
) -> tuple[list[Item], list[Item], list[Item]]:
    """The (prior, injections, current) items of a request, each with its section and source.

    ``sources`` names the prior messages (``history:<seq>`` / ``summary:<id>``) when it lines up
    with ``prior``; otherwise they are numbered by position (``history:@<n>``). ``reuse`` are
    unedited prior items of an earlier request: one at the same position that names the same
    message and source is taken as it is (the caller must not let a plan edit them then).
    """
    aligned = sources is not None and len(sources) == len(prior)
    names = sources if aligned and sources is not None else [f"history:@{n}" for n in range(len(prior))]
    # Position by position, not only a common prefix: pydantic-ai fuses the compaction summary
    # with the next request, so a compacted chat's first two messages are new objects on every
    # request while the rest are the same. (Inline: this runs once per history message.)
    before: list[Item] = []
    kept = len(reuse)
    for n, (message, source) in enumerate(zip(prior, names, strict=True)):
        item = reuse[n] if n < kept else None
        if (
            item is None
            or item.message is not message
            or item.source != source
            or item.edit != "whole"
            or item.cap is not None
        ):
            item = _item(message, "history", source)
        before.append(item)
    if before and not (reuse and before[0] is reuse[0]) and is_summary(prior[0]):
        before[0].section = "summary"
    injected = [_injected_item(i) for i in injections]
    run = [_item(m, "turn" if n == 0 else "toolResults", f"turn:{n}") for n, m in enumerate(current)]
    return before, injected, run


def _injected_item(injection: RunInjection) -> Item:
    message = injected_message(injection)
    tokens = message_tokens(message)
    source = f"injection:{injection.message.fingerprint}"
    return Item(message, "injections", source, (injection.tool_call_id,), "whole", None, {}, tokens, tokens)


class PriorItems:
    """Each chat's prior-history items of its last request that went out unedited, for the next one.

    Why: a chat's history is the same message objects from one request to the next, so building a
    fresh :class:`Item` for each of a thousand messages on every request is work thrown away. The
    items are only reused by a request whose plan cannot edit them (no section caps, everything
    fits: the budget's fast path), so an item the ledger still holds for an earlier request never
    changes under it. Bounded to the most recent chats (the items hold their messages).
    """

    def __init__(self, max_chats: int = 64) -> None:
        # The least recently *kept* chat goes first: a lookup does not count as use.
        self._chats: BoundedCache[str, list[Item]] = BoundedCache(max_chats)

    @property
    def max_chats(self) -> int:
        return self._chats.max_size

    def get(self, chat_key: str) -> list[Item]:
        return self._chats.peek(chat_key) or []

    def keep(self, chat_key: str, items: list[Item]) -> None:
        self._chats[chat_key] = items

    def forget(self, chat_key: str) -> None:
        self._chats.pop(chat_key, None)


def _item(message: ModelMessage, section: str, source: str) -> Item:
    """An item with its token count filled in (remembered per message: see ``message_facts``)."""
    tokens, ids = message_facts(message)
    return Item(message, section, source, ids, "whole", None, {}, tokens, tokens)  # positional: hot


def render_plan(
    prior: list[Item], injections: list[Item], current: list[Item], *, summary_as_user: bool = True
) -> list[ModelMessage]:
    """The messages a planned request sends, before pydantic-ai's own normalisation.

    ``summary_as_user=False``: the layout of requests recorded before the summary was sent as user
    text (see :func:`summary_after_instructions`), so the ledger rebuilds those exactly too.
    """
    sent = [render_item(i) for i in injections]
    systems = [m for m in sent if isinstance(m, ModelRequest)]
    assistants = [m for m in sent if isinstance(m, ModelResponse)]
    run = [m for m in (render_item(i) for i in current) if m is not None]
    laid = lay_injections(render_prior(prior), run, systems, assistants)
    return summary_after_instructions(laid) if summary_as_user else laid


_PREFIXES_MAX = 64
_PREFIXES: BoundedCache[tuple[Any, ...], tuple[list[Any], PrefixParts]] = BoundedCache(_PREFIXES_MAX)
"""The oldest *counted* prefix goes first (a hit does not count as use); shared by threads."""
_PREFIXES_LOCK = threading.Lock()


PrefixParts = tuple[str, int, int, str, str]
"""``(prefix hash, instruction tokens, tool-definition tokens, instructions hash, tools hash)``."""


def prefix_of(instructions: str, params: ModelRequestParameters) -> tuple[str, int, int]:
    """``(sha256, instruction tokens, tool-definition tokens)`` of what every request starts with."""
    return prefix_parts(instructions, params)[:3]


def prefix_parts(instructions: str, params: ModelRequestParameters) -> PrefixParts:
    """:func:`prefix_of` and the instructions' and the tool definitions' own hashes.

    Why both halves: when the prefix changes, the ledger says which half did (a tool list that
    changed mid-chat is a different fix from instructions that did).

    Remembered for the last few prefixes: pydantic-ai builds new tool definitions for every
    request, but their schemas are the same dicts from one request to the next, so the key is the
    instructions and each tool's name, description and schema *identity* — the entry holds the
    schemas, so an identity cannot be reused by another dict while it is remembered. A schema
    rebuilt as a new dict (an MCP server relisting its tools) is a new key and counted again.
    """
    defs = [*params.function_tools, *params.output_tools]
    key = (instructions, *((t.name, t.description, id(t.parameters_json_schema)) for t in defs))
    with _PREFIXES_LOCK:
        found = _PREFIXES.peek(key)
    if found is not None:
        return found[1]
    tools = [
        {"name": t.name, "description": t.description, "parameters": t.parameters_json_schema} for t in defs
    ]
    tools_json = json.dumps(tools, sort_keys=True, ensure_ascii=False)
    digest = hashlib.sha256(f"{instructions}\x00{tools_json}".encode()).hexdigest()
    halves = [hashlib.sha256(text.encode()).hexdigest()[:16] for text in (instructions, tools_json)]
    result = (digest[:16], count_tokens(instructions), count_tokens(tools_json), halves[0], halves[1])
    with _PREFIXES_LOCK:
        _PREFIXES[key] = ([t.parameters_json_schema for t in defs], result)
    return result


def _instructions(params: ModelRequestParameters) -> str:
    return "\n\n".join(p.content for p in params.instruction_parts or ())


@dataclass(slots=True)
class RequestReport:
    """What one model request carried: handed to the :class:`RequestObserver` before it is sent."""

    run_id: str
    step: int
    model: str
    plan: Plan
    prior: list[Item]
    injections: list[Item]
    current: list[Item]
    prefix_hash: str
    instruction_tokens: int
    tool_tokens: int
    messages: list[ModelMessage]
    """The list handed to pydantic-ai (which may still merge consecutive requests before sending)."""
    estimate: int = 0
    """Our o200k count of the whole request: instructions + tool definitions + messages."""
    ratio: float = 1.0
    """The token correction the budget used for this model."""
    previous_usage: tuple[int, int] | None = None
    """``(input tokens, cached input tokens)`` the provider reported for the previous request."""
    instructions_hash: str = ""
    """The instructions' own hash (:func:`prefix_parts`)."""
    tools_hash: str = ""
    """The tool definitions' own hash (:func:`prefix_parts`)."""

    def section_tokens(self) -> dict[str, int]:
        """Tokens per section, the prefix included, as the ledger names them."""
        out = {"instructions": self.instruction_tokens, "toolDefinitions": self.tool_tokens}
        sections = self.plan.section_tokens()
        out["summary"] = sections.get("summary", 0)
        out["history"] = sections.get("history", 0)
        out["injectedSystem"] = sum(i.tokens for i in self.injections if isinstance(i.message, ModelRequest))
        out["injectedAssistant"] = sum(
            i.tokens for i in self.injections if isinstance(i.message, ModelResponse)
        )
        out["turn"] = sections.get("turn", 0)
        out["toolResults"] = sections.get("toolResults", 0)
        return out


class RequestObserver(Protocol):
    """Told about every model request a :class:`ContextWindow` shaped (the ledger listens here)."""

    def on_request(self, report: RequestReport) -> None: ...


def _context_tool(name: str) -> bool:
    return name.startswith("context_")


@dataclass
class ContextWindow(AbstractCapability[Any]):
    """Plan each request by sections, place injected messages, report what was sent."""

    max_history_tokens: int = 32000
    max_injected_messages: int = 120
    max_tokens: int | None = None
    """``context.budget.maxTokens``: the whole request (prefix + messages + ``reserve_output``)."""
    reserve_output: int = 4000
    section_caps: dict[str, float] = field(default_factory=dict)
    """Configured caps: tokens (> 1) or fractions of the budget (≤ 1)."""
    history_sources: Sequence[str] | None = None
    keep_result: KeepResult | None = None
    observer: RequestObserver | None = None
    chat_key: str = ""
    """Whose requests these are (token correction pairs a request with the chat's next one)."""
    calibration: TokenCalibration | None = None
    """Per model, how provider-counted input tokens compare to ours (token correction)."""
    prior_items: PriorItems | None = None
    """The agent's per-chat items of the last unedited request (see :class:`PriorItems`)."""
    on_room: Callable[[int], None] | None = None
    """Told the tokens the messages of each request may use (the budget less the prefix), so the
    chat compacts before the budget would have to leave messages out of every request."""
    _kept: dict[str, str] = field(default_factory=dict, repr=False)
    _steps: int = field(default=0, repr=False)

    def _previous_usage(self, messages: Sequence[ModelMessage]) -> tuple[int, int] | None:
        """What the provider reported for this chat's previous request; settles the calibration."""
        position = next(
            (n for n in range(len(messages) - 1, -1, -1) if isinstance(messages[n], ModelResponse)), -1
        )
        last = messages[position] if position >= 0 else None
        if not isinstance(last, ModelResponse) or not last.usage.input_tokens:
            return None
        if self.calibration is not None:
            self.calibration.settle(self.chat_key, last.usage.input_tokens, position)
        if self._steps == 0:
            return None  # that one belongs to the previous turn (its record has it already)
        return last.usage.input_tokens, last.usage.cache_read_tokens

    def _budget(self, prefix_tokens: int, model: str) -> Budget:
        ratio = self.calibration.ratio(model) if self.calibration is not None else 1.0
        if self.max_tokens is not None:
            whole = self.max_tokens
            total = max(whole - self.reserve_output - prefix_tokens, whole // 4)
        else:
            whole = total = self.max_history_tokens
        # Our o200k estimate times the model's observed ratio must fit: budget in our units.
        total = int(total / ratio) if ratio > 0 else total
        caps: dict[str, int] = {}
        for name, value in self.section_caps.items():
            caps[name] = int((value * whole if value <= 1 else value) / (ratio or 1.0))
        return Budget(total, caps)

    def _hint(self, part: ToolReturnPart, call: ToolCallPart | None) -> str:
        if _context_tool(part.tool_name):
            args = call.args_as_json_str() if call is not None else "{}"
            return f"call {part.tool_name}({args}) again"
        ref = self._kept.get(part.tool_call_id)
        if ref is not None:
            return f"context_read(id={ref!r}) pages through the whole result"
        if self.keep_result is not None:
            self._kept.setdefault(f"?{part.tool_call_id}", part.tool_name)  # kept, then planned again
        return f"call `{part.tool_name}` again"

    async def _keep_pending(self, current: list[Item]) -> bool:
        """Spill the results the plan elided and that are not kept yet; whether any was."""
        pending = [k[1:] for k in self._kept if k.startswith("?")]
        if not pending or self.keep_result is None:
            for key in [k for k in self._kept if k.startswith("?")]:
                del self._kept[key]
            return False
        keep = self.keep_result
        texts = {
            p.tool_call_id: (p.tool_name, p.model_response_str())
            for i in current
            for p in i.message.parts
            if isinstance(p, ToolReturnPart) and p.tool_call_id in pending
        }

        def work() -> dict[str, str]:
            out: dict[str, str] = {}
            for call_id, (name, text) in texts.items():
                try:
                    out[call_id] = keep(name, call_id, text)
                except Exception as exc:  # losing the copy must not lose the request
                    log.warning("could not keep the elided result of %s: %s", name, exc)
            return out

        kept = await anyio.to_thread.run_sync(work)
        for key in [k for k in self._kept if k.startswith("?")]:
            del self._kept[key]
        self._kept.update(kept)
        return bool(kept)

    def _items(
        self,
        prior: list[ModelMessage],
        injections: list[RunInjection],
        current: list[ModelMessage],
        budget: Budget,
    ) -> tuple[list[Item], list[Item], list[Item]]:
        """The request's items, reusing the chat's unedited prior items when this plan cannot edit them."""
        cache = self.prior_items
        if cache is None or budget.caps:
            return build_items(prior, self.history_sources, injections, current)
        items = build_items(prior, self.history_sources, injections, current, reuse=cache.get(self.chat_key))
        if sum(i.tokens for group in items for i in group) > budget.total:  # the plan will edit: fresh items
            cache.forget(self.chat_key)
            return build_items(prior, self.history_sources, injections, current)
        cache.keep(self.chat_key, items[0])
        return items

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        messages = list(request_context.messages)
        split = _split_current(messages, ctx.run_id)
        prior = split_fused_summary(messages[:split])
        current = strip_injections(messages[split:])  # the records are bookkeeping, not content
        # Rebuilt from the run's own messages (tool results carry them), never from the contextvar.
        injections = run_injections(messages[split:], self.max_injected_messages)
        params = request_context.model_request_parameters
        prefix_hash, instruction_tokens, tool_tokens, instructions_hash, tools_hash = prefix_parts(
            _instructions(params), params
        )
        model = request_context.model.model_name
        previous_usage = self._previous_usage(messages)
        budget = self._budget(instruction_tokens + tool_tokens, model)
        if self.on_room is not None:
            self.on_room(budget.total)
        cap = budget.caps.get("instructions")
        if cap is not None and instruction_tokens > cap and self._steps == 0:
            # Instructions are the user's own text (Agent.md, skills, providers): shipagent reports
            # an overrun rather than cutting them; the ledger shows the section's size.
            log.warning("instructions use %d tokens, over their section cap of %d", instruction_tokens, cap)
        for _attempt in range(2):  # twice only when an elided result had to be kept first
            items = self._items(prior, injections, current, budget)
            plan = plan_request(*items, budget, self._hint)
            if not await self._keep_pending(items[2]):
                break
        sent = render_plan(*items)
        request_context.messages = sent
        self._steps += 1
        estimate = instruction_tokens + tool_tokens + sum(i.tokens for i in plan.items)
        if self.calibration is not None:
            self.calibration.expect(self.chat_key, model, estimate, len(messages))
        if self.observer is not None:
            report = RequestReport(
                run_id=ctx.run_id or "",
                step=self._steps,
                model=model,
                plan=plan,
                prior=items[0],
                injections=items[1],
                current=items[2],
                prefix_hash=prefix_hash,
                instruction_tokens=instruction_tokens,
                tool_tokens=tool_tokens,
                messages=sent,
                estimate=estimate,
                ratio=self.calibration.ratio(model) if self.calibration is not None else 1.0,
                previous_usage=previous_usage,
                instructions_hash=instructions_hash,
                tools_hash=tools_hash,
            )
            try:
                self.observer.on_request(report)
            except Exception:  # watching must never cost the user the turn
                log.exception("request observer failed")
        return request_context

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None
