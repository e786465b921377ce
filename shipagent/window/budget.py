"""Sectioned token budgets: each section gives way by its own policy, and eviction comes before mangling.

Before each model request :func:`plan_request` (pure apart from the ``hint`` callback) decides,
for every message the request would carry, an edit (see :mod:`shipagent.window.sections`):

1. any single part larger than its cap is cut to head + tail (a quarter of the budget; this run's
   tool results may use their section cap, half the budget by default);
2. each section with a configured cap (``context.budget.sections``) is brought under it by its own
   policy — history: drop the oldest messages, never splitting a tool call from its result, the
   summary last; injections: cut the oldest first (halving), then drop the oldest; tool results:
   elide the older results of this run, oldest first, before the newest is touched;
3. if the whole request is still over budget: elide older tool results, then drop history, then
   cut injections, and only then cut what is left, oldest first.

Why elide before cutting: a cut tool result is no longer valid JSON, and a model paging a big file
with ``context_read`` needs the page it just asked for whole. An elided older page costs a short
stub that says exactly how to read it again. The chat's stored history is never changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    ToolCallPart,
    ToolReturnPart,
)

from .compaction import MARKER, is_summary
from .sections import Item, cap_message, message_facts, message_tokens, render_item

__all__ = ["Budget", "Plan", "budget_note", "fit_to_budget", "message_tokens", "plan_request"]

_MIN_PART_CAP = 64
_NOTE_TOKENS = 60

Hint = Callable[[ToolReturnPart, ToolCallPart | None], str]
"""How to get an elided result back, given the result and the call that asked for it."""


@dataclass(frozen=True, slots=True)
class Budget:
    """The token budget of the messages of one request, and optional per-section caps."""

    total: int
    caps: Mapping[str, int] = field(default_factory=dict)
    """Resolved section caps in tokens: ``injections``, ``history`` (summary included), ``toolResults``."""

    @property
    def part_cap(self) -> int:
        return max(self.total // 4, _MIN_PART_CAP)

    @property
    def result_cap(self) -> int:
        """The most one tool result of this run may cost before it is cut."""
        cap = self.caps.get("toolResults")
        return max(min(cap, self.total) if cap else self.total // 2, _MIN_PART_CAP)


@dataclass(slots=True)
class Plan:
    """Every item of a request with its edit; :meth:`prior`/:meth:`current` render them."""

    items: list[Item]
    budget: Budget

    def dropped_history(self) -> int:
        return sum(1 for i in self.items if i.section == "history" and i.edit == "dropped")

    def section_tokens(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for item in self.items:
            out[item.section] = out.get(item.section, 0) + item.tokens
        return out


def budget_note(count: int, when: datetime) -> ModelRequest:
    """The system line that says older messages were left out (sent after the summary).

    ``when`` is the newest dropped message's time, so the note is the same whenever it is rebuilt.
    """
    text = (
        f"[shipagent left out {count} older messages of this chat from this request "
        "to stay within the token budget; they are still on disk — call "
        "chat_load_history to see them.]"
    )
    return ModelRequest(
        parts=[SystemPromptPart(text, timestamp=when)],
        metadata={MARKER: {"kind": "budget-note"}},
        timestamp=when,
    )


def _tokens(items: Sequence[Item]) -> int:
    return sum(i.tokens for i in items)


def _refresh(item: Item) -> None:
    rendered = render_item(item)
    item.tokens = message_tokens(rendered) if rendered is not None else 0


def _cut(item: Item, cap: int) -> bool:
    """Cut ``item``'s parts to ``cap`` tokens; whether anything changed."""
    current = render_item(item)
    if current is None or cap_message(current, cap) is current:
        return False
    item.cap = cap if item.cap is None else min(item.cap, cap)
    if item.edit == "whole":
        item.edit = "cut"
    _refresh(item)
    return True


def _calls(items: Sequence[Item]) -> dict[str, ToolCallPart]:
    return {
        p.tool_call_id: p
        for i in items
        if isinstance(i.message, ModelResponse)
        for p in i.message.parts
        if isinstance(p, ToolCallPart)
    }


def _elide(item: Item, calls: Mapping[str, ToolCallPart], hint: Hint) -> None:
    assert isinstance(item.message, ModelRequest)
    for part in item.message.parts:
        if isinstance(part, ToolReturnPart):
            item.hints[part.tool_call_id] = hint(part, calls.get(part.tool_call_id))
    item.edit = "elided"
    _refresh(item)


def _elide_older_results(
    results: list[Item], calls: Mapping[str, ToolCallPart], hint: Hint, over: Callable[[], bool]
) -> None:
    """Elide this run's tool results oldest first, never the newest, while ``over()``."""
    for item in results[:-1]:
        if not over():
            return
        if item.edit != "elided":
            _elide(item, calls, hint)


def _orphan_start(body: Sequence[Item], start: int) -> bool:
    """Whether ``body[start]`` answers a tool call made before ``start``."""
    first = body[start].message
    if not isinstance(first, ModelRequest):
        return False
    returns = {p.tool_call_id for p in first.parts if isinstance(p, ToolReturnPart | RetryPromptPart)}
    return bool(returns & set(_calls(body[:start])))


