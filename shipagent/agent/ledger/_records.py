"""What the ledger keeps per model request: sections, items in order with source and edit, prefix hash.

One :class:`RequestRecord` per model request, one JSON line in ``requests.jsonl``. Items name
where each message came from (``history:<seq>``, ``summary:<id>``, ``injection:<fingerprint>``
with the tool call that injected it, ``turn:<n>`` for the run's own messages) and what the budget
did to it, with exactly the parameters needed to redo it (the cut cap, the elision hints), so
:func:`~shipagent.agent.ledger.reconstruct` can rebuild the request from the stores.

On disk the items are columns (``"cols"``, record version 2): a list of sources, a list of token
counts, the sections and edits run-length encoded, and only the items with more to say (a cut, an
elision, tool call ids, an injection's blob) spelled out by index in ``"extra"``. Why: a request
of a long chat carries a thousand history items that are all ``whole``; one object per item made
the ledger the most expensive part of a turn at 1,000 messages. Version-1 lines (``"items"``, one
object per item) are still read.

Versions 3 and 4 (written by :mod:`._encode`; 4 since its runs are found by recorded values, not
object identity, and it carries ``baseFp``) keep only what changed: a line names its ``base``, an
earlier record of the same file, and ``copy`` runs of that record's items; its columns hold the
items in between. :func:`items_from_json` splices them given the records read before it, and a
line whose base is missing or not the one it was written against raises
:class:`LedgerReferenceError` rather than giving a wrong record.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic_ai.messages import ModelRequest, SystemPromptPart, TextPart

from ...errors import ShipAgentError
from ...window.placement import RequestReport
from ...window.sections import Item

__all__ = [
    "LedgerItem",
    "LedgerReferenceError",
    "RequestRecord",
    "blob_key",
    "items_fingerprint",
    "items_json",
    "record_from_report",
]

SECTION_NAMES = (
    "instructions",
    "toolDefinitions",
    "summary",
    "history",
    "injectedSystem",
    "injectedAssistant",
    "turn",
    "toolResults",
)


def items_fingerprint(items: Sequence[_ItemLike]) -> str:
    """A fingerprint of the recorded columns every item has (source, tokens, section, edit).

    A version-4 line names its base's (``baseFp``); the reader computes it over the base items it
    holds, so a splice onto a base other than the one written against fails instead of mixing them.
    """
    columns = [[i.source for i in items], [i.tokens for i in items], [i.section for i in items]]
    columns.append([i.edit for i in items])
    return hashlib.sha256(json.dumps(columns, separators=(",", ":")).encode("utf-8")).hexdigest()[:32]


def blob_key(text: str) -> str:
    """The content address of an injected text (its sha256)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class _ItemLike(Protocol):
    """What the column encoder reads: a :class:`LedgerItem` or a planned :class:`Item`."""

    @property
    def source(self) -> str: ...
    @property
    def section(self) -> str: ...
    @property
    def tokens(self) -> int: ...
    @property
    def original_tokens(self) -> int: ...
    @property
    def edit(self) -> str: ...
    @property
    def cap(self) -> int | None: ...
    @property
    def hints(self) -> dict[str, str]: ...
    @property
    def tool_call_ids(self) -> Sequence[str]: ...


def _runs(values: list[str]) -> list[list[Any]]:
    """``["a", "a", "b"]`` -> ``[["a", 2], ["b", 1]]``."""
    return [[key, sum(1 for _ in group)] for key, group in itertools.groupby(values)]


def _unruns(runs: Any, size: int) -> list[str]:
    out: list[str] = []
    for key, count in runs or ():
        out.extend([str(key)] * int(count))
    if len(out) != size:
        raise ValueError(f"run-length column holds {len(out)} values for {size} items")
    return out


