"""Fast paths of a worker that runs its own turns: no waiting for a poll when nothing needs one.

DBOS finds queued work by polling the queue (:data:`QUEUE_POLL_SECONDS`) and hands a result to
whoever waits by polling the workflow's row. On one machine, with the enqueuing process also the
worker that runs the turn, both waits were most of a durable turn's overhead. Two fast paths,
each with the database still the only judge of what runs where:

* **dequeue now** (:class:`Dequeuer`): right after this process enqueues a turn, and right after
  one of its turns finishes (the chat's next turn may be waiting behind it), the worker runs the
  same claim its queue thread runs on every poll (``start_queued_partitioned_workflows``: one
  transaction that flips the head of every free partition from ENQUEUED to PENDING under row
  locks). Two claims racing — this one, the queue thread's, another machine's — cannot take the
  same turn, nor two turns of one chat: that is the claim's own guarantee, which every poll
  already relies on. The periodic poll stays, for turns other processes enqueue.
* **await the task** (:class:`LocalTurns`): a turn this process enqueued and then also runs is
  awaited on the asyncio task DBOS runs its workflow in. That task ends after DBOS recorded the
  workflow's outcome, so the caller gets exactly what the database holds, without a poll; a turn
  that another worker took is still read from the database.

Both use DBOS internals of the pinned version (``dbos>=3.4,<4``; the claim function, the
dispatcher, the workflow task). They are guarded: if a claim fails, the next poll does the work.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from typing import Any

import anyio

__all__ = ["Dequeuer", "LocalTurns"]

log = logging.getLogger("shipagent.hosts.durable")

WAKE_DELAY_PER_TURN = 0.002
"""Seconds a woken worker waits per turn it is running before it looks (see :meth:`Dequeuer.wake`)."""
WAKE_DELAY_MAX = 0.02


class LocalTurns:
    """Turns this process waits for, and the workflow tasks that run them here."""

    def __init__(self) -> None:
        self._watch: dict[str, asyncio.Future[asyncio.Task[Any]]] = {}
        self.on_finished: Callable[[str, bool], None] | None = None
        """Called on the loop with (workflow id, awaited here) when a turn that ran here is over
        and its outcome recorded."""

    def watch(self, workflow_id: str) -> asyncio.Future[asyncio.Task[Any]]:
        """Before enqueuing: a future that gets the workflow's task if it starts in this process."""
        found = self._watch.get(workflow_id)
        if found is None or found.done():
            found = self._watch[workflow_id] = asyncio.get_running_loop().create_future()
        return found

    def unwatch(self, workflow_id: str, future: asyncio.Future[asyncio.Task[Any]]) -> None:
        if self._watch.get(workflow_id) is future:
            del self._watch[workflow_id]

    def started(self, workflow_id: str, task: asyncio.Task[Any] | None) -> None:
        """Called by the workflow when it starts in this process (on the workflow's own task)."""
        if task is None:
            return
        future = self._watch.get(workflow_id)
        watched = future is not None and not future.done()
        if future is not None and watched:
            future.set_result(task)
        finished = self.on_finished
        if finished is not None:
            task.add_done_callback(lambda _task: finished(workflow_id, watched))


