"""``/stop`` in durable mode: cancel the chat's current channel turn, wherever it runs.

A durable channel turn is workflow ``shipagent.channel_turn`` whose id is its request id,
``<channel>:<chat id>:<message id>`` (:func:`shipagent.hosts.channels._durable.request_id_of`),
on the turn queue partitioned by chat key. The process that receives ``/stop`` (a worker or a
``--no-worker`` client) looks the chat's unfinished turns up in the system database — by id
prefix, then by exact partition key, so a forum topic's ``/stop`` stops that topic's turn only —
and cancels one: the one running (``PENDING``), else the oldest still queued (``ENQUEUED``, no
worker took it yet). Turns queued behind it stay queued and are answered in order, as in a chat
answered in-process, where ``/stop`` ends the answer being written and the chat's queue goes on.

What cancelling does (DBOS): the workflow's row becomes ``CANCELLED`` and leaves the queue, so
the chat's next turn may start at once. The worker running it notices at its next step
boundary: the next model request, tool with effects, commit or reply raises instead of running.
A model request already in flight is a *preemptible* step (``_hooks``): DBOS polls for the
cancellation about once a second and stops the request, so the turn ends within a second or so
rather than when the model has finished. Nothing of a cancelled turn is committed (the commit is a
step it never reaches), and its reply is never sent (the reply is a step too).

Too late to stop: a turn whose commit step is recorded is left to send its answer (``/stop`` says
nothing is running, as it would in-process once the answer is written). A commit that is running
when ``/stop`` looks (milliseconds) is not preempted: it finishes whole, and only the answer is
not sent.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ._channel_turn import CHANNEL_WORKFLOW_NAME, REPLY_STEP
from ._hooks import COMMIT_STEP

__all__ = ["StoppedTurn", "channel_turns", "stop_channel_turn"]

log = logging.getLogger("shipagent.hosts.durable")

UNFINISHED = ["PENDING", "ENQUEUED"]
"""The states of a turn ``/stop`` can still stop: running, or waiting for a worker."""


@dataclass(frozen=True, slots=True)
class StoppedTurn:
    """The turn a ``/stop`` cancelled: its workflow id, whether it had started, and its reply
    target (:meth:`ChannelReply.to_json`; ``None`` if its input could not be read)."""

    workflow_id: str
    running: bool
    reply: dict[str, Any] | None


async def stop_channel_turn(source: Any, chat_key: str, request_prefix: str) -> StoppedTurn | None:
    """Cancel ``chat_key``'s current channel turn; what was stopped, or ``None`` if nothing was.

    ``source``: ``DBOS`` (a worker) or a ``DBOSClient`` (a client): both offer
    ``list_workflows_async``, ``list_workflow_steps_async`` and ``cancel_workflow_async``.
    ``request_prefix``: ``<channel>:<chat id>:``, the start of every request id of the chat.
    A turn that finished
    between the look-up and the cancel is left as it is (DBOS never cancels a finished workflow)
    and reported as nothing stopped: its answer is on its way or arrived.
    """
    turns = await _unfinished(source, chat_key, request_prefix, load_input=True)
    if not turns:
        return None
    running = [w for w in turns if w.status == "PENDING"]
    target = running[0] if running else min(turns, key=lambda w: (w.created_at or 0, w.workflow_id))
    if running and await _finishing(source, target.workflow_id):
        return None
    await source.cancel_workflow_async(target.workflow_id)
    after = await source.list_workflows_async(
        workflow_ids=[target.workflow_id], load_input=False, load_output=False
    )
    if not after or after[0].status != "CANCELLED":
        return None
    log.info("durable: /stop cancelled %s (%s)", target.workflow_id, "running" if running else "queued")
    return StoppedTurn(target.workflow_id, bool(running), _reply_of(target.input))


async def channel_turns(source: Any, chat_key: str, request_prefix: str) -> tuple[int, int]:
    """``(running, waiting)``: how many of ``chat_key``'s channel turns a worker runs, and how many
    wait for one (``/status`` in durable mode; ``source`` and ``request_prefix`` as above)."""
    turns = await _unfinished(source, chat_key, request_prefix, load_input=False)
    running = sum(1 for w in turns if w.status == "PENDING")
    return running, len(turns) - running


async def _unfinished(source: Any, chat_key: str, request_prefix: str, *, load_input: bool) -> list[Any]:
    """The chat's channel turns still running or queued (by id prefix, then exact partition key)."""
    found = await source.list_workflows_async(
        name=CHANNEL_WORKFLOW_NAME,
        status=UNFINISHED,
        workflow_id_prefix=request_prefix,
        load_input=load_input,
        load_output=False,
    )
    return [
        w
        for w in found
        if w.queue_partition_key == chat_key and str(w.workflow_id).startswith(request_prefix)
    ]


async def _finishing(source: Any, workflow_id: str) -> bool:
    """Whether the running turn is past its commit (or already replying): too late to stop.

    Cancelling it now would not undo the commit, only keep its answer from being sent, so the
    chat's history would hold an answer the user never saw. Its answer is on its way instead.
    """
    steps = await source.list_workflow_steps_async(workflow_id, load_output=False)
    return any(step["function_name"] in (COMMIT_STEP, REPLY_STEP) for step in steps)


def _reply_of(inputs: Any) -> dict[str, Any] | None:
    """The ``reply`` argument of ``channel_turn_workflow(chat_key, text, reply)``."""
    try:
        args = inputs["args"]
        reply = args[2] if len(args) > 2 else inputs["kwargs"]["reply"]
    except (TypeError, KeyError, IndexError):
        return None
    return reply if isinstance(reply, dict) else None