def items_json(items: Sequence[_ItemLike], extras: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The columnar form of ``items`` (see the module doc); ``extras`` adds fields by index."""
    out_extra: dict[str, dict[str, Any]] = {}
    # A plan only changes an item through an edit (cut, elided, dropped), so a "whole" item has
    # nothing more to say unless it carries tool call ids; the test below is all most items get.
    unusual = [n for n, i in enumerate(items) if i.tool_call_ids or i.edit != "whole"]
    for index in unusual:
        item = items[index]
        ids = item.tool_call_ids
        if item.cap is None and not item.hints and not ids and item.original_tokens == item.tokens:
            continue
        extra: dict[str, Any] = {}
        if item.original_tokens != item.tokens:
            extra["originalTokens"] = item.original_tokens
        if item.cap is not None:
            extra["cap"] = item.cap
        if item.hints:
            extra["hints"] = dict(item.hints)
        if ids:
            extra["toolCallIds"] = list(ids)
        out_extra[str(index)] = extra
    for index, more in (extras or {}).items():
        out_extra.setdefault(str(index), {}).update(more)
    cols: dict[str, Any] = {
        "source": [i.source for i in items],
        "tokens": [i.tokens for i in items],
        "section": _runs([i.section for i in items]),
        "edit": _runs([i.edit for i in items]),
    }
    if out_extra:
        cols["extra"] = out_extra
    return cols


class LedgerReferenceError(ShipAgentError, ValueError):
    """A record line (version 3 or 4) names an earlier record that is missing, unreadable or different.

    The record cannot be rebuilt without it, so it is left out (never returned half right); the
    message names the chat, the record and the record it refers to.
    """


def record_label(data: dict[str, Any]) -> str:
    """``ledger record <requestId>:<step> of chat '<key>'``, for error messages about a line."""
    return f"ledger record {data.get('requestId')}:{data.get('step')} of chat {data.get('chatKey', '')!r}"


def _splice(
    literal: list[LedgerItem], data: dict[str, Any], bases: Mapping[str, list[LedgerItem]]
) -> list[LedgerItem]:
    """A version-3/4 record's items: runs copied from its base record, the literal items between them."""
    ref, cols = str(data["base"]), data["cols"]
    base = bases.get(ref)
    if base is None:
        raise LedgerReferenceError(
            f"{record_label(data)} refers to ledger record {ref}, which is missing or unreadable"
        )
    if int(cols.get("baseN", -1)) != len(base):
        raise LedgerReferenceError(
            f"{record_label(data)} refers to ledger record {ref} with {cols.get('baseN')} items, "
            f"but that record holds {len(base)}"
        )
    if "baseFp" in data and str(data["baseFp"]) != items_fingerprint(base):
        raise LedgerReferenceError(
            f"{record_label(data)} refers to ledger record {ref}, but the record read under that "
            "name holds other items than the one it was written against (its fingerprint differs)"
        )
    out: list[LedgerItem] = []
    taken = 0
    for at, start, count in cols.get("copy") or ():
        gap = int(at) - len(out)
        if gap < 0 or taken + gap > len(literal) or int(start) < 0 or int(start) + int(count) > len(base):
            raise ValueError(f"{record_label(data)}: a copied run [{at}, {start}, {count}] does not fit")
        out.extend(literal[taken : taken + gap])
        taken += gap
        out.extend(base[int(start) : int(start) + int(count)])
    out.extend(literal[taken:])
    if len(out) != int(cols.get("n", -1)):
        raise ValueError(f"{record_label(data)}: {len(out)} items rebuilt, the line says {cols.get('n')}")
    return out


def items_from_json(
    data: dict[str, Any], bases: Mapping[str, list[LedgerItem]] | None = None
) -> list[LedgerItem]:
    """The items of a record line: columns (version 2), one object per item (version 1), or the
    columns of what changed since an earlier record of the same file (version 3, ``bases`` maps
    ``<requestId>:<step>`` to the items of the records read before it)."""
    cols = data.get("cols")
    if not isinstance(cols, dict):
        return [LedgerItem.from_json(i) for i in data.get("items") or []]
    if "base" in data:
        return _splice(_column_items(cols), data, bases or {})
    return _column_items(cols)


def _column_items(cols: dict[str, Any]) -> list[LedgerItem]:
    sources = [str(s) for s in cols.get("source") or []]
    tokens = [int(t) for t in cols.get("tokens") or []]
    if len(tokens) != len(sources):
        raise ValueError(f"ledger columns disagree: {len(sources)} sources, {len(tokens)} token counts")
    sections = _unruns(cols.get("section"), len(sources))
    edits = _unruns(cols.get("edit"), len(sources))
    extra = cols.get("extra") or {}
    out: list[LedgerItem] = []
    for index, (source, section, count, edit) in enumerate(
        zip(sources, sections, tokens, edits, strict=True)
    ):
        more = extra.get(str(index)) or {}
        out.append(
            LedgerItem(
                source=source,
                section=section,
                tokens=count,
                original_tokens=int(more.get("originalTokens", count)),
                edit=edit,
                cap=more.get("cap"),
                hints=dict(more.get("hints") or {}),
                tool_call_ids=list(more.get("toolCallIds") or []),
                role=more.get("role"),
                blob=more.get("blob"),
            )
        )
    return out


@dataclass(slots=True)
class LedgerItem:
    """One message of a request: where it came from, what it cost, what was done to it."""

    source: str
    section: str
    tokens: int
    original_tokens: int
    edit: str = "whole"
    cap: int | None = None
    hints: dict[str, str] = field(default_factory=dict)
    tool_call_ids: list[str] = field(default_factory=list)
    role: str | None = None
    """For injections: ``system`` or ``assistant``."""
    blob: str | None = None
    """For injections: the content address of the injected text (kept beside the ledger)."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "source": self.source,
            "section": self.section,
            "tokens": self.tokens,
            "edit": self.edit,
        }
        if self.original_tokens != self.tokens:
            out["originalTokens"] = self.original_tokens
        for key, value in (
            ("cap", self.cap),
            ("hints", self.hints),
            ("toolCallIds", self.tool_call_ids),
            ("role", self.role),
            ("blob", self.blob),
        ):
            if value:
                out[key] = value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LedgerItem:
        return cls(
            source=str(data["source"]),
            section=str(data["section"]),
            tokens=int(data.get("tokens", 0)),
            original_tokens=int(data.get("originalTokens", data.get("tokens", 0))),
            edit=str(data.get("edit", "whole")),
            cap=data.get("cap"),
            hints=dict(data.get("hints") or {}),
            tool_call_ids=list(data.get("toolCallIds") or []),
            role=data.get("role"),
            blob=data.get("blob"),
        )


@dataclass(slots=True)
class RequestRecord:
    """One model request of one turn, as the ledger keeps it."""

    request_id: str
    """The turn's request id (``AgentResult.request_id``)."""
    step: int
    """1 for the turn's first model request, 2 after the first tool round, …"""
    ts: str
    chat_key: str
    model: str
    run_id: str
    prefix_hash: str
    sections: dict[str, int]
    items: list[LedgerItem]
    budget: dict[str, Any] = field(default_factory=dict)
    estimate: int = 0
    ratio: float = 1.0
    input_tokens: int | None = None
    cached_tokens: int | None = None
    summarizer: str | None = None
    """Which summarizer wrote the summary this request carried (``extract`` / ``model``)."""
    layout: int = 1
    """How the request laid out shipagent's notes: ``2`` (every record written now) sent the
    summary and the budget note as user text after the instructions; ``1`` (older records) sent
    them as leading system prompts. :meth:`Ledger.reconstruct` rebuilds each as it was sent."""
    instructions_hash: str = ""
    """The instructions' own hash; ``""`` in records written before it was kept."""
    tools_hash: str = ""
    """The tool definitions' own hash; ``""`` in records written before it was kept."""
    config_hash: str = ""
    """A hash of the agent's loaded configuration (ship.json) when the request was made."""
    bust: dict[str, str] | None = None
    """How the request broke the chat's cacheable prefix, ``{"section", "reason"}``; ``None`` when
    it only appended to the previous request (see :mod:`._busts`)."""

    @property
    def id(self) -> str:
        return f"{self.request_id}:{self.step}"

    @property
    def total_tokens(self) -> int:
        return sum(self.sections.values())

    def to_json(self) -> dict[str, Any]:
        injected = {n: {"role": i.role, "blob": i.blob} for n, i in enumerate(self.items) if i.role or i.blob}
        out: dict[str, Any] = {
            "v": 2,
            "requestId": self.request_id,
            "step": self.step,
            "ts": self.ts,
            "chatKey": self.chat_key,
            "model": self.model,
            "runId": self.run_id,
            "prefixHash": self.prefix_hash,
            "sections": self.sections,
            "cols": items_json(self.items, injected),
            "budget": self.budget,
            "estimate": self.estimate,
            "ratio": self.ratio,
        }
        for key, value in (
            ("inputTokens", self.input_tokens),
            ("cachedTokens", self.cached_tokens),
            ("summarizer", self.summarizer),
            ("layout", self.layout if self.layout != 1 else None),
            ("instructionsHash", self.instructions_hash or None),
            ("toolsHash", self.tools_hash or None),
            ("configHash", self.config_hash or None),
            ("bust", self.bust),
        ):
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_json(
        cls, data: dict[str, Any], bases: Mapping[str, list[LedgerItem]] | None = None
    ) -> RequestRecord:
        """A record from its line; ``bases``: the items of earlier records (see :func:`items_from_json`)."""
        return cls(
            request_id=str(data["requestId"]),
            step=int(data["step"]),
            ts=str(data.get("ts", "")),
            chat_key=str(data.get("chatKey", "")),
            model=str(data.get("model", "")),
            run_id=str(data.get("runId", "")),
            prefix_hash=str(data.get("prefixHash", "")),
            sections={str(k): int(v) for k, v in (data.get("sections") or {}).items()},
            items=items_from_json(data, bases),
            budget=dict(data.get("budget") or {}),
            estimate=int(data.get("estimate", 0)),
            ratio=float(data.get("ratio", 1.0)),
            input_tokens=data.get("inputTokens"),
            cached_tokens=data.get("cachedTokens"),
            summarizer=data.get("summarizer"),
            layout=int(data.get("layout", 1)),
            instructions_hash=str(data.get("instructionsHash", "")),
            tools_hash=str(data.get("toolsHash", "")),
            config_hash=str(data.get("configHash", "")),
            bust=_bust(data.get("bust")),
        )


def _bust(value: Any) -> dict[str, str] | None:
    """A line's ``bust``, or None when it has none (older lines) or not a readable one."""
    if not isinstance(value, dict):
        return None
    return {str(k): str(v) for k, v in value.items()}


LAYOUT = 2
"""The layout records are written with (see :attr:`RequestRecord.layout`)."""


def injected_text(item: Item) -> str:
    part = item.message.parts[0]
    return part.content if isinstance(part, SystemPromptPart | TextPart) else ""


def _ledger_item(item: Item, blobs: dict[str, str]) -> LedgerItem:
    out = LedgerItem(
        source=item.source,
        section=item.section,
        tokens=item.tokens,
        original_tokens=item.original_tokens,
        edit=item.edit,
        cap=item.cap,
        hints=dict(item.hints),
        tool_call_ids=list(item.tool_call_ids),
    )
    if item.section == "injections":
        text = injected_text(item)
        out.role = "system" if isinstance(item.message, ModelRequest) else "assistant"
        out.blob = blob_key(text)
        blobs[out.blob] = text
    return out


def record_from_report(
    report: RequestReport, *, request_id: str, chat_key: str, ts: str, blobs: dict[str, str]
) -> RequestRecord:
    """The ledger record of one request; injected texts go to ``blobs`` (address -> text)."""
    # in the order sent: summary, injected system, history, injected assistant, the run
    systems = [i for i in report.injections if isinstance(i.message, ModelRequest)]
    assistants = [i for i in report.injections if not isinstance(i.message, ModelRequest)]
    summary = [i for i in report.prior if i.section == "summary"]
    history = [i for i in report.prior if i.section != "summary"]
    ordered = [*summary, *systems, *history, *assistants, *report.current]
    items = [_ledger_item(i, blobs) for i in ordered]
    budget = {"total": report.plan.budget.total, "caps": dict(report.plan.budget.caps)}
    summarizer = None
    for item in report.prior:
        # the part's metadata survives pydantic-ai merging the summary into the next request
        first = item.message.parts[0] if item.section == "summary" and item.message.parts else None
        meta = first.metadata if isinstance(first, SystemPromptPart) else None
        info = meta.get("shipagent") if isinstance(meta, dict) else None
        if isinstance(info, dict) and isinstance(info.get("summarizer"), str):
            summarizer = info["summarizer"]
    return RequestRecord(
        request_id=request_id,
        step=report.step,
        ts=ts,
        chat_key=chat_key,
        model=report.model,
        run_id=report.run_id,
        prefix_hash=report.prefix_hash,
        sections=report.section_tokens(),
        items=items,
        budget=budget,
        estimate=report.estimate,
        ratio=report.ratio,
        summarizer=summarizer,
        layout=LAYOUT,
        instructions_hash=report.instructions_hash,
        tools_hash=report.tools_hash,
    )
