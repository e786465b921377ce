"""The durable executor: turns go onto one DBOS queue partitioned by chat key.

``DurableExecutor`` is the :class:`~shipagent.agent.turns.TurnExecutor` a started agent uses when
ship.json turns ``durable`` on. It runs in one of two roles:

* **worker** (default; ``shipagent worker``, ``shipagent serve``): claims its executor id
  in the database (``_heartbeat``) and launches DBOS in this process, so queued turns of any chat
  run here up to the queue's per-worker concurrency; beats its row every
  :data:`HEARTBEAT_SECONDS` and as often resumes the pending turns of dead executors (heartbeat
  older than ``recoverAfterSeconds``, or the process gone on this machine);
* **client** (``serve --no-worker``): only enqueues turns and waits for their results through a
  ``DBOSClient``; other processes execute them.

Either way :meth:`submit` enqueues the turn as workflow ``shipagent.turn`` with the request id as
the workflow id (same id twice → the first turn's result, nothing runs again) and the chat key as
the partition key (partition concurrency 1: one turn of a chat at a time across every worker;
different chats in parallel), and waits for the result — without waiting for DBOS's polls where
it need not: a worker claims the turns it enqueues at once and awaits a turn it runs on the
workflow's task (``_local``); on Postgres, ``NOTIFY`` wakes the other workers and a waiting client
(``_wake``).

Streaming crosses processes through the workflow's DBOS event stream (``_stream``): a submitter
that wants events (``run_stream``, ``on_step``) enqueues the turn asking for them and reads
them live, whichever worker runs it. A ``channel`` cannot follow the turn across processes, so
``chat_send`` texts come back in the result's output. A chat channel's turn is different: the
receiving process only enqueues it (:meth:`enqueue_channel_turn`) and the worker that runs it
answers the chat itself (``_channel_turn``).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import uuid
from collections.abc import Awaitable, Callable
from contextlib import suppress
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
from dbos import DBOS, DBOSClient, SetEnqueueOptions, SetWorkflowID
from dbos._utils import INTERNAL_QUEUE_NAME

from ..._steps import StepCallback
from ...agent.turns import TurnHooks
from ...errors import ShipAgentError
from ...events import RunEvent, TextDelta
from ...results import AgentResult, StepEvent
from ...store import PgStores
from ...tools.execution import ReplyChannel
from ._channel_turn import CHANNEL_WORKFLOW_NAME, channel_turn_workflow
from ._heartbeat import RECOVERING, Claimant, Heartbeats, claim_executor_id, this_process
from ._hooks import DurableTurnHooks
from ._local import Dequeuer
from ._pgturns import PgTurnHooks
from ._settings import APP_NAME, QUEUE_NAME, WORKFLOW_NAME, DurableSettings, resolve_settings
from ._stop import channel_turns, stop_channel_turn
from ._stream import EventReader, finish_reading
from ._wake import DONE_CHANNEL, QUEUED_CHANNEL, PgWake
from ._workflow import bind_agent, local_turns, turn_workflow

if TYPE_CHECKING:
    from ...agent._agent import ShipAgent

__all__ = ["APP_VERSION", "DurableExecutor", "recover_executors"]

log = logging.getLogger("shipagent.hosts.durable")

APP_VERSION = "shipagent-durable-1"
"""Fixed DBOS application version: every worker of every machine recovers every pending turn
(DBOS otherwise derives the version from a hash of the registered code, and recovers only its own)."""
HEARTBEAT_SECONDS = 2.0
QUEUE_POLL_SECONDS = {"postgres": 0.5, "sqlite": 0.1}
"""How often a worker's queue thread looks for turns nobody claimed. Only a fallback: a worker
claims at once the turns it enqueues itself and the next ones after each turn it finishes, and
on Postgres every worker is woken by ``NOTIFY`` when any process enqueues (see ``_wake``)."""
RESULT_POLL_SECONDS = 0.01
"""First wait before reading a turn's result from the database when it does not run here."""
RESULT_POLL_MAX_SECONDS = {"postgres": 1.0, "sqlite": 0.1}
"""The wait grows to this (on Postgres the worker's ``NOTIFY`` normally ends it first)."""
STOP_GRACE_SECONDS = 30
ENGINE_KWARGS: dict[str, Any] = {"pool_pre_ping": False}
"""DBOS's Postgres engine pings a connection on every checkout: a round trip before each of the
~10 system-database transactions of a turn. Without it, a connection the server dropped fails
its first statement as a disconnect, SQLAlchemy discards the pool's connections, and DBOS's
retry runs the operation again on a fresh one (after its one-second backoff)."""


