"""Channels in durable mode: the receiving process enqueues, the worker that runs the turn replies.

With ship.json ``durable.enabled`` the agent's turns are DBOS workflows that any worker may run
(:mod:`shipagent.hosts.durable`). For a channel that means the process that *receives* a message
(``shipagent serve`` / ``shipagent channels run``) need not be the one that *answers* it: a
platform's send API is stateless HTTP, so a worker needs the bot token, not the connection.

* **Inbound** (:func:`enqueue_turn`, called by the pipeline where it would run the turn): files
  are downloaded here (the receiving process holds the platform's file API), then the turn is
  enqueued as workflow ``shipagent.channel_turn`` with the same request id the pipeline uses,
  ``<channel>:<chat id>:<message id>``, so a message enqueued twice (a replay of the dedupe record
  after a crash between the enqueue and its ``done`` mark) is one workflow and one answer. The
  pipeline marks the message done once it is enqueued: from then on the reply is the workflow's.
* **Worker** (:class:`WorkerReply`, used by the workflow): shows the typing indicator while the
  turn runs, delivers ``chat_send`` texts as they are said, and writes the final answer — once,
  as its own recorded step, so a resumed workflow never asks the model again to send it, and a
  delivery that failed is retried as in the pipeline, never by re-running the turn.

What changes against a channel answered in-process: the answer is sent whole, not streamed by
edits (a durable turn's text arrives one recorded model response at a time, and each edit would
be one more recorded step to replay); approval buttons are not shown (a queued turn cannot ask:
``exec_shell`` in ``ask`` mode is refused unless ``allow`` matches, so nothing hangs waiting for a
press the worker would never receive). ``/stop`` (:func:`stop_turn`) cancels the chat's turn on the
queue (``shipagent.hosts.durable._stop``): the one running, on whichever worker, else the next one
waiting; turns queued behind it are answered in order.

This module never imports the durable host (the durable host imports it): the pipeline finds the
queue on ``agent.turn_executor`` through :class:`ChannelTurnQueue`.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import anyio

from ...errors import ShipAgentError
from ._commands import NOTHING_RUNNING, STOPPED
from ._delivery import retrying, with_plain_fallback
from ._incoming import receive_file
from ._types import InboundMessage, Outbound, PermanentSendError, TransientSendError
from ._writer import ReplyWriter, SendSink

if TYPE_CHECKING:
    from ...agent._agent import ShipAgent
    from ...results import AgentResult
    from ...tools.execution import ReplyChannel

__all__ = [
    "ChannelReply",
    "ChannelTurnQueue",
    "WorkerReply",
    "WorkerSide",
    "durable_queue",
    "enqueue_turn",
    "request_id_of",
    "stop_turn",
    "worker_sender",
    "worker_side",
    "worker_where",
]

log = logging.getLogger("shipagent.hosts.channels")

TYPING_EVERY = 4.0  # a platform's typing indicator lasts about five seconds
ENQUEUE_ATTEMPTS = 4


@dataclass(frozen=True, slots=True)
class WorkerSide:
    """What a platform package declares for durable workers, as ``WORKER_SIDE`` in its ``__init__``.

    A worker imports a platform's package only when it runs that platform's first turn
    (:func:`worker_side`), so a worker loads a platform's library only if it answers that platform.

    Attributes:
        sender: ``"module:Class"`` inside the package: the platform's stateless send API, built
            from the platform's ship.json section (``channels.<platform>``) and used as an async
            context manager that is the :class:`Outbound` of the turn's reply.
        channel: ``"module:Class"`` of the platform's channel; its module's ``WHERE`` is the
            paragraph that tells the model where it is, its ``_where_it_is`` the channel's own.
        refused: why a worker cannot answer this platform's chats (then ``sender`` is empty):
            its messages are refused where they arrive, with this reason, and never queued.
    """

    sender: str = ""
    channel: str = ""
    refused: str = ""


def worker_side(channel: str) -> WorkerSide:
    """The ``WORKER_SIDE`` that platform package ``channel`` declares (importing the package)."""
    if not channel.isidentifier():
        raise ShipAgentError(f"a durable turn of channel {channel!r}: not a channel name")
    try:
        package = importlib.import_module(f"{__package__}.{channel}")
    except ModuleNotFoundError as exc:
        if exc.name == f"{__package__}.{channel}":
            raise ShipAgentError(
                f"a durable turn of channel {channel!r}: shipagent has no such channel"
            ) from None
        raise ShipAgentError(
            f"a durable turn of channel {channel!r}: this worker lacks its library ({exc.name}): "
            f"pip install 'shipagent[{channel}]'"
        ) from None
    side = getattr(package, "WORKER_SIDE", None)
    if not isinstance(side, WorkerSide):
        raise ShipAgentError(f"a durable turn of channel {channel!r}: its package declares no WORKER_SIDE")
    return side


def _declared(package: str, target: str) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(f".{module}", package), name)


def worker_sender(agent: ShipAgent, channel: str) -> AbstractAsyncContextManager[Outbound]:
    """This worker's own sender for ``channel``, configured by its ship.json (``channels.<channel>``).

    Raises:
        ShipAgentError: the platform cannot be answered by a worker (its declared reason), or is
            unknown, or its library is missing here.
    """
    side = worker_side(channel)
    if not side.sender:
        raise ShipAgentError(
            f"a durable turn of channel {channel!r}: a worker cannot answer it: {side.refused}"
        )
    sender: Callable[[Any], AbstractAsyncContextManager[Outbound]] = _declared(
        f"{__package__}.{channel}", side.sender
    )
    return sender(getattr(agent.config.channels, channel))


def worker_where(agent: ShipAgent, channel: str) -> tuple[Callable[..., Any], str] | None:
    """The platform channel's own instruction method (to recognise it) and its paragraph."""
    side = worker_side(channel)
    if not side.channel:
        return None
    kind = _declared(f"{__package__}.{channel}", side.channel)
    where: str = importlib.import_module(kind.__module__).WHERE
    limit = getattr(agent.config.channels, channel).text_chunk_limit
    return kind._where_it_is, where.format(limit=f"{limit:,}")


