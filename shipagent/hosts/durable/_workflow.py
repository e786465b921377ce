"""The one registered workflow: a turn of a chat, identified by its request id.

DBOS keeps its registry and its runtime in process-global state (``DBOS`` is a singleton; a
second ``DBOS(config=...)`` in the same process returns the first), so one process serves one
durable project: the worker binds its agent here and every dequeued or recovered turn runs on it.
Several workers therefore mean several processes, which is what a cluster is anyway.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING

from dbos import DBOS

from ...errors import ShipAgentError
from ...results import AgentResult
from ._local import LocalTurns
from ._settings import WORKFLOW_NAME
from ._stream import EventPublisher

if TYPE_CHECKING:
    from ...agent._agent import ShipAgent

__all__ = ["bind_agent", "bound_agent", "local_turns", "log_turn", "turn_workflow"]

turn_log = logging.getLogger("shipagent.hosts.durable.turns")
"""One INFO line per turn a worker ran (:func:`log_turn`)."""

_agent: ShipAgent | None = None
local_turns = LocalTurns()
"""The turns this process waits for: a turn that starts here hands its task to the waiter."""


_executor_id = ""


def bind_agent(agent: ShipAgent | None, executor_id: str = "") -> None:
    """Make ``agent`` the one this process's workflows run on (``None`` unbinds)."""
    global _agent, _executor_id
    _agent, _executor_id = agent, executor_id


def bound_agent() -> ShipAgent:
    """The agent this process's workflows run on (a worker binds it before DBOS launches)."""
    if _agent is None:  # pragma: no cover - a worker binds before DBOS launches
        raise ShipAgentError("no agent is bound to this durable worker")
    return _agent


@DBOS.workflow(name=WORKFLOW_NAME)
async def turn_workflow(chat_key: str, text: str, events: str = "") -> AgentResult:
    """Run one turn; the workflow id is the turn's request id.

    ``events``: what the submitter reads live from the workflow's event stream (``_stream``):
    ``"run"`` (``run_stream``'s events), ``"steps"`` (``on_step``'s), ``"all"``, or ``""``
    (nothing is written). It is an argument, so a replay takes the same path.
    """
    agent = bound_agent()
    workflow_id = DBOS.workflow_id
    if workflow_id is not None:
        local_turns.started(workflow_id, asyncio.current_task())
    began, outcome = time.monotonic(), "error"
    try:
        result = await _run(agent, chat_key, text, workflow_id, events)
        outcome = "ok" if result.success else "failed"
        return result
    except asyncio.CancelledError:
        outcome = "cancelled"
        raise
    finally:
        log_turn(chat_key, workflow_id or "", outcome, time.monotonic() - began)


async def _run(
    agent: ShipAgent, chat_key: str, text: str, workflow_id: str | None, events: str
) -> AgentResult:
    if not events:
        return await agent.execute_turn(chat_key, text, request_id=workflow_id)
    publisher = EventPublisher()
    result = await agent.execute_turn(
        chat_key,
        text,
        request_id=workflow_id,
        on_step=publisher.on_step if events in ("steps", "all") else None,
        emit=publisher.emit if events in ("run", "all") else None,
    )
    await publisher.close()
    return result


def log_turn(chat_key: str, request_id: str, outcome: str, seconds: float) -> None:
    """One line per turn this worker ran: which chat and request, how it ended, how long it took.

    ``outcome``: ``ok``; ``failed`` (the turn's result says it failed: model error, a limit);
    ``error`` (the turn raised); ``cancelled`` (this worker stopped during it: the turn stays
    pending and is resumed, and logged again, where it finishes); ``stopped`` (a chat's ``/stop``
    cancelled it: it ends there). A resumed turn's duration is
    this worker's part of it. No texts: neither the user's nor the model's.
    """
    turn_log.info(
        "turn chat=%s request=%s outcome=%s duration=%.3fs executor=%s",
        _field(chat_key),
        _field(request_id),
        outcome,
        seconds,
        _field(_executor_id),
    )


def _field(value: str) -> str:
    """A logfmt value: bare when it is one plain word, else JSON-quoted (one line, always)."""
    if value and all(c.isprintable() and not c.isspace() and c not in '"=' for c in value):
        return value
    return json.dumps(value)
