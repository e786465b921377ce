"""The one registered workflow: a turn of a chat, identified by its request id.

DBOS keeps its registry and its runtime in process-global state (``DBOS`` is a singleton; a
second ``DBOS(config=...)`` in the same process returns the first), so one process serves one
durable project: the worker binds its agent here and every dequeued or recovered turn runs on it.
Several workers therefore mean several processes, which is what a cluster is anyway.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from dbos import DBOS

from ..errors import ShipAgentError
from ..results import AgentResult
from ._local import LocalTurns
from ._settings import WORKFLOW_NAME
from ._stream import EventPublisher

if TYPE_CHECKING:
    from ..agent import ShipAgent

__all__ = ["bind_agent", "local_turns", "turn_workflow"]

_agent: ShipAgent | None = None
local_turns = LocalTurns()
"""The turns this process waits for: a turn that starts here hands its task to the waiter."""


def bind_agent(agent: ShipAgent | None) -> None:
    """Make ``agent`` the one this process's workflows run on (``None`` unbinds)."""
    global _agent
    _agent = agent


@DBOS.workflow(name=WORKFLOW_NAME)
async def turn_workflow(chat_key: str, text: str, events: str = "") -> AgentResult:
    """Run one turn; the workflow id is the turn's request id.

    ``events``: what the submitter reads live from the workflow's event stream (``_stream``):
    ``"run"`` (``run_stream``'s events), ``"steps"`` (``on_step``'s), ``"all"``, or ``""``
    (nothing is written). It is an argument, so a replay takes the same path.
    """
    if _agent is None:  # pragma: no cover - a worker binds before DBOS launches
        raise ShipAgentError("no agent is bound to this durable worker")
    workflow_id = DBOS.workflow_id
    if workflow_id is not None:
        local_turns.started(workflow_id, asyncio.current_task())
    if not events:
        return await _agent.execute_turn(chat_key, text, request_id=workflow_id)
    publisher = EventPublisher()
    result = await _agent.execute_turn(
        chat_key,
        text,
        request_id=workflow_id,
        on_step=publisher.on_step if events in ("steps", "all") else None,
        emit=publisher.emit if events in ("run", "all") else None,
    )
    await publisher.close()
    return result