@runtime_checkable
class ChannelTurnQueue(Protocol):
    """What a durable executor offers a channel: enqueue a turn whose worker sends the reply."""

    async def enqueue_channel_turn(
        self, chat_key: str, text: str, *, request_id: str, reply: dict[str, Any]
    ) -> None:
        """Enqueue (idempotent by ``request_id``) and return; the turn's worker answers ``reply``."""
        ...

    async def stop_channel_turn(self, chat_key: str, *, request_prefix: str) -> dict[str, Any] | None:
        """Cancel the chat's running turn, else its oldest queued one (request ids starting with
        ``request_prefix``); the stopped turn's ``reply`` (``{}`` if unknown), ``None`` if none."""
        ...

    async def channel_turns(self, chat_key: str, *, request_prefix: str) -> tuple[int, int]:
        """The chat's channel turns: ``(running on a worker, waiting for one)``."""
        ...


async def queued_state(queue: ChannelTurnQueue, channel: str, message: InboundMessage) -> str:
    """``/status``'s last line in durable mode: what the workers do with the chat's turns."""
    prefix = _chat_prefix(channel, message)
    try:
        running, waiting = await queue.channel_turns(message.chat_key, request_prefix=prefix)
    except Exception as exc:
        log.error("%s: /status in chat %s could not reach the queue: %s", channel, message.chat_id, exc)
        return f"The queue cannot be reached ({type(exc).__name__})."
    state = "A worker is writing an answer." if running else "Idle."
    if waiting:
        state += f" {waiting} message(s) wait for a worker."
    return state


def durable_queue(agent: ShipAgent) -> ChannelTurnQueue | None:
    """The agent's durable queue when its turns are durable (started with ``durable.enabled``)."""
    executor = agent.turn_executor
    return executor if isinstance(executor, ChannelTurnQueue) else None


