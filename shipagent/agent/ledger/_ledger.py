"""The ledger room: listens to the context window, keeps records, rebuilds what was sent.

The core's :class:`~shipagent.window.placement.ContextWindow` reports every request it shapes
to a :class:`~shipagent.window.placement.RequestObserver`; a :class:`LedgerRecorder` is that
observer for one turn. It only builds records in memory (no I/O, no thread hop per request); the
agent puts :meth:`Ledger.flush`'s writer in the turn's record (``stores.TurnRecord.ledger``), so
the files store writes a turn's records in the same worker-thread hop as the turn itself.

With ``observability.otel`` each request also gets a ``shipagent.request`` span (child of
pydantic-ai's agent-run span) carrying the chat key, request id, step and section token counts.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, ToolReturnPart, repair_messages

from ..._cache import BoundedCache
from ...chatkeys import ShipPaths
from ...config import LedgerConfig, ShipConfig
from ...store.logs import MessageLog, now_iso
from ...tools.execution import InjectedMessage
from ...window.injections import RunInjection
from ...window.placement import RequestReport, injected_message, render_plan
from ...window.sections import Item
from ._busts import Shape, shape_of_record
from ._encode import Base, encode_report
from ._records import LedgerItem, RequestRecord, record_from_report
from ._store import LedgerStore

__all__ = ["Ledger", "LedgerRecorder"]

log = logging.getLogger("shipagent.agent.ledger")
_MAX_OPEN_TURNS = 1024
_MAX_BASES = 64  # chats whose last record is kept to write against (as many as PriorItems keeps)


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

    def __init__(self, chat_key: str, request_id: str, *, spans: bool, config_hash: str = "") -> None:
        self.chat_key = chat_key
        self.request_id = request_id
        self._seen: list[_Seen] = []
        self._spans = spans
        self._config_hash = config_hash
        self.base: Base | None = None
        """After :meth:`lines`: the turn's last record, for the chat's next turn to refer to."""
        self.shape: Shape | None = None
        """After :meth:`lines`: the turn's last request, for the chat's next turn to compare with."""

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

    @property
    def requests(self) -> int:
        """How many requests the turn made (the lines :meth:`lines` gives)."""
        return len(self._seen)

    def lines(
        self, blobs: dict[str, str], base: Base | None = None, shape: Shape | None = None
    ) -> list[dict[str, Any]]:
        """The turn's record lines; injected texts go to ``blobs`` (address -> text).

        The first line refers to ``base`` (the chat's last record, when it may: see
        :mod:`._encode`), each later one to the line before; :attr:`base` is then the last.
        ``shape``: the chat's last request, which the first line's ``bust`` is found against
        (each later line's against the line before); :attr:`shape` is then the last.
        """
        out: list[dict[str, Any]] = []
        for seen in self._seen:
            line, base = encode_report(
                seen.report,
                base,
                request_id=self.request_id,
                chat_key=self.chat_key,
                ts=seen.ts,
                blobs=blobs,
                usage=seen.usage,
                previous=shape,
                config_hash=self._config_hash,
            )
            shape = base.shape
            out.append(line)
        self.base, self.shape = base, shape
        return out


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

    def __init__(
        self, paths: ShipPaths, config: LedgerConfig, *, otel: bool = False, config_hash: str = ""
    ) -> None:
        self.config = config
        self.otel = otel
        self.config_hash = config_hash
        """The agent's configuration as loaded (:meth:`hash_config`), on every record: a prefix
        that changed with it is a ``config`` bust, not an unexplained one."""
        self.store = LedgerStore(paths, keep_requests=config.keep_requests)
        self._messages = MessageLog(paths)
        # turns that failed never flush: their recorders are dropped, least recent first
        self._recorders: BoundedCache[tuple[str, str], LedgerRecorder] = BoundedCache(_MAX_OPEN_TURNS)
        self._bases: BoundedCache[str, Base] = BoundedCache(_MAX_BASES)
        """Per chat, its last record written by this process (the next line refers to it)."""
        self._shapes: BoundedCache[str, Shape] = BoundedCache(_MAX_BASES)
        """Per chat, its last request recorded by this process (the next is compared with it)."""
        self._lock = threading.Lock()  # turns of different chats write from different threads

    @staticmethod
    def hash_config(config: ShipConfig) -> str:
        """A short hash of the loaded configuration, for ``config_hash`` (``configHash`` on records).

        Key order in ship.json does not count; any value that the agent loads does. A value JSON
        cannot hold counts by its ``repr`` (a hash must never cost the agent its start).
        """
        dumped = config.model_dump(mode="json", by_alias=True, fallback=repr)
        data = json.dumps(dumped, sort_keys=True, ensure_ascii=False, default=repr)
        return hashlib.sha256(data.encode("utf-8")).hexdigest()[:16]

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
            found = self._recorders[key] = LedgerRecorder(
                chat_key, request_id, spans=self.otel, config_hash=self.config_hash
            )
        return found

    def flush(self, chat_key: str, request_id: str, new: Sequence[ModelMessage]) -> Callable[[], None] | None:
        """A blocking writer of the turn's records, for the turn's record (``TurnRecord.ledger``)."""
        recorder = self._recorders.pop((chat_key, request_id), None)
        if not self.config.enabled or recorder is None:
            return None
        recorder.finish(new)

        def write() -> None:
            with self._lock:
                base = self._bases.pop(chat_key, None)
                shape = self._shapes.pop(chat_key, None)
            if shape is None:  # the chat's first turn in this process: its last request on disk
                shape = self._last_shape(chat_key)

            def encode(continuing: bool) -> tuple[list[dict[str, Any]], dict[str, str]]:
                # encoded here, in the commit's worker thread; a fresh file, or one changed under
                # us, starts with a whole line
                blobs: dict[str, str] = {}
                return recorder.lines(blobs, base if continuing else None, shape), blobs

            try:
                mark = self.store.append_turn(
                    chat_key, recorder.requests, base.mark if base else None, encode
                )
            except OSError as exc:  # the ledger is an account of the turn, not the turn itself
                log.error("chat %r: could not write the ledger: %s", chat_key, exc)
                return  # and no base: what reached the file is unknown, the next line is whole
            if recorder.base is not None and mark is not None:
                recorder.base.mark = mark
                with self._lock:
                    self._bases[chat_key] = recorder.base
            kept = recorder.shape or shape  # a turn that made no request leaves the last one
            if kept is not None:
                with self._lock:
                    self._shapes[chat_key] = kept

        return write

    def _last_shape(self, chat_key: str) -> Shape | None:
        """The shape of the chat's last readable record on disk (blocking: a bounded tail read)."""
        try:
            record = self.store.last(chat_key)
        except OSError as exc:
            log.warning("chat %r: could not read the ledger's last record: %s", chat_key, exc)
            return None
        return shape_of_record(record) if record is not None else None

    def records(self, chat_key: str, *, last: int | None = None) -> list[RequestRecord]:
        return self.store.read(chat_key, last=last)

    def record(self, chat_key: str, request_id: str, step: int) -> RequestRecord:
        """The record of one request.

        Raises:
            KeyError: there is none, or its line (or the line it refers to) is damaged or gone;
                the message says which.
        """
        records, unreadable = self.store.scan(chat_key)
        for record in reversed(records):
            if record.request_id == request_id and record.step == step:
                return record
        reason = unreadable.get(f"{request_id}:{step}")
        if reason is not None:
            raise KeyError(reason)
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
        laid = render_plan(prior_out, injections, current, summary_as_user=record.layout >= 2)
        return repair_messages(laid, repair_last_response=True)

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