class Dequeuer:
    """Claims queued turns for this worker now, coalescing requests that arrive meanwhile."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue
        self._again = False
        self._task: asyncio.Task[None] | None = None
        self._checks: set[asyncio.Task[None]] = set()
        self._wake_pending = False
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def request(self) -> None:
        """Ask for a claim soon; many requests during one claim make one more claim, not many."""
        if self._closed:
            return
        self._again = True
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def wake(self) -> None:
        """Another process enqueued a turn: look soon, and claim only if it is still queued.

        Every worker hears every ``NOTIFY``, but one claim takes the turn; the others' claims
        would find nothing and still cost their CPU. So a worker looks after a delay that grows
        with the turns it is running (an idle worker first: it also balances the load), and
        looks with a cheap probe before it claims.
        """
        if self._wake_pending or self._closed:
            return
        self._wake_pending = True
        delay = min(WAKE_DELAY_PER_TURN * self._running(), WAKE_DELAY_MAX)
        self._timer = asyncio.get_running_loop().call_later(delay, self._woken)

    def _woken(self) -> None:
        self._wake_pending = False
        self.request_if_queued()

    def _running(self) -> int:
        from dbos._dbos import _get_dbos_instance

        try:
            return int(_get_dbos_instance()._active_workflows_set.count_for_queue(self.queue.name))
        except Exception:  # DBOS stopping
            return 0

    def request_if_queued(self) -> None:
        """Claim only if the queue holds a turn nobody took (cheaper than a claim when empty)."""
        if self._closed:
            return
        if self._task is not None and not self._task.done():
            self._again = True  # a claim is running: one more after it covers this
            return
        check = asyncio.get_running_loop().create_task(self._check_then_claim())
        self._checks.add(check)
        check.add_done_callback(self._checks.discard)

    async def _check_then_claim(self) -> None:
        try:
            queued = await anyio.to_thread.run_sync(any_queued, self.queue.name)
        except Exception as exc:
            log.debug("durable: queue check failed: %s", exc)
            return
        if queued:
            self.request()

    async def _run(self) -> None:
        while self._again:
            self._again = False
            try:
                await anyio.to_thread.run_sync(claim_now, self.queue)
            except Exception as exc:  # the next poll of the queue thread does the work
                log.debug("durable: immediate dequeue failed: %s", exc)

    async def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        tasks = [*self._checks, *([self._task] if self._task is not None else [])]
        self._task = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with _suppress_cancelled():
                await task


class _suppress_cancelled:
    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return exc_type is asyncio.CancelledError


def any_queued(queue_name: str) -> bool:
    """Whether ``queue_name`` holds an ENQUEUED turn (one indexed probe; blocking)."""
    import sqlalchemy as sa
    from dbos._dbos import _get_dbos_instance

    sys_db = _get_dbos_instance()._sys_db
    ws = sys_db.tables.workflow_status
    with sys_db.engine.connect() as conn:
        row = conn.execute(
            sa.select(sa.literal(1)).where(ws.c.queue_name == queue_name, ws.c.status == "ENQUEUED").limit(1)
        ).first()
    return row is not None


def claim_now(queue: Any) -> int:
    """What the queue thread does on one poll of a partition-concurrency-1 queue; returns how many.

    Blocking (database round trips): call it in a thread. The dispatch hands each claimed
    workflow to the event loop DBOS was launched on.
    """
    from dbos._core import execute_dequeued_workflow
    from dbos._dbos import _get_dbos_instance
    from dbos._utils import GlobalParams, generate_uuid

    if not (
        queue._partition_concurrency == 1
        and queue._concurrency is None
        and queue._limiter is None
        and queue._partition_limiter is None
    ):
        return 0  # not the batch-claim shape (never for our queue): leave it to the poll
    dbos = _get_dbos_instance()
    budget = sys.maxsize
    if queue._worker_concurrency is not None:
        budget = queue._worker_concurrency - dbos._active_workflows_set.count_for_queue(queue.name)
    if budget <= 0:
        return 0
    owner_xid = generate_uuid()
    sys_db = dbos._sys_db
    # is_latest_version=False: claim only turns of exactly this application version (every turn
    # is enqueued with the fixed APP_VERSION), which spares the claim its version lookup; a row
    # without a version is left to the queue thread's poll.
    ids: list[str] = sys_db.start_queued_partitioned_workflows(
        queue,
        GlobalParams.executor_id,
        GlobalParams.app_version,
        budget,
        owner_xid=owner_xid,
        is_latest_version=False,
    )
    if not ids:
        return 0
    statuses = {status["workflow_uuid"]: status for status in sys_db.get_workflow_statuses(ids)}
    for workflow_id in ids:
        try:
            status = statuses.get(workflow_id) or sys_db.get_workflow_status(workflow_id)
            if status is not None:
                execute_dequeued_workflow(dbos, status, owner_xid)
        except Exception as exc:  # as the queue thread: claimed and PENDING, recovery resumes it
            log.error("durable: cannot start workflow %s: %s", workflow_id, exc)
    return len(ids)