def request_id_of(channel: str, message: InboundMessage) -> str:
    """The turn's request id (its workflow id in durable mode): one per platform message."""
    return f"{channel}:{message.chat_id}:{message.message_id}"


def _chat_prefix(channel: str, message: InboundMessage) -> str:
    """How every request id of ``message``'s chat starts (``<channel>:<chat id>:``)."""
    return request_id_of(channel, message).removesuffix(message.message_id)


@dataclass(frozen=True, slots=True)
class ChannelReply:
    """Where a durable channel turn's answer goes: the message it answers, and how to split it."""

    channel: str
    message: InboundMessage
    limit: int

    def to_json(self) -> dict[str, Any]:
        """As the workflow's argument (JSON, recorded with the workflow)."""
        return {"channel": self.channel, "message": self.message.to_json(), "limit": self.limit}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChannelReply:
        return cls(str(data["channel"]), InboundMessage.from_json(data["message"]), int(data["limit"]))


async def enqueue_turn(
    agent: ShipAgent,
    outbound: Outbound,
    channel: str,
    batch: list[InboundMessage],
    *,
    limit: int,
    max_attachment_bytes: int,
    model_text: Callable[[InboundMessage, list[str]], str],
) -> bool:
    """Durable mode: enqueue ``batch`` as one turn whose worker replies; ``False`` if not durable.

    ``model_text`` is the pipeline's: what the model reads of one message and its files. A queue
    that cannot be reached after a few tries is said in the chat (the message is not left silent).
    """
    queue = durable_queue(agent)
    if queue is None:
        return False
    message = batch[-1]  # the reply goes where the last one came from
    writer = ReplyWriter(outbound, message, limit=limit, stream=False)  # refusals of files only
    refused = _refused(channel)
    if refused:  # no worker could answer it: said here, where the platform still takes a reply
        log.error("%s: message %s not queued: %s", channel, request_id_of(channel, message), refused)
        await writer.finish("", failure=f"Not answered: durable workers cannot answer {channel} ({refused}).")
        return True
    texts = []
    for item in batch:
        files = [
            await receive_file(agent, outbound, channel, item, a, writer, max_attachment_bytes)
            for a in item.attachments
        ]
        texts.append(model_text(item, files))
    reply = ChannelReply(channel, message, limit).to_json()
    request_id = request_id_of(channel, message)
    for attempt in range(1, ENQUEUE_ATTEMPTS + 1):
        try:
            await queue.enqueue_channel_turn(
                message.chat_key, "\n".join(texts), request_id=request_id, reply=reply
            )
            log.info(
                "%s: message %s of chat %s queued as %s",
                channel,
                message.message_id,
                message.chat_id,
                request_id,
            )
            return True
        except Exception as exc:
            if attempt == ENQUEUE_ATTEMPTS:
                log.error("%s: could not queue message %s: %s", channel, request_id, exc)
                await writer.finish(
                    "", failure=f"The answer failed: could not queue it ({type(exc).__name__})."
                )
                return True
            await anyio.sleep(0.5 * 2 ** (attempt - 1))
    return True  # pragma: no cover - the loop returns


def _refused(channel: str) -> str:
    """Why workers cannot answer ``channel`` (its ``WORKER_SIDE``), or ``""``.

    A channel without a declaration (one not in this package) is queued: its worker says why it
    cannot answer it, as before the declarations.
    """
    try:
        return worker_side(channel).refused
    except ShipAgentError:
        return ""


