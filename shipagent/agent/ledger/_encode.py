"""Record lines straight from the context window's reports, each written against the one before.

Why a line refers to an earlier one: a request of a long chat carries every history message, and
the chat's next request carries the same ones plus a few. Writing each request's full columns
(version 2) made the ledger's cost per turn grow with the chat: at 1,000 messages every request
encoded 1,000 items into a ~20 KB line. A version-4 line (version 3 before it) names its ``base``
— the record this process wrote just before for the same chat, in the same file — and holds
``copy`` runs ``[at, from, count]`` (items ``at…`` of this request are items ``from…`` of the
base, as they were recorded there) and, in the version-2 columns, only the items between the
runs. ``baseN`` (the base's item count) and ``n`` (this record's) let a reader check the splice;
version 4 adds ``baseFp``, a fingerprint of the base's recorded columns (:func:`items_fingerprint`),
so a reader also checks that the base it holds is, item by item, the one the line was written
against.

How the runs are found: by what was recorded, not by which object recorded it. Version 3 compared
the history :class:`~shipagent.window.sections.Item` objects by identity (the context window
reuses the same objects from one request to the next), which was right only while nothing edited
a reused item in place; an edit made then went unrecorded, the line saying "as in the base". Version
4 keeps, for the base, a snapshot of each prior item's recorded values (source, tokens, section,
edit, original tokens, cap, tool call ids, hints) as immutable tuples, and compares this request's
values with them (a list comparison in C for the usual case, a chat that grew by a turn). An item
edited in place no longer equals its snapshot, so it is written literally. Injections and the run's
own messages are always written literally.

A line is written whole (version 2, the base's format) when there is no safe base: the first
request of a chat in this process, the first line of a fresh file after rotation (the previous
generation is dropped at the next rotation, so a line never refers across files), or when the
file changed under this process (replaced or cut short); and every :data:`WHOLE_EVERY` lines, so
one line damaged on disk costs at most that many records (each is left out with an error naming
it, never rebuilt wrong).
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass
from typing import Any

from pydantic_ai.messages import ModelRequest, SystemPromptPart

from ...window.placement import RequestReport
from ...window.sections import Item
from ._busts import Shape, bust_between, shape_of_report
from ._records import LAYOUT, blob_key, injected_text, items_fingerprint, items_json

__all__ = ["WHOLE_EVERY", "Base", "encode_report"]

_TOKENS = operator.attrgetter("tokens")
_ROW = operator.attrgetter("source", "tokens", "section", "edit", "original_tokens", "cap", "tool_call_ids")
Row = tuple[Any, ...]
"""An item's recorded values, immutable: ``_ROW``'s fields, plus its hints (sorted pairs) when it has any."""
WHOLE_EVERY = 64
"""At most this many lines in a row are written against a base: a line damaged on disk makes the
lines that refer to it (and to them) unreadable, so this bounds what one damaged line costs."""


@dataclass(slots=True)
class Base:
    """The last record written for a chat, kept in memory so the next one can refer to it."""

    record_id: str
    """``<requestId>:<step>``, as the next line names it."""
    rows: list[Row]
    """The recorded values of the report's prior items (summary and history), as written."""
    summary: int
    """1 when ``prior[0]`` is the summary (sent first, before the injected system messages)."""
    systems: int
    """Injected system messages, sent between the summary and the history."""
    size: int
    """Items in the record."""
    prior_tokens: int
    """The prior items' tokens (summary and history), so the next record sums only what changed."""
    depth: int = 0
    """Lines written against a base since the last whole line (see :data:`WHOLE_EVERY`)."""
    mark: tuple[int, int, int] | None = None
    """``(device, inode, size)`` of the file right after the record was appended."""
    fingerprint: str = ""
    """:func:`items_fingerprint` of the record's items, which the next line names as ``baseFp``."""
    shape: Shape | None = None
    """What the chat's next request must start with to only append (:mod:`._busts`)."""


def _rows(items: list[Item]) -> list[Row]:
    """Snapshots of what the ledger records of ``items``: values, never references to mutable ones."""
    rows = list(map(_ROW, items))
    for index in [n for n, item in enumerate(items) if item.hints]:
        rows[index] = (*rows[index], tuple(sorted(items[index].hints.items())))
    return rows


