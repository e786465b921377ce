"""What the ledger keeps per model request: sections, items in order with source and edit, prefix hash.

One :class:`RequestRecord` per model request, one JSON line in ``requests.jsonl``. Items name
where each message came from (``history:<seq>``, ``summary:<id>``, ``injection:<fingerprint>``
with the tool call that injected it, ``turn:<n>`` for the run's own messages) and what the budget
did to it, with exactly the parameters needed to redo it (the cut cap, the elision hints), so
:func:`~shipagent.ledger.reconstruct` can rebuild the request from the stores.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import ModelRequest, SystemPromptPart, TextPart

from ..history.placement import RequestReport
from ..history.sections import Item

__all__ = ["LedgerItem", "RequestRecord", "blob_key", "record_from_report"]

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


def blob_key(text: str) -> str:
    """The content address of an injected text (its sha256)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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

    @property
    def id(self) -> str:
        return f"{self.request_id}:{self.step}"

    @property
    def total_tokens(self) -> int:
        return sum(self.sections.values())

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "v": 1,
            "requestId": self.request_id,
            "step": self.step,
            "ts": self.ts,
            "chatKey": self.chat_key,
            "model": self.model,
            "runId": self.run_id,
            "prefixHash": self.prefix_hash,
            "sections": self.sections,
            "items": [i.to_json() for i in self.items],
            "budget": self.budget,
            "estimate": self.estimate,
            "ratio": self.ratio,
        }
        for key, value in (
            ("inputTokens", self.input_tokens),
            ("cachedTokens", self.cached_tokens),
            ("summarizer", self.summarizer),
        ):
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RequestRecord:
        return cls(
            request_id=str(data["requestId"]),
            step=int(data["step"]),
            ts=str(data.get("ts", "")),
            chat_key=str(data.get("chatKey", "")),
            model=str(data.get("model", "")),
            run_id=str(data.get("runId", "")),
            prefix_hash=str(data.get("prefixHash", "")),
            sections={str(k): int(v) for k, v in (data.get("sections") or {}).items()},
            items=[LedgerItem.from_json(i) for i in data.get("items") or []],
            budget=dict(data.get("budget") or {}),
            estimate=int(data.get("estimate", 0)),
            ratio=float(data.get("ratio", 1.0)),
            input_tokens=data.get("inputTokens"),
            cached_tokens=data.get("cachedTokens"),
            summarizer=data.get("summarizer"),
        )


def _injected_text(item: Item) -> str:
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
        text = _injected_text(item)
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
    )
