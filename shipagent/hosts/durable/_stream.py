"""Live events of a queued turn: the workflow writes them to a DBOS stream, the submitter reads it.

A durable turn may run in another process, so the events ``run_stream`` yields and ``on_step``
receives cannot be handed over in memory. When the submitter asks for them (``run_stream``, an
``on_step`` callback, serve's SSE), the turn is enqueued saying which (``events``: ``run``,
``steps`` or ``all``) and its workflow writes each such event as a JSON record to the DBOS stream
:data:`STREAM_KEY` of the workflow (whose id is the request id), then closes the stream; the
submitter reads the stream while it waits for the result and ends with ``done`` built from the
recorded result. The first submission of a request id decides what is written: submitting the
same id again reads the same records (a reader that finds no text gets the answer in one piece).

What is written, and why it never repeats on replay:

* The writes are made from the workflow body (``DBOS.write_stream_async``), so DBOS records each
  one as an operation of the workflow: a turn resumed after a crash replays the writes it already
  made without writing them again, and continues with new ones. A reader attached before the
  crash, or a new one starting at offset 0, sees every event once, in order.
* That needs the *number* of writes to be the same on replay, so only events whose count follows
  from recorded steps are written: a model response's text (one ``text_delta`` per text part of
  the response, written once the response is recorded — the model request step streams inside the
  step and the workflow sees the finished response, so deltas are coalesced per model response and
  a half-streamed response is never shown), ``tool_started``/``tool_finished``, and ``on_step``'s
  ``assistant``/``step_finish``. Not written: ``retry`` (happens inside a recorded step, not again
  on replay), ``compaction``/``compacted`` (decided by the commit, which on Postgres is not a
  recorded step), approvals (a queued turn cannot ask). ``done`` is not written either: the reader
  builds it from the workflow's recorded result.

Records are ``{"run": {...}}`` (a run event's fields, ``type`` included) or ``{"step": {...}}``
(a :class:`~shipagent.results.StepEvent`): plain JSON, whatever serializer DBOS uses.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from dbos import DBOS

from ..._steps import StepCallback
from ...events import RunEvent, TextDelta, ToolFinished, ToolStarted
from ...results import StepEvent

__all__ = ["STREAM_KEY", "EventPublisher", "EventReader", "decode", "encode_run", "encode_step"]

log = logging.getLogger("shipagent.hosts.durable")

STREAM_KEY = "shipagent.events"
"""The DBOS stream (per workflow, i.e. per request id) a streamed turn's events go to."""
_RUN_EVENTS: dict[str, type[Any]] = {
    "text_delta": TextDelta,
    "tool_started": ToolStarted,
    "tool_finished": ToolFinished,
}
_STEP_TYPES = frozenset({"assistant", "step_finish"})


def encode_run(event: RunEvent) -> dict[str, Any] | None:
    """A run event as a JSON record, or ``None`` for one that is not published (see module doc)."""
    if event.type not in _RUN_EVENTS:
        return None
    return {"run": {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}}


def encode_step(event: StepEvent) -> dict[str, Any] | None:
    """An ``on_step`` event as a JSON record, or ``None`` for one that is not published."""
    if event.type not in _STEP_TYPES:
        return None
    return {"step": {"type": event.type, "text": event.text, "data": dict(event.data)}}


def decode(record: Any) -> RunEvent | StepEvent | None:
    """The event a record stands for; ``None`` for a record this version does not know."""
    if not isinstance(record, dict):
        return None
    if isinstance(run := record.get("run"), dict):
        fields = dict(run)
        cls = _RUN_EVENTS.get(str(fields.pop("type", "")))
        if cls is None:
            return None
        try:
            event: RunEvent = cls(**fields)
        except TypeError:
            return None
        return event
    if isinstance(step := record.get("step"), dict) and step.get("type") in _STEP_TYPES:
        return StepEvent(step["type"], str(step.get("text", "")), dict(step.get("data") or {}))
    return None


class EventPublisher:
    """The workflow side: ``emit`` and ``on_step`` for :meth:`ShipAgent.execute_turn` that publish."""

    async def emit(self, event: RunEvent) -> None:
        record = encode_run(event)
        if record is not None:
            await self._write(record)

    async def on_step(self, event: StepEvent) -> None:
        record = encode_step(event)
        if record is not None:
            await self._write(record)

    async def _write(self, record: dict[str, Any]) -> None:
        if DBOS.step_id is not None:  # inside a step: an unrecorded write would repeat on replay
            return
        await DBOS.write_stream_async(STREAM_KEY, record)
        _wake_local_readers(DBOS.workflow_id)

    async def close(self) -> None:
        """End the stream, so a reader stops at once instead of at its next look at the status."""
        await DBOS.close_stream_async(STREAM_KEY)
        _wake_local_readers(DBOS.workflow_id)


def _wake_local_readers(workflow_id: str | None) -> None:
    """Wake this process's readers of the stream now (the submitter, when the turn runs here).

    Readers in other processes are woken by DBOS's ``NOTIFY`` on Postgres and by its 0.1 s poll
    on SQLite; one in this process need not wait for either. DBOS internals of the pinned version
    (its waiter map), guarded: without the wake a reader still finds the value at its next look.
    """
    if workflow_id is None:
        return
    try:
        from dbos._dbos import _get_dbos_instance

        sys_db = _get_dbos_instance()._sys_db
        signal = sys_db.streams_map.get(sys_db._waiter(workflow_id, STREAM_KEY)[0])
        if signal is not None:
            signal.set()
    except Exception as exc:  # pragma: no cover - a DBOS change: the poll still delivers
        log.debug("durable: cannot wake local stream readers: %s", exc)


class EventReader:
    """The submitter side: reads a turn's stream and hands each event to ``emit`` / ``on_step``."""

    def __init__(
        self,
        sys_db: Any,
        workflow_id: str,
        *,
        emit: Callable[[RunEvent], Awaitable[None]] | None,
        on_step: StepCallback | None,
        poll_seconds: float,
    ) -> None:
        self.sys_db = sys_db
        self.workflow_id = workflow_id
        self.emit = emit
        self.on_step = on_step
        self.poll_seconds = poll_seconds
        self.texts = 0
        """How many ``text_delta`` events were delivered (none: the caller sends the answer whole)."""

    async def run(self) -> None:
        """Read until the stream is closed or the workflow ended with nothing more written."""
        from dbos._core import read_stream_async

        values = read_stream_async(
            self.sys_db,
            self.workflow_id,
            STREAM_KEY,
            offset=0,
            polling_interval=self.poll_seconds,
            checkpoint=False,  # a reader is never part of a workflow's history
        )
        try:
            async for record in values:
                await self._deliver(decode(record))
        finally:
            await values.aclose()

    async def _deliver(self, event: RunEvent | StepEvent | None) -> None:
        if isinstance(event, StepEvent):
            if self.on_step is None:
                return
            try:
                outcome = self.on_step(event)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                log.exception("on_step callback raised for a %s event; ignoring it", event.type)
        elif event is not None and self.emit is not None:
            if isinstance(event, TextDelta):
                self.texts += 1
            await self.emit(event)


async def finish_reading(task: asyncio.Task[None]) -> None:
    """Let a reader deliver the rest once the result is known; a failed read is logged, not raised.

    No time limit: the stream was closed before the workflow returned (or the reader stops at its
    next look at the finished workflow's status), and a slow consumer must slow the reader down,
    not lose the events it has not taken yet.
    """
    await asyncio.wait({task})
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.warning("durable: reading the turn's events failed: %s", exc)
