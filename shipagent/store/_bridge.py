"""Postgres stores for synchronous callers: one background event loop per process.

The context files API (:class:`~shipagent.tools.files.ContextFiles`) and the agent's inspection methods
(``history``, ``expand``, ``reconstruct``) are synchronous. They are called from worker threads,
from the worker's event loop itself (the elided-result hook, ``exec_shell``'s path lookup) and
from CLIs with no loop at all. In a Postgres cluster they reach the database through
:class:`PgBridge`: a daemon thread running its own asyncio loop with its own :class:`PgStores`
(a small pool), so the SAME async store code — SQL, schema check, seqs under advisory locks —
serves them, and a blocked caller blocks only itself.

Why not the alternatives: running the coroutine on the worker's loop from the thread
(``anyio.from_thread.run``) only works from anyio worker threads and deadlocks when the loop's own
thread makes the call; a synchronous psycopg connection would duplicate every query of the stores.
Async callers use :meth:`PgBridge.acall`, which awaits the bridge's future without a thread hop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..errors import ShipAgentError
from ._pg_base import redact
from ._postgres import PgStores

__all__ = ["PgBridge"]

_T = TypeVar("_T")
POOL_SIZE = 2
"""Connections the bridge keeps per database (its calls are small and short)."""


class _Loop:
    """The process's bridge loop, started on first use (a daemon: it never holds up exit)."""

    lock = threading.Lock()
    loop: asyncio.AbstractEventLoop | None = None
    thread: threading.Thread | None = None

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls.lock:
            if cls.loop is None or cls.thread is None or not cls.thread.is_alive():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="shipagent-pg-bridge", daemon=True)
                thread.start()
                cls.loop, cls.thread = loop, thread
            return cls.loop


class PgBridge:
    """Call :class:`PgStores` of one database from any thread, loop or none.

    One per database URL per process (:meth:`for_url`), so any number of agents in a process
    share one small pool.
    """

    _lock = threading.Lock()
    _bridges: dict[str, PgBridge] = {}  # noqa: RUF012 - the process-wide registry

    def __init__(self, url: str) -> None:
        self.url = url
        self._stores: PgStores | None = None

    @classmethod
    def for_url(cls, url: str) -> PgBridge:
        with cls._lock:
            bridge = cls._bridges.get(url)
            if bridge is None:
                bridge = cls._bridges[url] = cls(url)
            return bridge

    async def _run(self, fn: Callable[[PgStores], Awaitable[_T]]) -> _T:
        import psycopg

        if self._stores is None:  # made on the bridge loop: its pool's locks belong to that loop
            self._stores = PgStores(self.url, pool_size=POOL_SIZE)
        try:
            return await fn(self._stores)
        except psycopg.Error as exc:  # callers handle ShipAgentError (a tool reports it as data)
            first = (str(exc).strip().splitlines() or [""])[0].replace(self.url, redact(self.url))
            raise ShipAgentError(f"Postgres at {redact(self.url)}: {type(exc).__name__}: {first}") from None

    def call(self, fn: Callable[[PgStores], Awaitable[_T]]) -> _T:
        """Run ``fn(stores)`` on the bridge loop and wait for it (blocks the calling thread only)."""
        loop = _Loop.get()
        if threading.current_thread() is _Loop.thread:  # pragma: no cover - a programming error
            raise RuntimeError("PgBridge.call from the bridge loop itself would deadlock")
        return asyncio.run_coroutine_threadsafe(self._run(fn), loop).result()

    async def acall(self, fn: Callable[[PgStores], Awaitable[_T]]) -> _T:
        """:meth:`call` for coroutines: awaits the bridge loop's future, no thread hop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._run(fn), _Loop.get()))
