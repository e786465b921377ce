"""The ledger room: listens to the context window, keeps records, rebuilds what was sent.

The core's :class:`~shipagent.history.placement.ContextWindow` reports every request it shapes
to a :class:`~shipagent.history.placement.RequestObserver`; a :class:`LedgerRecorder` is that
observer for one turn. It only builds records in memory (no I/O, no thread hop per request); the
agent hands :meth:`Ledger.flush` to ``ChatHistories.commit(also=...)`` so a turn's records are
written in the same worker-thread hop as the turn itself.

With ``observability.otel`` each request also gets a ``shipagent.request`` span (child of
pydantic-ai's agent-run span) carrying the chat key, request id, step and section token counts.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, ToolReturnPart, repair_messages

from ..chatkeys import ShipPaths
from ..config import LedgerConfig
from ..execution import InjectedMessage
from ..history.injections import RunInjection
from ..history.placement import RequestReport, injected_message, render_plan
from ..history.sections import Item
from ..history.stores import MessageLog, now_iso
from ._records import LedgerItem, RequestRecord, record_from_report, report_json
from ._store import LedgerStore

__all__ = ["Ledger", "LedgerRecorder"]

log = logging.getLogger("shipagent.ledger")
_MAX_OPEN_TURNS = 1024


@dataclass(slots=True)
class _Seen:
    """One request as the recorder keeps it until the turn is written: the report, not a record."""

    report: RequestReport
    ts: str
    usage: tuple[int, int] | None = None
    """``(input tokens, cached input tokens)`` the provider reported for it, once known."""


class LedgerRecorder:
    """The request observer of one turn: keeps the reports in memory until the turn commits.

    Why the reports and not records: turning a request of a long chat into a record touches every
    item it carried; the reports are never changed after the request, so the recorder keeps them
    as they are and :meth:`lines` encodes them once, in the commit's worker-thread hop.
    """

    def __init__(self, chat_key: str, request_id: str, *, spans: bool) -> None:
        self.chat_key = chat_key
        self.request_id = request_id
        self._seen: list[_Seen] = []
        self._spans = spans

    def on_request(self, report: RequestReport) -> None:
        if report.step == 1:  # an overflow retry starts a fresh tool loop: forget the failed one
            self._seen = [s for s in self._seen if s.report.run_id == report.run_id]
        if report.previous_usage is not None and self._seen:
            self._seen[-1].usage = report.previous_usage
        self._seen.append(_Seen(report, now_iso()))
        if self._spans:
            _span(
                record_from_report(
                    report, request_id=self.request_id, chat_key=self.chat_key, ts="", blobs={}
                )
            )

    def finish(self, messages: Sequence[ModelMessage]) -> None:
        """Complete the last request with the final response's usage (found in the turn's messages)."""
        if self._seen:
            last = next((m for m in reversed(messages) if isinstance(m, ModelResponse)), None)
            if last is not None and last.usage.input_tokens:
                self._seen[-1].usage = (last.usage.input_tokens, last.usage.cache_read_tokens)

    def lines(self, blobs: dict[str, str]) -> list[dict[str, Any]]:
        """The turn's record lines; injected texts go to ``blobs`` (address -> text)."""
        return [
            report_json(
                s.report,
                request_id=self.request_id,
                chat_key=self.chat_key,
                ts=s.ts,
                blobs=blobs,
                usage=s.usage,
            )
            for s in self._seen
        ]


def _span(record: RequestRecord) -> None:
    from opentelemetry import trace

    attributes: dict[str, Any] = {
        "shipagent.chat_key": record.chat_key,
        "shipagent.request_id": record.request_id,
        "shipagent.step": record.step,
        "shipagent.prefix_hash": record.prefix_hash,
        "shipagent.tokens.total": record.total_tokens,
    }
    attributes.update({f"shipagent.tokens.{k}": v for k, v in record.sections.items()})
    edits = [i.edit for i in record.items]
    attributes.update({f"shipagent.items.{e}": edits.count(e) for e in set(edits)})
    tracer = trace.get_tracer("shipagent")
    with tracer.start_as_current_span("shipagent.request", attributes=attributes):
        pass


