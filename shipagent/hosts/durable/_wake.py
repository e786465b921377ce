"""On Postgres, workers and waiters are woken by ``LISTEN``/``NOTIFY`` instead of fast polling.

DBOS finds queued turns by polling the queue, and a caller learns a turn's result by polling its
row. Polled fast (20 ms), an idle worker spent about a quarter of a core and the database a few
percent more on nothing, per worker; polled slowly, turns wait. On Postgres two channels make the
polls a fallback only:

* ``shipagent_turn_queued`` — sent after a turn is enqueued (by a worker or a ``--no-worker``
  server). Every worker listening claims queued turns at once (:class:`~._local.Dequeuer`); the
  claim is the queue's own transaction, so a notification can only make a worker look sooner,
  never take a turn it should not.
* ``shipagent_turn_done`` (payload: the workflow id) — sent by the worker that ran a turn, after
  DBOS recorded its outcome, unless the process that enqueued it was that worker (it awaits the
  task itself). A waiter in another process then reads the result at once.

A notification is a hint: a lost one (the listener reconnecting, a worker killed between its
commit and its notify) costs at most one poll interval, because the polls stay on, just slower.
``NOTIFY`` is delivered only to other sessions' listeners after the sender's transaction commits;
each notify here is its own autocommit statement on a connection of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["DONE_CHANNEL", "QUEUED_CHANNEL", "PgWake"]

log = logging.getLogger("shipagent.hosts.durable")

QUEUED_CHANNEL = "shipagent_turn_queued"
DONE_CHANNEL = "shipagent_turn_done"
_RECONNECT_SECONDS = 1.0


class PgWake:
    """A listener thread and a sender connection for the two channels (one per process)."""

    def __init__(self, url: str, *, on_queued: Callable[[], None] | None) -> None:
        self.url = url
        self.on_queued = on_queued
        """Called on the loop when another session enqueued a turn (workers only)."""
        self._waiters: dict[str, asyncio.Future[None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._sender: Any = None
        self._sender_pid: int | None = None
        self._send_lock = asyncio.Lock()
        self._pending: set[asyncio.Task[None]] = set()
        self._queued_task: asyncio.Task[None] | None = None
        self._queued_again = False

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start listening; returns once the listener is connected (or failed once: it retries)."""
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._listen, name="shipagent-wake", daemon=True)
        self._thread.start()
        await asyncio.to_thread(self._ready.wait, 10.0)

    async def close(self) -> None:
        self._stop.set()
        for task in list(self._pending):
            task.cancel()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 5.0)
            self._thread = None
        sender, self._sender = self._sender, None
        if sender is not None:
            with contextlib.suppress(Exception):
                await sender.close()

    # -- waiting for a result --------------------------------------------------------------------

    def waiter(self, workflow_id: str) -> asyncio.Future[None]:
        """A future done when some worker reports ``workflow_id`` done (register before enqueuing)."""
        found = self._waiters.get(workflow_id)
        if found is None or found.done():
            found = self._waiters[workflow_id] = asyncio.get_running_loop().create_future()
        return found

    def forget(self, workflow_id: str, future: asyncio.Future[None]) -> None:
        if self._waiters.get(workflow_id) is future:
            del self._waiters[workflow_id]

    # -- sending ---------------------------------------------------------------------------------

    def notify_soon(self, channel: str, payload: str = "") -> None:
        """Send a notification in the background (a hint: a failure is logged, never raised).

        ``shipagent_turn_queued`` carries no payload, so a burst of enqueues sends one while the
        previous is in flight and at most one more after it, not one each.
        """
        if channel == QUEUED_CHANNEL:
            if self._queued_task is not None and not self._queued_task.done():
                self._queued_again = True
                return
            task = self._queued_task = asyncio.get_running_loop().create_task(self._notify_queued())
        else:
            task = asyncio.get_running_loop().create_task(self._notify(channel, payload))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _notify_queued(self) -> None:
        self._queued_again = True
        while self._queued_again:
            self._queued_again = False
            await self._notify(QUEUED_CHANNEL, "")

    async def _notify(self, channel: str, payload: str) -> None:
        import psycopg

        async with self._send_lock:
            try:
                if self._sender is None:
                    self._sender = await psycopg.AsyncConnection.connect(
                        self.url, autocommit=True, connect_timeout=10
                    )
                    self._sender_pid = self._sender.info.backend_pid
                await self._sender.execute("SELECT pg_notify(%s, %s)", (channel, payload))
            except Exception as exc:
                log.debug("durable: notify %s failed: %s", channel, exc)
                sender, self._sender = self._sender, None
                if sender is not None:
                    with contextlib.suppress(Exception):
                        await sender.close()

    # -- listening (a thread: psycopg's notifies() blocks) ---------------------------------------

    def _listen(self) -> None:
        import psycopg

        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=10) as conn:
                    conn.execute(f"LISTEN {QUEUED_CHANNEL}")
                    conn.execute(f"LISTEN {DONE_CHANNEL}")
                    self._ready.set()
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=0.5):
                            self._dispatch(note.channel, note.payload, note.pid)
            except Exception as exc:
                self._ready.set()
                if not self._stop.is_set():
                    log.warning("durable: notification listener: %s (reconnecting)", exc)
                    self._stop.wait(_RECONNECT_SECONDS)

    def _dispatch(self, channel: str, payload: str, pid: int) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            if channel == QUEUED_CHANNEL:
                if pid != self._sender_pid and self.on_queued is not None:  # ours: already claimed
                    loop.call_soon_threadsafe(self.on_queued)
            elif channel == DONE_CHANNEL:
                loop.call_soon_threadsafe(self._done, payload)

    def _done(self, workflow_id: str) -> None:
        future = self._waiters.get(workflow_id)
        if future is not None and not future.done():
            future.set_result(None)