Segment = tuple[list[Item], int, int]
"""``(items, begin, end)``: ``items[begin:end]`` without copying them."""


def _segments(report: RequestReport) -> tuple[list[Segment], int, int]:
    """The request's items in the order sent (summary, injected system, history, injected
    assistant, the run) as segments; whether the first is the summary; how many injected system
    messages follow it."""
    systems = [i for i in report.injections if isinstance(i.message, ModelRequest)]
    assistants = [i for i in report.injections if not isinstance(i.message, ModelRequest)]
    prior, current = report.prior, report.current
    summary = 1 if prior and prior[0].section == "summary" else 0
    segments = [
        (prior, 0, summary),
        (systems, 0, len(systems)),
        (prior, summary, len(prior)),
        (assistants, 0, len(assistants)),
        (current, 0, len(current)),
    ]
    return segments, summary, len(systems)


def _take(segments: list[Segment], low: int, high: int, out: list[Item]) -> None:
    """Add the items at positions ``low:high`` of the order sent to ``out``."""
    position = 0
    for items, begin, end in segments:
        start, stop = max(low, position), min(high, position + end - begin)
        if start < stop:
            out += items[begin + start - position : begin + stop - position]
        position += end - begin


def _sections(report: RequestReport, summary: int, prior_tokens: int) -> dict[str, int]:
    """``report.section_tokens()`` without a loop over the history.

    ``build_items`` gives only the first prior item the ``summary`` section and all the others
    ``history``, so the history's share is the prior total (``prior_tokens``) less the summary.
    """
    prior = report.prior
    summary_tokens = prior[0].tokens if summary else 0
    current: dict[str, int] = {}
    for item in report.current:
        current[item.section] = current.get(item.section, 0) + item.tokens
    systems = sum(i.tokens for i in report.injections if isinstance(i.message, ModelRequest))
    injected = sum(i.tokens for i in report.injections)
    return {
        "instructions": report.instruction_tokens,
        "toolDefinitions": report.tool_tokens,
        "summary": summary_tokens,
        "history": prior_tokens - summary_tokens,
        "injectedSystem": systems,
        "injectedAssistant": injected - systems,
        "turn": current.get("turn", 0),
        "toolResults": current.get("toolResults", 0),
    }


