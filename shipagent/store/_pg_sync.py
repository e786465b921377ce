"""The blocking way into Postgres, for callers that cannot await: no thread of our own, no second pool.

The stores are async and their connections belong to the event loop that opened them
(:class:`~shipagent.store._pg_base.PgPool` keeps them per loop). A synchronous caller —
``ShipAgent.history``/``expand``/``reconstruct``, the sync :class:`~shipagent.tools.files.ContextFiles`
API of a cluster, a CLI — gets its answer by :func:`blocking`, which picks the one safe way:

* in a worker thread of a running loop (``anyio.to_thread.run_sync``: the tools' file work,
  serve's context-file routes, the elided-result hook), the coroutine runs back on that loop
  (``anyio.from_thread.run``): the loop is free while its thread waits, and its pool is reused;
  the call runs to its end even when the run is cancelled meanwhile (the thread waits for it);
* in a thread with no loop at all (a CLI, a script, a plain thread, a worker thread that outlived
  its loop), on a loop made for this one call (:func:`asyncio.run`), whose connections are closed before it ends;
* on the thread of a running loop, never: waiting there would stop every other task of that loop
  while the database answers. That is a :class:`~shipagent.errors.ShipAgentError` naming the
  async method to await instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import anyio
import anyio.from_thread

from ..errors import ShipAgentError
from ._pg_base import PgPool, redact

__all__ = ["blocking", "pg_errors", "refuse_on_a_loop"]

_T = TypeVar("_T")


@contextmanager
def pg_errors(url: str) -> Iterator[None]:
    """A database error as a :class:`ShipAgentError` without the password (a tool reports it as data)."""
    import psycopg

    try:
        yield
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [""])[0].replace(url, redact(url))
        raise ShipAgentError(f"Postgres at {redact(url)}: {type(exc).__name__}: {first}") from None


def refuse_on_a_loop(instead: str) -> None:
    """Raise on the thread of a running event loop, before the caller takes any lock.

    A worker thread may hold a lock while it waits on this very loop for the database, so the
    loop's thread must be refused before it waits for that lock, not after.

    Raises:
        ShipAgentError: naming ``instead``, what an async caller awaits.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise ShipAgentError(
        "this call waits for the cluster's Postgres database and would block the running event "
        f"loop (every other task on it) until the database answers: await {instead} instead"
    )


def blocking(pool: PgPool, call: Callable[[], Awaitable[_T]], *, instead: str) -> _T:
    """``await call()`` from synchronous code, on ``pool``'s connections for the loop that runs it.

    Args:
        pool: the connections ``call`` uses.
        call: makes the coroutine (called on the loop that will run it).
        instead: what an async caller awaits instead, for the error on a running loop.

    Raises:
        ShipAgentError: called on the thread of a running event loop.
    """
    refuse_on_a_loop(instead)
    started = False

    async def on_the_callers_loop() -> _T:
        nonlocal started
        started = True
        # shielded: anyio runs this in the cancel scope of the task that waits for the thread, so a
        # cancelled run would stop the query half-way while the thread's caller goes on as if it
        # had answered (a file written here and never stored); the loop waits for the thread anyway
        with anyio.CancelScope(shield=True), pg_errors(pool.url):
            answer = await call()
        return answer

    try:  # a worker thread of a running loop: run there, on that loop's connections
        return anyio.from_thread.run(on_the_callers_loop)
    except (anyio.NoEventLoopError, anyio.RunFinishedError):  # no loop, or its loop has ended
        if started:  # pragma: no cover - raised by the call itself, not by the hop
            raise

    async def once() -> _T:
        try:
            with pg_errors(pool.url):
                return await call()
        finally:
            await pool.release()  # this loop ends with the call: its connections go first

    return asyncio.run(once())