def _drop_history(prior: list[Item], room: int) -> None:
    """Drop the oldest history (pair-safe) and then the summary until ``prior`` fits ``room``."""
    summary = [i for i in prior if i.section == "summary"]
    body = [i for i in prior if i.section == "history"]
    kept = _tokens(body)
    start = 0
    while start < len(body) and (_tokens(summary) + kept + _NOTE_TOKENS > room or _orphan_start(body, start)):
        kept -= body[start].tokens
        start += 1
    for item in body[:start]:
        item.edit, item.tokens = "dropped", 0
    if _tokens(summary) + kept + (_NOTE_TOKENS if start else 0) > room:
        for item in summary:
            item.edit, item.tokens = "dropped", 0


def _shrink_injections(injections: list[Item], room: int) -> None:
    """Cut the oldest injections first (halving the cap), then drop the oldest, until they fit."""
    cap = max((i.tokens for i in injections), default=0)
    while _tokens(injections) > room and cap > _MIN_PART_CAP:
        cap //= 2
        for item in injections:
            if _cut(item, cap) and _tokens(injections) <= room:
                return
    for item in injections:
        if _tokens(injections) <= room:
            return
        item.edit, item.tokens = "dropped", 0


def plan_request(
    prior: Sequence[Item], injections: Sequence[Item], current: Sequence[Item], budget: Budget, hint: Hint
) -> Plan:
    """Decide each item's edit so the request fits ``budget`` (see the module doc for the order)."""
    items = [*prior, *injections, *current]
    for item in items:
        if not item.original_tokens:  # ``build_items`` counts them already
            item.original_tokens = item.tokens = message_facts(item.message)[0]
    plan = Plan(items, budget)
    if _tokens(items) <= budget.total and not budget.caps:
        return plan
    prior_l, inj_l, cur_l = list(prior), list(injections), list(current)
    results = [i for i in cur_l if i.section == "toolResults" and i.is_tool_result]
    calls = _calls(cur_l)
    # 1. single parts over their cap
    for item in [*prior_l, *cur_l]:
        _cut(item, budget.result_cap if item.section == "toolResults" else budget.part_cap)
    # 2. section caps, each by its own policy
    if (inj_cap := budget.caps.get("injections")) is not None:
        _shrink_injections(inj_l, inj_cap)
    if (history_cap := budget.caps.get("history")) is not None and _tokens(prior_l) > history_cap:
        _drop_history(prior_l, history_cap)
    if (result_cap := budget.caps.get("toolResults")) is not None:
        section = [i for i in cur_l if i.section == "toolResults"]
        _elide_older_results(results, calls, hint, lambda: _tokens(section) > result_cap)

    # 3. the whole request
    def over() -> bool:
        return _tokens(items) + (_NOTE_TOKENS if plan.dropped_history() else 0) > budget.total

    _elide_older_results(results, calls, hint, over)
    if over():
        _drop_history(prior_l, budget.total - _tokens(inj_l) - _tokens(cur_l))
    if over():
        _shrink_injections(inj_l, max(budget.total - _tokens(prior_l) - _tokens(cur_l), 0))
    cap = budget.part_cap
    while over() and cap > _MIN_PART_CAP:
        cap //= 2
        for item in items:
            if _cut(item, cap) and not over():
                break
    return plan


def _plain_items(
    prior: Sequence[ModelMessage], current: Sequence[ModelMessage]
) -> tuple[list[Item], list[Item]]:
    before = [
        Item(m, "summary" if n == 0 and is_summary(m) else "history", f"history:@{n}")
        for n, m in enumerate(prior)
    ]
    run = [Item(m, "turn" if n == 0 else "toolResults", f"turn:{n}") for n, m in enumerate(current)]
    return before, run


def render_prior(items: Sequence[Item]) -> list[ModelMessage]:
    """The prior-history items as sent: the summary, the budget note if any was dropped, the rest."""
    out: list[ModelMessage] = []
    gone = [i.message for i in items if i.section == "history" and i.edit == "dropped"]
    if not gone:  # the common case: nothing dropped, no note — each item as it renders
        return [m for m in map(render_item, items) if m is not None]
    note: ModelRequest | None = budget_note(len(gone), gone[-1].timestamp or datetime.now(UTC))
    for item in items:
        if note is not None and item.section == "history" and item.edit != "dropped":
            out.append(note)
            note = None
        message = render_item(item)
        if message is not None:
            out.append(message)
    if note is not None:
        out.append(note)
    return out


def _no_hint(part: ToolReturnPart, call: ToolCallPart | None) -> str:
    return f"call `{part.tool_name}` again"


def fit_to_budget(
    prior: Sequence[ModelMessage], current: Sequence[ModelMessage], budget: int
) -> tuple[list[ModelMessage], list[ModelMessage]]:
    """``(prior, current)`` planned and rendered to fit ``budget`` tokens (no section caps).

    ``prior`` is the chat's history before this run; ``current`` the run's own messages starting
    with the user's request, which are never dropped.
    """
    before, run = _plain_items(prior, current)
    plan_request(before, [], run, Budget(budget), _no_hint)
    rendered = [render_item(i) for i in run]
    return render_prior(before), [m for m in rendered if m is not None]
