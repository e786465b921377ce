"""Durable turns and many workers: each turn a DBOS workflow, queued per chat key.

With ship.json ``durable.enabled``, a started agent (``async with agent``) hands every turn to a
:class:`DurableExecutor`: the turn becomes workflow ``shipagent.turn`` whose id is the request id,
on one DBOS queue partitioned by chat key (one turn per chat at a time across all workers). Model
requests, tools with effects and the commit are DBOS steps, so a turn interrupted by a crash is
resumed — by the same worker restarted with its executor id, or by any live worker once the dead
one is found dead (its heartbeat older than ``recoverAfterSeconds``, or its process on the same
machine gone) — without asking the model again or committing twice. SQLite (``.ship/durable.sqlite``) serves one machine; Postgres a cluster.

DBOS is an optional extra (``pip install -e '.[durable]'`` from a clone): the names that need it are
imported on first use, so ``shipagent`` and its CLI load without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._heartbeat import claim_executor_id
from ._settings import DurableSettings, resolve_settings

if TYPE_CHECKING:
    from ._runtime import DurableExecutor, recover_executors

__all__ = [
    "DurableExecutor",
    "DurableSettings",
    "claim_executor_id",
    "recover_executors",
    "resolve_settings",
]


def __getattr__(name: str) -> Any:
    if name in ("DurableExecutor", "recover_executors"):
        from . import _runtime

        return getattr(_runtime, name)
    raise AttributeError(f"module 'shipagent.hosts.durable' has no attribute {name!r}")