async def stop_turn(
    queue: ChannelTurnQueue, outbound: Outbound, channel: str, message: InboundMessage, limit: int
) -> None:
    """Durable mode's ``/stop`` (``message``): cancel the chat's current turn on ``queue``, say so.

    The replies are the in-process ones: ``Stopped.`` as the failure of the stopped turn's reply
    (under the message it answers), or ``Nothing is running.`` under the ``/stop``. A worker that
    was running the turn sends nothing more for it.
    """
    prefix = _chat_prefix(channel, message)
    try:
        stopped = await queue.stop_channel_turn(message.chat_key, request_prefix=prefix)
    except Exception as exc:
        log.error("%s: /stop in chat %s could not reach the queue: %s", channel, message.chat_id, exc)
        await _say(outbound, message, f"Could not stop: the queue cannot be reached ({type(exc).__name__}).")
        return
    if stopped is None:
        await _say(outbound, message, NOTHING_RUNNING)
        return
    try:
        answered = ChannelReply.from_json(stopped).message
    except (KeyError, TypeError, ValueError):  # its input unreadable: said under the /stop instead
        answered = message
    writer = ReplyWriter(outbound, answered, limit=limit, stream=False)
    try:
        await writer.finish("", failure=STOPPED)
    except (TransientSendError, PermanentSendError) as exc:
        log.error("%s: could not say a turn in chat %s was stopped: %s", channel, message.chat_id, exc)


async def _say(outbound: Outbound, message: InboundMessage, text: str) -> None:
    try:
        await with_plain_fallback(lambda fmt: outbound.send(message, text, formatted=fmt))
    except (TransientSendError, PermanentSendError) as exc:
        log.error("%s: could not send to chat %s: %s", message.channel, message.chat_id, exc)


class WorkerReply:
    """The reply of one durable channel turn, written by the worker that runs the turn.

    Args:
        outbound: the platform's send API as this worker reaches it (its own HTTP client).
        reply: where the answer goes (:class:`ChannelReply`).
    """

    def __init__(self, outbound: Outbound, reply: ChannelReply) -> None:
        self.outbound = outbound
        self.reply = reply
        self.writer = ReplyWriter(outbound, reply.message, limit=reply.limit, stream=False)
        self.sink = SendSink(self.writer)

    async def run(self, turn: Callable[[ReplyChannel], Awaitable[AgentResult]]) -> AgentResult:
        """``turn(channel)`` with the typing indicator shown while it runs.

        The indicator is a task beside the turn, not a task group around it: the turn's own
        exception (or cancellation) must reach the workflow as it is, not wrapped in a group.
        """
        typing = asyncio.get_running_loop().create_task(self._typing())
        try:
            return await turn(self.sink)
        finally:
            typing.cancel()
            await asyncio.wait({typing})

    async def _typing(self) -> None:
        if not self.outbound.capabilities.typing:
            return
        while True:
            with suppress(TransientSendError, PermanentSendError):  # not worth a retry
                await retrying(lambda: self.outbound.typing(self.reply.message), attempts=1)
            await anyio.sleep(TYPING_EVERY)

    async def deliver(self, result: AgentResult | None, error: str | None = None) -> dict[str, Any]:
        """Send the final answer (or the failure) with the pipeline's retries; what happened, as JSON.

        Never raises for a send that failed: the turn is over and recorded either way, and
        a delivery failure must not make the workflow run the turn again.
        """
        failure, answer = error, ""
        if result is not None and failure is None:
            if not result.success:
                failure = result.output.strip() or "The answer failed."
            else:
                answer = _final_answer(result.output, self.sink.sent)
                if result.cut:
                    answer += f"\n\n_(the answer was cut: {result.finish_reason})_"
        if failure is None and not answer and not self.sink.sent:
            answer = "(no answer)"
        message = self.reply.message
        try:
            await self.writer.finish(answer, failure=failure)
        except (TransientSendError, PermanentSendError) as exc:
            log.error(
                "%s: could not deliver the answer to message %s of chat %s: %s",
                self.reply.channel,
                message.message_id,
                message.chat_id,
                exc,
            )
            return {"delivered": False, "error": str(exc)}
        log.info(
            "%s: answered message %s of chat %s", self.reply.channel, message.message_id, message.chat_id
        )
        return {"delivered": True}


def _final_answer(output: str, sent: list[str]) -> str:
    """The answer still to send: none if ``chat_send`` already sent the same text."""
    answer = output.strip()
    if sent and answer == sent[-1].strip():
        return ""
    return answer