class Ledger:
    """Per-request records of every chat of an agent (``context.ledger``)."""

    def __init__(self, paths: ShipPaths, config: LedgerConfig, *, otel: bool = False) -> None:
        self.config = config
        self.otel = otel
        self.store = LedgerStore(paths, keep_requests=config.keep_requests)
        self._messages = MessageLog(paths)
        self._recorders: OrderedDict[tuple[str, str], LedgerRecorder] = OrderedDict()

    @property
    def active(self) -> bool:
        return self.config.enabled or self.otel

    def recorder(self, chat_key: str, request_id: str) -> LedgerRecorder | None:
        """The turn's recorder (one per turn, until :meth:`flush` takes it), or ``None`` when off."""
        if not self.active:
            return None
        key = (chat_key, request_id)
        found = self._recorders.get(key)
        if found is None:
            found = self._recorders[key] = LedgerRecorder(chat_key, request_id, spans=self.otel)
            while len(self._recorders) > _MAX_OPEN_TURNS:  # turns that failed never flush
                self._recorders.popitem(last=False)
        return found

    def flush(self, chat_key: str, request_id: str, new: Sequence[ModelMessage]) -> Callable[[], None] | None:
        """A blocking writer of the turn's records, for ``ChatHistories.commit(also=...)``."""
        recorder = self._recorders.pop((chat_key, request_id), None)
        if not self.config.enabled or recorder is None:
            return None
        recorder.finish(new)

        def write() -> None:
            try:
                blobs: dict[str, str] = {}
                lines = recorder.lines(blobs)  # encoded here, in the commit's worker thread
                self.store.append_lines(chat_key, lines, blobs)
            except OSError as exc:  # the ledger is an account of the turn, not the turn itself
                log.error("chat %r: could not write the ledger: %s", chat_key, exc)

        return write

    def records(self, chat_key: str, *, last: int | None = None) -> list[RequestRecord]:
        return self.store.read(chat_key, last=last)

    def record(self, chat_key: str, request_id: str, step: int) -> RequestRecord:
        for record in reversed(self.store.read(chat_key)):
            if record.request_id == request_id and record.step == step:
                return record
        raise KeyError(f"no ledger record for request {request_id} step {step} in chat {chat_key!r}")

    def reconstruct(
        self, chat_key: str, request_id: str, step: int, *, messages: MessageLog | None = None
    ) -> list[ModelMessage]:
        """The message list that request sent, rebuilt from its record, the message log and blobs.

        ``messages``: where the chat's message log is when not in ``.ship/`` (a durable cluster).
        """
        record = self.record(chat_key, request_id, step)
        prior_items = [i for i in record.items if i.section in ("summary", "history")]
        run_items = [i for i in record.items if i.section in ("turn", "toolResults")]
        prior, turn = (messages or self._messages).find(chat_key, [i.source for i in prior_items], request_id)
        if len(turn) < len(run_items):
            raise KeyError(f"turn {request_id} holds {len(turn)} messages, the record names {len(run_items)}")
        prior_out = [_item(m, i) for m, i in zip(prior, prior_items, strict=True)]
        returned = {
            p.tool_call_id: p.timestamp for m in turn for p in m.parts if isinstance(p, ToolReturnPart)
        }
        injections = [
            _item(self._injection(chat_key, i, returned), i)
            for i in record.items
            if i.section == "injections"
        ]
        current = [_item(m, i) for m, i in zip(turn, run_items, strict=False)]
        return repair_messages(render_plan(prior_out, injections, current), repair_last_response=True)

    def _injection(self, chat_key: str, item: LedgerItem, returned: dict[str, datetime]) -> ModelMessage:
        if item.blob is None or item.role not in ("system", "assistant"):
            raise KeyError(f"injection item {item.source} has no stored text")
        text = self.store.blob(chat_key, item.blob)
        fingerprint = item.source.partition(":")[2]
        role: Any = item.role
        call_id = item.tool_call_ids[0] if item.tool_call_ids else ""
        injection = RunInjection(InjectedMessage(role, text, fingerprint), call_id, returned.get(call_id))
        return injected_message(injection)


def _item(message: ModelMessage, recorded: LedgerItem) -> Item:
    item = Item(message, recorded.section, recorded.source, tuple(recorded.tool_call_ids))
    item.edit = recorded.edit  # type: ignore[assignment]
    item.cap = recorded.cap
    item.hints = dict(recorded.hints)
    return item