def _same_runs(new: list[Row], old: list[Row]) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of positions where ``new`` records what ``old`` recorded.

    The usual case first: every common position holds equal values (a chat that grew by a turn),
    which a list comparison checks in C.
    """
    common = min(len(new), len(old))
    if common and (new[:common] == old if len(new) >= len(old) else new == old[:common]):
        return [(0, common)]
    flags = list(map(operator.eq, new, old))
    runs: list[tuple[int, int]] = []
    index, size = 0, len(flags)
    while index < size:
        try:
            start = flags.index(True, index)
        except ValueError:
            break
        try:
            end = flags.index(False, start)
        except ValueError:
            end = size
        runs.append((start, end))
        index = end
    return runs


def _gap_tokens(rows: list[Row], runs: list[tuple[int, int]]) -> int:
    """The tokens of ``rows`` outside ``runs``."""
    total, start = 0, 0
    for begin, end in [*runs, (len(rows), len(rows))]:
        if begin > start:
            total += sum(row[1] for row in rows[start:begin])
        start = end
    return total


def _copies(prior: list[Row], summary: int, systems: int, base: Base) -> tuple[list[list[int]], int]:
    """The ``[at, from, count]`` runs of this request's prior items that are the base's, and the
    prior items' tokens (the base's, less what was not copied, plus what is new)."""
    out: list[list[int]] = []
    runs = _same_runs(prior, base.rows)
    cuts = {summary, base.summary}  # a run never spans the summary's end in either request
    for start, end in runs:
        edges = [start, *sorted(c for c in cuts if start < c < end), end]
        for a, b in itertools.pairwise(edges):
            at = a + (systems if a >= summary else 0)
            source = a + (base.systems if a >= base.summary else 0)
            out.append([at, source, b - a])
    tokens = base.prior_tokens - _gap_tokens(base.rows, runs) + _gap_tokens(prior, runs)
    return out, tokens


def _summarizer(report: RequestReport) -> str | None:
    """Which summarizer wrote the summary the request carried (the part's metadata says)."""
    for item in report.prior[:1]:
        # the part's metadata survives pydantic-ai merging the summary into the next request
        first = item.message.parts[0] if item.section == "summary" and item.message.parts else None
        meta = first.metadata if isinstance(first, SystemPromptPart) else None
        info = meta.get("shipagent") if isinstance(meta, dict) else None
        if isinstance(info, dict) and isinstance(info.get("summarizer"), str):
            return str(info["summarizer"])
    return None


def encode_report(
    report: RequestReport,
    base: Base | None,
    *,
    request_id: str,
    chat_key: str,
    ts: str,
    blobs: dict[str, str],
    usage: tuple[int, int] | None = None,
    previous: Shape | None = None,
    config_hash: str = "",
) -> tuple[dict[str, Any], Base]:
    """The record line of one request, against ``base`` when given; and the base it makes.

    Injected texts go to ``blobs`` (address -> text). Without a base the line is the version-2
    line ``record_from_report(...).to_json()`` gives, plus what only the chat's previous request
    tells: ``bust`` against ``previous`` (the shape of the chat's last request, whether or not the
    line may refer to it) and the agent's ``config_hash``. The base made carries this request's
    shape, for the next.
    """
    segments, summary, systems = _segments(report)
    size = sum(end - begin for _, begin, end in segments)
    rows = _rows(report.prior)
    if base is not None and base.depth < WHOLE_EVERY:
        copies, prior_tokens = _copies(rows, summary, systems, base)
    else:
        copies, prior_tokens = [], sum(map(_TOKENS, report.prior))
    literal: list[Item] = []  # the items not copied from the base: all of them without one
    taken = 0
    for at, _source, count in copies:
        _take(segments, taken, at, literal)
        taken = at + count
    _take(segments, taken, size, literal)
    injected: dict[int, dict[str, Any]] = {}
    for index, item in enumerate(literal):  # injections are never copied: fresh on every request
        if item.section == "injections":
            text = injected_text(item)
            key = blob_key(text)
            blobs[key] = text
            role = "system" if isinstance(item.message, ModelRequest) else "assistant"
            injected[index] = {"role": role, "blob": key}
    cols = items_json(literal, injected)
    out: dict[str, Any] = {
        "v": 4 if copies else 2,
        "requestId": request_id,
        "step": report.step,
        "ts": ts,
        "chatKey": chat_key,
        "model": report.model,
        "runId": report.run_id,
        "prefixHash": report.prefix_hash,
        "sections": _sections(report, summary, prior_tokens),
    }
    depth = 0
    if copies and base is not None:
        depth = base.depth + 1
        out["base"] = base.record_id
        out["baseFp"] = base.fingerprint
        cols.update(n=size, baseN=base.size, copy=copies)
    out["cols"] = cols
    out["budget"] = {"total": report.plan.budget.total, "caps": dict(report.plan.budget.caps)}
    out["estimate"] = report.estimate
    out["ratio"] = report.ratio
    if usage is not None:
        out["inputTokens"], out["cachedTokens"] = usage
    if (summarizer := _summarizer(report)) is not None:
        out["summarizer"] = summarizer
    out["layout"] = LAYOUT  # shipagent's notes sent as user text after the instructions
    for key, value in (
        ("instructionsHash", report.instructions_hash),
        ("toolsHash", report.tools_hash),
        ("configHash", config_hash),
    ):
        if value:
            out[key] = value
    shape = shape_of_report(report, rows, summary, config_hash)
    if (bust := bust_between(previous, shape)) is not None:
        out["bust"] = bust
    everything: list[Item] = []
    _take(segments, 0, size, everything)
    made = Base(f"{request_id}:{report.step}", rows, summary, systems, size, prior_tokens, depth)
    made.fingerprint = items_fingerprint(everything)
    made.shape = shape
    return out, made
