"""A chat channel's turn as a workflow whose worker also sends the reply.

In durable mode the process that receives a channel's message (``shipagent serve``, ``shipagent
channels run``) enqueues workflow ``shipagent.channel_turn`` instead of waiting for the turn
(:func:`shipagent.hosts.channels._durable.enqueue_turn`); whichever worker claims it runs the turn
and answers through the platform's stateless send API, with a sender it builds from ship.json
(the bot token from its own environment). So the answer goes out even if the receiving process
died after enqueuing.

The workflow's recorded steps are the turn's (model requests, tools with effects — ``chat_send``
among them —, the commit) and one more, ``shipagent.channel.reply``: the final answer. A worker
killed during the turn is replaced by one that replays the recorded steps (the model is not asked
again) and sends the answer; a worker killed after the reply step was recorded has nothing left
to send. Only a worker killed *during* the reply step, after the platform took the message and
before DBOS recorded the step, sends it again when the step is run again: a platform's send API
offers no idempotency key to make that window disappear.

A turn ``/stop`` cancelled (``_stop``) raises DBOS's cancellation at its next step, or within a
second in a model request or a tool (both preemptible steps): the workflow ends there, logged
``outcome=stopped``, with nothing committed and no reply (the receiving process says it stopped).
The platform's sender comes from the platform package's ``WORKER_SIDE``
(:func:`~shipagent.hosts.channels._durable.worker_side`), imported at the platform's first turn.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dbos import DBOS
from dbos._error import DBOSWorkflowCancelledError

from ...events import Compacted
from ...results import AgentResult, StepEvent
from ...tools.execution import ReplyChannel, ToolExecutionContext
from ..channels._durable import ChannelReply, WorkerReply, worker_sender, worker_where
from ..channels._types import PermanentSendError, TransientSendError
from ._workflow import bound_agent, local_turns, log_turn

if TYPE_CHECKING:
    from ...agent._agent import ShipAgent

__all__ = ["CHANNEL_WORKFLOW_NAME", "channel_turn_workflow"]

log = logging.getLogger("shipagent.hosts.durable")

CHANNEL_WORKFLOW_NAME = "shipagent.channel_turn"
REPLY_STEP = "shipagent.channel.reply"


@DBOS.workflow(name=CHANNEL_WORKFLOW_NAME)
async def channel_turn_workflow(chat_key: str, text: str, reply: dict[str, Any]) -> AgentResult:
    """Run one channel turn and send its answer; the workflow id is the turn's request id.

    ``reply``: :meth:`ChannelReply.to_json` — the message being answered (chat, topic, id) and the
    channel's message limit.
    """
    agent = bound_agent()
    workflow_id = DBOS.workflow_id
    if workflow_id is not None:
        local_turns.started(workflow_id, asyncio.current_task())
    target = ChannelReply.from_json(reply)
    began, outcome = time.monotonic(), "error"
    try:
        _tell_where(agent, target.channel)
        async with worker_sender(agent, target.channel) as outbound:
            answer = WorkerReply(outbound, target)
            compacted = _Compactions()

            async def turn(channel: ReplyChannel) -> AgentResult:
                return await agent.execute_turn(
                    chat_key, text, request_id=workflow_id, channel=channel, on_step=compacted.see
                )

            try:
                result = await answer.run(turn)
            except Exception as exc:  # the turn raised: say so in the chat, then let DBOS record it
                await _reply(answer, None, f"The answer failed: {type(exc).__name__}: {exc}")
                raise
            notice = compacted.seen and agent.config.context.chat_history.notice
            await _reply(answer, result, notice=notice)
        outcome = "ok" if result.success else "failed"
        return result
    except asyncio.CancelledError:
        outcome = "cancelled"
        raise
    except DBOSWorkflowCancelledError:  # /stop: nothing more happens here, the reply above all
        outcome = "stopped"
        raise
    except Exception as exc:  # e.g. no sender here (a worker without the bot token): say it once
        log.error("durable: channel turn %s failed: %s: %s", workflow_id, type(exc).__name__, exc)
        raise
    finally:
        log_turn(chat_key, workflow_id or "", outcome, time.monotonic() - began)


async def _reply(
    answer: WorkerReply, result: AgentResult | None, error: str | None = None, *, notice: bool = False
) -> dict[str, Any]:
    """The final answer as one recorded step: sent once, however often the workflow is replayed.

    ``notice``: the turn compacted the chat's history and ship.json wants the user told; the
    notice goes out in the same step, after the answer was delivered, so it is sent at most once
    too (and never for an answer that did not arrive).
    """

    async def step() -> dict[str, Any]:
        sent = await answer.deliver(result, error)
        if notice and sent.get("delivered") and result is not None and result.success:
            try:
                await answer.writer.send_separate(Compacted.NOTICE)
                sent["notice"] = True
            except (TransientSendError, PermanentSendError) as exc:  # the answer is what counts
                log.warning("%s: could not say the chat was compacted: %s", answer.reply.channel, exc)
        return sent

    sent: dict[str, Any] = await DBOS.run_step_async({"name": REPLY_STEP}, step)
    return sent


def _tell_where(agent: ShipAgent, channel: str) -> None:
    """Tell the model it is on the channel, as the receiving process's channel does (once per agent).

    A worker that also runs the channel itself (``shipagent serve`` with the channel on) has the
    channel's own paragraph already.
    """
    found = worker_where(agent, channel)
    if found is None:
        return
    own, text = found
    for source in agent.instruction_sources:
        if getattr(source, "__func__", None) is own:
            return
        if isinstance(source, _Where) and source.channel == channel:
            return
    agent.instruction_sources.append(_Where(channel, text))


@dataclass(slots=True)
class _Compactions:
    """Whether the turn compacted the chat's history (its ``compaction`` step event)."""

    seen: bool = False

    def see(self, event: StepEvent) -> None:
        if event.type == "compaction":
            self.seen = True


@dataclass(frozen=True, slots=True)
class _Where:
    """The paragraph that tells the model which channel its chat is on (that channel's chats only)."""

    channel: str
    text: str

    def __call__(self, ctx: ToolExecutionContext) -> str | None:
        return self.text if ctx.chat_key.startswith(f"{self.channel}:") else None
