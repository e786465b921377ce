"""Cache busts: which part of a request changed against the chat's previous request, and why.

A provider's prompt cache (and llama-server's slot) serves the longest prefix a request shares
with the ones before it. A chat that only appends keeps that prefix: every request starts with the
previous request, byte for byte. A request that does not — a *bust* — is evaluated again from the
first difference on, at full price. Some busts are the price of a bounded context (a compaction
folds the history into a new summary) or of an edit the user made (the agent's configuration
changed); the others are worth finding, and the ledger says which section broke the prefix:

- ``tools`` / ``instructions``: their own hashes differ (:func:`~shipagent.window.placement.prefix_parts`);
  reason ``config`` when the agent's configuration hash changed too, else ``changed`` (an MCP server
  that relisted different tools, a provider whose instructions changed mid-chat);
- ``summary``: a new summary (reason ``compaction``), or the same one sent differently;
- ``injections``: an injected message that was there is gone or another took its place (injections
  live for one run, so a run that injected leaves the next turn a bust);
- ``history``: a history message sent before is gone or sent differently (a budget cut);
- ``turn``: within a run, one of the run's own messages sent differently in a later step.

What is compared is cheap and bounded: a :class:`Shape` keeps the previous request's history rows
(the same list :mod:`._encode` keeps for its base; the comparison is one list comparison in C), and
the few items of its run and injections; only the items after the previous request's history are
compared one by one. Across turns the previous run's own messages (``turn:<n>``) are history in
the next request under other names, so they are compared by what they cost and how they were sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.messages import ModelRequest

from ...window.placement import RequestReport
from ._records import LAYOUT, LedgerItem, RequestRecord

__all__ = ["Shape", "bust_between", "shape_of_record", "shape_of_report"]

Row = tuple[Any, ...]
Key = tuple[str, int, str]
"""An item past the history, as compared: ``(injection source or "message", tokens, edit)``."""


@dataclass(slots=True)
class Shape:
    """What the chat's next request must start with to only append: a request, condensed."""

    run_id: str
    tools_hash: str
    instructions_hash: str
    config_hash: str
    summary: int
    """1 when ``prior[0]`` is the summary, else 0."""
    systems: list[Key]
    """Injected system messages (sent ahead of the history)."""
    prior: list[Row]
    """The summary's and the history's rows as :mod:`._encode` records them (``_rows``): the same
    list its base keeps, not a copy."""
    tail: list[Key]
    """After the history: injected assistant messages, then the run's own messages."""
    tail_sections: list[str]
    """Per tail item: ``injections`` or ``turn``."""
    layout: int = LAYOUT
    """How the summary was sent (:attr:`RequestRecord.layout`): a change moves it."""


def _key(item: Any) -> Key:
    source = item.source if item.section == "injections" else "message"
    return (source, int(item.tokens), str(item.edit))


def _row_of(item: LedgerItem) -> Row:
    """A recorded item as :mod:`._encode` snapshots a planned one (so the two compare equal)."""
    row: Row = (
        item.source,
        item.tokens,
        item.section,
        item.edit,
        item.original_tokens,
        item.cap,
        tuple(item.tool_call_ids),
    )
    return (*row, tuple(sorted(item.hints.items()))) if item.hints else row


def shape_of_report(report: RequestReport, rows: list[Row], summary: int, config_hash: str) -> Shape:
    """The shape of a request about to be recorded; ``rows``: its prior items' rows (``_rows``)."""
    systems = [_key(i) for i in report.injections if isinstance(i.message, ModelRequest)]
    assistants = [_key(i) for i in report.injections if not isinstance(i.message, ModelRequest)]
    tail = [*assistants, *(("message", i.tokens, str(i.edit)) for i in report.current)]
    sections = ["injections"] * len(assistants) + ["turn"] * len(report.current)
    return Shape(
        report.run_id,
        report.tools_hash,
        report.instructions_hash,
        config_hash,
        summary,
        systems,
        rows,
        tail,
        sections,
    )


def shape_of_record(record: RequestRecord) -> Shape:
    """The shape of a recorded request (the chat's last one, read back after a restart)."""
    items = record.items
    prior = [_row_of(i) for i in items if i.section in ("summary", "history")]
    summary = 1 if items and items[0].section == "summary" else 0
    systems = [_key(i) for i in items if i.section == "injections" and i.role == "system"]
    tail_items = [
        i
        for i in items
        if (i.section == "injections" and i.role != "system") or i.section in ("turn", "toolResults")
    ]
    return Shape(
        record.run_id,
        record.tools_hash,
        record.instructions_hash,
        record.config_hash,
        summary,
        systems,
        prior,
        [_key(i) for i in tail_items],
        ["injections" if i.section == "injections" else "turn" for i in tail_items],
        record.layout,
    )


def _prefix_changed(before: Shape, after: Shape) -> dict[str, str] | None:
    for section, old, new in (
        ("tools", before.tools_hash, after.tools_hash),
        ("instructions", before.instructions_hash, after.instructions_hash),
    ):
        if old and new and old != new:  # a record from before these hashes says nothing
            config = before.config_hash and after.config_hash and before.config_hash != after.config_hash
            return {"section": section, "reason": "config" if config else "changed"}
    return None


def _history_changed(before: Shape, after: Shape) -> bool:
    """Whether ``after``'s prior rows do not start with ``before``'s (their summaries are equal)."""
    old, new = before.prior, after.prior
    if len(new) < len(old):
        return True
    return (new[: len(old)] if len(new) > len(old) else new) != old


def _tail_change(before: Shape, after: Shape) -> str | None:
    """The section of the first item after the previous request's history that was not kept."""
    start, wanted = len(before.prior), len(before.tail)
    new: Sequence[Key] = [
        ("message", int(row[1]), str(row[3])) for row in after.prior[start : start + wanted]
    ]
    if len(new) < wanted:
        new = [*new, *after.tail[: wanted - len(new)]]
    for index, old in enumerate(before.tail):
        got = new[index] if index < len(new) else None
        if got == old:
            continue
        if before.tail_sections[index] == "injections" or (got is not None and got[0] != "message"):
            return "injections"
        return "turn" if after.run_id == before.run_id else "history"
    return None


def bust_between(before: Shape | None, after: Shape) -> dict[str, str] | None:
    """``{"section": ..., "reason": ...}`` when ``after`` does not start with ``before``, else None.

    Compared in the order a request is sent: tool definitions, instructions, then the messages
    (summary, injected system messages, history, then what followed the history).
    """
    if before is None:
        return None
    changed = _prefix_changed(before, after)
    if changed is not None:
        return changed
    old = before.prior[0] if before.summary else None
    new = after.prior[0] if after.summary else None
    if new is not None and (old is None or old[0] != new[0]):  # another summary: rows start with the source
        return {"section": "summary", "reason": "compaction"}
    if old != new or (new is not None and before.layout != after.layout):
        return {"section": "summary", "reason": "changed"}
    if before.systems != after.systems:
        return {"section": "injections", "reason": "changed"}
    if _history_changed(before, after):
        return {"section": "history", "reason": "changed"}
    section = _tail_change(before, after)
    return None if section is None else {"section": section, "reason": "changed"}