def recover_executors(sys_db: Any, executor_ids: list[str]) -> list[str]:
    """Re-enqueue the pending turns of ``executor_ids``; returns the workflow ids re-enqueued.

    Uses DBOS's own recovery primitive (the one its launch-time recovery uses): a conditional
    update that only matches a workflow still PENDING *on one of those executors*, so recovering
    twice, or racing another worker, re-enqueues each turn at most once. The turn keeps its queue
    and partition, so per-chat order holds.
    """
    done: list[str] = []
    for executor_id in executor_ids:
        for pending in sys_db.get_pending_workflows(executor_id, APP_VERSION):
            if sys_db.reenqueue_for_recovery(pending.workflow_id, [executor_id], INTERNAL_QUEUE_NAME):
                done.append(pending.workflow_id)
    return done


class DurableExecutor:
    """Runs an agent's turns as durable workflows (use with ``async with``)."""

    def __init__(
        self,
        agent: ShipAgent,
        *,
        worker: bool = True,
        concurrency: int | None = None,
        executor_id: str | None = None,
    ) -> None:
        self.agent = agent
        self.worker = worker
        self.concurrency = concurrency
        self.settings: DurableSettings = resolve_settings(
            agent.config.durable, agent.project_root, executor_id=executor_id
        )
        self.executor_id: str | None = None
        self.recovered: list[str] = []
        """Workflow ids this worker re-enqueued for dead executors (for tests and logs)."""
        self._me: Claimant = this_process()
        self.on_lost: Callable[[], None] = _stop_process
        """Called once if another process took this worker's executor id over (see :meth:`_beat`)."""
        self._lost = False
        self._heartbeats: Heartbeats | None = None
        self._client: DBOSClient | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._queue: Any = None
        self._dequeuer: Dequeuer | None = None
        self._wake: PgWake | None = None
        self._stores: PgStores | None = None

    @property
    def _backend(self) -> str:
        return "sqlite" if self.settings.is_sqlite else "postgres"

    # -- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> DurableExecutor:
        try:
            if self.worker:
                await self._start_worker()
            else:
                url = self.settings.database_url
                await anyio.to_thread.run_sync(lambda: DBOS.migrate(url))  # a client never migrates
                self._client = await anyio.to_thread.run_sync(
                    lambda: DBOSClient(
                        system_database_url=url,
                        application_name=APP_NAME,
                        use_listen_notify=not self.settings.is_sqlite,  # stream readers are woken
                    )
                )
                if not self.settings.is_sqlite:
                    self._wake = PgWake(url, on_queued=None)
                    await self._wake.start()
        except ShipAgentError:
            raise
        except Exception as exc:  # the database: one clear line, never the password
            first = (str(exc).strip().splitlines() or [""])[0]
            first = first.replace(self.settings.database_url, self.settings.redacted_url())
            raise ShipAgentError(
                f"durable: cannot use the database {self.settings.redacted_url()}: {type(exc).__name__}: {first}"
            ) from None
        return self

    async def _start_worker(self) -> None:
        self._heartbeats = beats = Heartbeats(self.settings)
        try:
            # claimed before launch: a worker that dies while recovering is visible (and its id
            # is never another live worker's, which would hide the death)
            self.executor_id = await anyio.to_thread.run_sync(
                claim_executor_id, beats, self.settings, self._me
            )
            bind_agent(self.agent, self.executor_id)
            self.agent.turn_hooks = self._hooks()
            config: Any = {
                "name": APP_NAME,
                "system_database_url": self.settings.database_url,
                "executor_id": self.executor_id,
                "application_version": APP_VERSION,
                "log_level": "WARNING",
                "notification_listener_polling_interval_sec": 0.1,
            }
            if not self.settings.is_sqlite:
                config["db_engine_kwargs"] = ENGINE_KWARGS
            DBOS(config=config)
            # Launched from inside the running loop on purpose: DBOS then runs dequeued and
            # recovered async workflows on *this* loop, where the agent's MCP sessions and locks
            # live. (A blocking call, once, at start-up.) Launch also resumes this executor's
            # own pending turns.
            DBOS.launch()
            self._queue = await DBOS.register_queue_async(
                QUEUE_NAME,
                partition_concurrency=1,
                worker_concurrency=self.concurrency,
                polling_interval_sec=QUEUE_POLL_SECONDS[self._backend],
                on_conflict="always_update" if self.concurrency is not None else "never_update",
            )
            if await self._queue.get_polling_interval_sec_async() != QUEUE_POLL_SECONDS[self._backend]:
                # a queue row from an older version polls at its old pace: bring it to this one
                await self._queue.set_polling_interval_sec_async(QUEUE_POLL_SECONDS[self._backend])
            self._dequeuer = Dequeuer(self._queue)
            local_turns.on_finished = self._finished
            if not self.settings.is_sqlite:
                self._wake = PgWake(self.settings.database_url, on_queued=self._dequeuer.wake)
                await self._wake.start()
        except BaseException:
            await self._stop_worker()
            raise
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._heartbeat_loop()), loop.create_task(self._recovery_loop())]
        log.info("durable worker %s on %s", self.executor_id, self.settings.redacted_url())

    def _hooks(self) -> DurableTurnHooks:
        """Chats in Postgres when the database is Postgres (a cluster), else in ``.ship/`` files."""
        if self.settings.is_sqlite:
            return DurableTurnHooks()
        if isinstance(self.agent.store, PgStores):  # the agent's own ChatStore: one pool per worker
            return PgTurnHooks(self.agent.store)
        config = self.agent.config
        self._stores = PgStores(
            self.settings.database_url,
            window=config.context.agent_context.window_entries,
            project_id=config.name,
        )
        return PgTurnHooks(self._stores)

    def _finished(self, workflow_id: str, awaited_here: bool) -> None:
        """A turn that ran here is over: tell a waiter elsewhere; claim the chat's next turn."""
        if self._wake is not None and not awaited_here:
            self._wake.notify_soon(DONE_CHANNEL, workflow_id)
        if self._dequeuer is not None:
            self._dequeuer.request_if_queued()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.worker:
            await self._stop_worker()
        else:
            with anyio.CancelScope(shield=True):  # a cancelled exit still stops the listener threads
                await self._close_wake()
                if self._client is not None:
                    client, self._client = self._client, None
                    await anyio.to_thread.run_sync(client.destroy)

    async def _close_wake(self) -> None:
        if self._wake is not None:
            wake, self._wake = self._wake, None
            with suppress(Exception):
                await wake.close()

    async def _stop_worker(self) -> None:
        local_turns.on_finished = None
        await self._close_wake()
        if self._dequeuer is not None:
            dequeuer, self._dequeuer = self._dequeuer, None
            await dequeuer.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        # DBOS stops dequeuing, then waits (in a thread, so this loop keeps running them) for the
        # turns in flight to finish; one still running after the grace period stays PENDING and is
        # resumed by this executor's next start or by a live worker.
        with suppress(Exception):
            await anyio.to_thread.run_sync(
                lambda: DBOS.destroy(
                    destroy_registry=False, workflow_completion_timeout_sec=STOP_GRACE_SECONDS
                )
            )
        bind_agent(None)
        self.agent.turn_hooks = TurnHooks()
        if self._stores is not None:
            stores, self._stores = self._stores, None
            with suppress(Exception):
                await stores.close()
        if self._heartbeats is not None:
            if self.executor_id is not None and not self._lost:
                beats, executor_id, owner = self._heartbeats, self.executor_id, self._me.owner
                with suppress(Exception):  # unreachable database: the row goes stale by itself
                    await anyio.to_thread.run_sync(beats.release, executor_id, owner)
            self._heartbeats.close()

    # -- heartbeat and recovery ------------------------------------------------------------------

    async def _beat(self) -> None:
        """Beat this worker's row; if the id is no longer ours, stop being a worker.

        The beat matches nothing when another process took the id over: this one was found dead
        (silent longer than ``recoverAfterSeconds``: stopped, or cut off from the database) and
        its turns were handed to other workers. Going on under an id someone else owns would hide
        this process's own death later, so it stops (:attr:`on_lost`: SIGTERM to itself).
        """
        assert self._heartbeats is not None and self.executor_id is not None
        mine = await anyio.to_thread.run_sync(self._heartbeats.beat, self.executor_id, self._me.owner)
        if not mine and not self._lost:
            self._lost = True
            log.error(
                "durable: executor id %s was taken over by another process (this worker was silent "
                "longer than recoverAfterSeconds=%g); stopping this worker",
                self.executor_id,
                self.settings.recover_after_seconds,
            )
            self.on_lost()

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            try:
                await self._beat()
            except Exception as exc:  # a database hiccup must not stop the worker
                log.warning("durable heartbeat failed: %s", exc)

    async def _recovery_loop(self) -> None:
        interval = min(max(self.settings.recover_after_seconds / 3, 0.5), HEARTBEAT_SECONDS)
        while True:
            await asyncio.sleep(interval)
            if self._lost:
                return
            try:
                await self.recover_dead()
            except Exception as exc:
                log.warning("durable recovery pass failed: %s", exc)

    async def recover_dead(self) -> list[str]:
        """Resume the pending turns of every dead executor (one winner each, claimed in the DB)."""
        hb, me, after = self._heartbeats, self.executor_id, self.settings.recover_after_seconds
        assert hb is not None and me is not None
        claimant = self._me

        def work() -> list[str]:
            done: list[str] = []
            for dead in hb.dead(me, after):
                if hb.take_over(dead, claimant, after):  # exactly one live worker wins each
                    ids = recover_executors(_sys_db(), [dead.executor_id])
                    hb.forget(dead.executor_id, RECOVERING + claimant.owner)
                    if ids:
                        log.warning(
                            "durable: resumed %d turn(s) of dead executor %s", len(ids), dead.executor_id
                        )
                    done.extend(ids)
            return done

        done = await anyio.to_thread.run_sync(work)
        self.recovered.extend(done)
        if done:  # back on the queue: claim them now (and wake the others) rather than at a poll
            if self._dequeuer is not None:
                self._dequeuer.request()
            if self._wake is not None:
                self._wake.notify_soon(QUEUED_CHANNEL)
        return done

    # -- turns -----------------------------------------------------------------------------------

    async def submit(
        self,
        chat_key: str,
        text: str,
        *,
        request_id: str | None,
        on_step: StepCallback | None,
        channel: ReplyChannel | None,
        emit: Callable[[RunEvent], Awaitable[None]] | None = None,
    ) -> AgentResult:
        """Enqueue the turn (or find it, by request id) and wait for its result.

        With ``emit`` (``run_stream``) or ``on_step``, the turn publishes its events and they are
        read live from its stream (``_stream``) while the result is awaited; ``done`` comes last.
        """
        rid = request_id or uuid.uuid4().hex
        result: AgentResult
        wanted = {(True, True): "all", (True, False): "run", (False, True): "steps"}
        events = wanted.get((emit is not None, on_step is not None), "")
        done = self._wake.waiter(rid) if self._wake is not None else None
        watched = local_turns.watch(rid) if self._client is None else None
        sys_db = self._client._sys_db if self._client is not None else _sys_db()
        reader = EventReader(
            sys_db, rid, emit=emit, on_step=on_step, poll_seconds=RESULT_POLL_MAX_SECONDS[self._backend]
        )
        reading: asyncio.Task[None] | None = None
        try:
            await self._enqueue(rid, chat_key, turn_workflow, WORKFLOW_NAME, chat_key, text, events)
            if events:
                reading = asyncio.get_running_loop().create_task(reader.run())
            result = await self._await_result(rid, watched, done)
            if reading is not None:  # the stream is closed (or ends with the workflow): drain it
                await finish_reading(reading)
        finally:
            if reading is not None and not reading.done():  # the consumer left: stop reading only
                reading.cancel()
                with suppress(asyncio.CancelledError):
                    await reading
            if watched is not None:
                local_turns.unwatch(rid, watched)
            if done is not None and self._wake is not None:
                self._wake.forget(rid, done)
        if emit is not None and result.output and reader.texts == 0:
            # nothing streamed (the turn ran earlier without a reader, or wrote no text as it
            # went): the answer in one piece, so the deltas still add up to the output
            await emit(TextDelta(result.output))
        if on_step is not None:
            data: dict[str, Any] = {"requestId": result.request_id}
            if not result.success:
                data["success"] = False
            outcome = on_step(StepEvent("done", result.output, data))
            if asyncio.iscoroutine(outcome):
                await outcome
        return result

    async def enqueue_channel_turn(
        self, chat_key: str, text: str, *, request_id: str, reply: dict[str, Any]
    ) -> None:
        """Enqueue a chat channel's turn and return at once: its worker sends the reply.

        Workflow ``shipagent.channel_turn`` (``_channel_turn``), same queue and partition as every
        turn of the chat; ``request_id`` is the workflow id, so enqueuing it again is a no-op.
        """
        await self._enqueue(
            request_id, chat_key, channel_turn_workflow, CHANNEL_WORKFLOW_NAME, chat_key, text, reply
        )

    async def stop_channel_turn(self, chat_key: str, *, request_prefix: str) -> dict[str, Any] | None:
        """``/stop``: cancel the chat's current channel turn (``_stop``); its reply target or ``None``."""
        stopped = await stop_channel_turn(self._client or DBOS, chat_key, request_prefix)
        return None if stopped is None else (stopped.reply or {})

    async def channel_turns(self, chat_key: str, *, request_prefix: str) -> tuple[int, int]:
        """``/status``: the chat's channel turns ``(running on a worker, waiting for one)``."""
        return await channel_turns(self._client or DBOS, chat_key, request_prefix)

    async def _enqueue(self, rid: str, chat_key: str, workflow: Any, name: str, *args: Any) -> None:
        """Put workflow ``name`` on the turn queue as ``rid`` (an existing ``rid`` is left as it is)."""
        if self._client is not None:
            options: Any = {
                "workflow_name": name,
                "queue_name": QUEUE_NAME,
                "workflow_id": rid,
                "queue_partition_key": chat_key,
                "app_version": APP_VERSION,
            }
            await self._client.enqueue_async(options, *args)
        else:
            with (
                SetWorkflowID(rid),
                SetEnqueueOptions(queue_partition_key=chat_key, app_version=APP_VERSION),
            ):
                await self._queue.enqueue_async(workflow, *args)
            if self._dequeuer is not None:  # claim it now rather than at the next poll
                self._dequeuer.request()
        if self._wake is not None:  # other workers claim at once (this one already did)
            self._wake.notify_soon(QUEUED_CHANNEL)

    async def _await_result(
        self,
        rid: str,
        watched: asyncio.Future[asyncio.Task[Any]] | None,
        done: asyncio.Future[None] | None,
    ) -> AgentResult:
        """The turn's recorded result: from its task when it runs here, else from the database.

        The workflow's task ends after DBOS recorded the outcome, so both paths return what the
        database holds. A turn running elsewhere is read from the database when its worker's
        ``NOTIFY`` arrives (Postgres), and otherwise at a growing interval (the fallback).
        """
        from dbos._outcome import NoResult

        sys_db = self._client._sys_db if self._client is not None else _sys_db()
        interval = RESULT_POLL_SECONDS
        if done is not None:  # Postgres: the worker's notification is the signal, polls a fallback
            interval = RESULT_POLL_MAX_SECONDS[self._backend] / 4
        elif watched is not None:  # this worker claims the turn itself in a few milliseconds
            interval = RESULT_POLL_SECONDS * 5
        while True:
            signals: set[asyncio.Future[Any]] = {f for f in (watched, done) if f is not None}
            if signals:
                await asyncio.wait(signals, timeout=interval, return_when=asyncio.FIRST_COMPLETED)
            else:
                await asyncio.sleep(interval)
            if watched is not None and watched.done():
                task = watched.result()
                await asyncio.wait({task})
                if not task.cancelled():
                    return task.result()  # type: ignore[no-any-return]
                watched = None  # cancelled (this worker is stopping): the database decides
            found = await anyio.to_thread.run_sync(sys_db.check_workflow_result, rid)
            if not isinstance(found, NoResult):
                return found  # type: ignore[no-any-return]
            if done is not None and done.done():
                done = self._wake.waiter(rid) if self._wake is not None else None  # re-arm
            interval = min(interval * 1.5, RESULT_POLL_MAX_SECONDS[self._backend])


def _stop_process() -> None:
    """Ask this process to stop as SIGTERM does (``shipagent worker`` and ``serve`` stop cleanly)."""
    signal.raise_signal(signal.SIGTERM)


def _sys_db() -> Any:
    from dbos._dbos import _get_dbos_instance

    return _get_dbos_instance()._sys_db
