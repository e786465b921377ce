"""Answering one turn in a chat: a batch of messages in, the agent's answer written into the chat.

Separate from :mod:`._pipeline` because that module decides *whether and when* a message is
answered (access, dedupe, commands, the per-chat queue and its debounce), and this one *how*: a
batch becomes one agent run (or, in durable mode, one queued turn), whose text, tool steps,
approval questions and end are turned into sends and edits by a :class:`~._writer.ReplyWriter`;
meanwhile the typing indicator is kept up and the files that came with the messages are received,
and afterwards a stop or a failure is said in the same message and an answer that could not be
delivered is recorded. The pipeline hands it a batch and gets nothing back: whatever happened is
said in the chat, and the pipeline goes on to the chat's next message.
"""

from __future__ import annotations

import logging
from contextlib import aclosing, suppress
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Protocol

import anyio

from ...events import ApprovalRequired, Compacted, Done, TextDelta, ToolFinished, ToolStarted
from ._approvals import ApprovalDesk
from ._commands import STOPPED
from ._dedupe import Dedupe
from ._delivery import retrying
from ._durable import enqueue_turn
from ._incoming import receive_file
from ._options import PipelineOptions
from ._types import (
    ChannelHealth,
    InboundMessage,
    Outbound,
    PermanentSendError,
    SentMessage,
    TransientSendError,
)
from ._unaddressed import GroupChatter, sender_of
from ._writer import Pacer, ReplyWriter, SendSink

if TYPE_CHECKING:
    from ...agent._agent import ShipAgent
    from ...tools.execution import OutgoingFile

__all__ = ["Answerer", "TurnChat"]

log = logging.getLogger("shipagent.hosts.channels")

_TYPING_EVERY = 4.0  # a platform's typing indicator lasts about five seconds


class TurnChat(Protocol):
    """What answering needs of the chat's queue: the pace its sends keep, and where the running
    turn's scope is kept while it runs, for ``/stop`` to cancel."""

    pacer: Pacer
    running: anyio.CancelScope | None


@dataclass(slots=True)
class _Steps:
    """The tool-steps message of a turn (``showToolSteps``) and its lines."""

    message: SentMessage | None
    lines: list[str]


class _FileSink(SendSink):
    """The sink of a platform that takes files: ``chat_send_file`` delivers through it too."""

    async def send_file(self, chat_key: str, file: OutgoingFile) -> None:
        await self.writer.send_file(file)
        self.sent.append(f"📎 {file.name}")  # something was said: no "(no answer)" after it


class Answerer:
    """Answers a batch of one chat's messages in one turn; one per channel, shared by its chats."""

    def __init__(
        self,
        agent: ShipAgent,
        outbound: Outbound,
        channel: str,
        *,
        dedupe: Dedupe,
        approvals: ApprovalDesk,
        chatter: GroupChatter,
        health: ChannelHealth,
    ) -> None:
        self.agent = agent
        self.outbound = outbound
        self.channel = channel
        self.dedupe = dedupe
        self.approvals = approvals
        self.chatter = chatter
        self.health = health

    async def answer(self, chat: TurnChat, batch: list[InboundMessage], opts: PipelineOptions) -> None:
        """Answer ``batch`` (one message, or a burst merged by the debounce) in one turn.

        ``opts`` are passed per turn, not kept: the pipeline's may be replaced while it runs.
        """
        if await enqueue_turn(  # durable mode: queued; the turn's worker sends the reply (_durable)
            self.agent,
            self.outbound,
            self.channel,
            batch,
            limit=opts.limit,
            max_attachment_bytes=opts.max_attachment_bytes,
            model_text=_model_text,
        ):
            return
        message = batch[-1]  # the reply goes where the last one came from
        writer = ReplyWriter(
            self.outbound,
            message,
            limit=opts.limit,
            stream=opts.stream,
            interval=opts.edit_interval,
            pacer=chat.pacer,
            # an answer cut short by a restart goes on in the messages it was posted as (_writer)
            resume=await self.dedupe.replies([(m.chat_id, m.message_id) for m in batch]),
            record=partial(self.dedupe.replied, message.chat_id, message.message_id),
        )
        sink = _FileSink(writer) if self.outbound.capabilities.send_file else SendSink(writer)
        tools_running = 0
        steps: _Steps | None = None
        failure: str | None = None
        answer = ""
        compacted = False
        request_id = f"{self.channel}:{message.chat_id}:{message.message_id}"
        async with anyio.create_task_group() as helpers:
            helpers.start_soon(self._typing, message, writer, lambda: tools_running > 0)
            if writer.stream:
                helpers.start_soon(self._ticker, writer)
            with anyio.CancelScope() as scope:
                chat.running = scope
                try:
                    texts = [
                        _model_text(m, await self._receive(m, writer, opts.max_attachment_bytes))
                        for m in batch
                    ]
                    events = self.agent.run_stream(
                        message.chat_key,
                        "\n".join(texts),
                        channel=sink,
                        request_id=request_id,
                        approval_timeout=opts.approval_timeout,
                        sender=sender_of(message) if message.is_group else None,
                        preface=self.chatter.take(message.chat_key) if message.is_group else None,
                    )
                    async with aclosing(events) as stream:
                        async for event in stream:
                            if isinstance(event, TextDelta):
                                await writer.delta(event.text)
                            elif isinstance(event, ToolStarted):
                                tools_running += 1
                            elif isinstance(event, ToolFinished):
                                tools_running = max(0, tools_running - 1)
                                if opts.show_tool_steps:
                                    steps = await self._step(writer, steps, event, opts.limit)
                            elif isinstance(event, ApprovalRequired):
                                await self._ask(writer, message, event)
                            elif isinstance(event, Compacted):
                                compacted = True
                            elif isinstance(event, Done):
                                result = event.result
                                if not result.success:
                                    failure = result.output.strip() or "The answer failed."
                                else:
                                    answer = _final_answer(result.output, sink.sent)
                                    if result.cut:
                                        answer += f"\n\n_(the answer was cut: {result.finish_reason})_"
                except Exception as exc:
                    failure = f"The answer failed: {exc}"
            chat.running = None
            if scope.cancelled_caught:
                failure = STOPPED
            with anyio.CancelScope(shield=True):
                await self.approvals.close(writer)
                if failure is None and not answer and not sink.sent:
                    answer = "(no answer)"
                try:
                    await writer.finish(answer, failure=failure)
                except (TransientSendError, PermanentSendError) as exc:
                    self.health.undelivered += 1
                    self.health.last_error = f"could not deliver the answer in chat {message.chat_id}: {exc}"
                    log.error("%s: %s", self.channel, self.health.last_error)
                    await self._note_undelivered(message.chat_key, request_id, exc)
                else:
                    if compacted and failure is None:
                        await self._notice_compacted(writer, message)
            helpers.cancel_scope.cancel()

    async def _notice_compacted(self, writer: ReplyWriter, message: InboundMessage) -> None:
        """After the answer, one short message saying older messages were summarised
        (``context.chatHistory.notice``), so a shorter memory never surprises the user.

        A message of its own, not a line of the answer: the answer was already split, streamed
        and finished, and a notice that fails to send must not touch it.
        """
        if not self.agent.config.context.chat_history.notice:
            return
        try:
            await writer.send_separate(Compacted.NOTICE)
        except (TransientSendError, PermanentSendError) as exc:
            log.warning("%s: could not say chat %s was compacted: %s", self.channel, message.chat_id, exc)

    async def _note_undelivered(self, chat_key: str, request_id: str, exc: Exception) -> None:
        """Keep the loss in the chat's transcript (``/status`` counts it, after a restart too)."""
        try:
            await self.agent.note_undelivered(chat_key, request_id, f"the answer was not delivered: {exc}")
        except Exception as failed:  # the store is down too: the log and the health say it
            log.error("%s: could not record the undelivered answer in %s: %s", self.channel, chat_key, failed)

    async def _receive(self, message: InboundMessage, writer: ReplyWriter, max_bytes: int) -> list[str]:
        """Download the message's files into the chat's context files; lines saying what arrived."""
        lines = []
        for item in message.attachments:
            lines.append(
                await receive_file(
                    self.agent,
                    self.outbound,
                    self.channel,
                    message,
                    item,
                    writer,
                    max_bytes,
                )
            )
        return lines

    async def _step(
        self, writer: ReplyWriter, steps: _Steps | None, event: ToolFinished, limit: int
    ) -> _Steps:
        """``showToolSteps``: one short line per finished tool call, in one message kept up to date."""
        mark = "✓" if event.success else "✗"
        line = f"{mark} {event.tool}: {event.summary[:500]}"
        if steps is None:
            sent = await writer.send_separate(line)
            return _Steps(sent, [line])
        steps.lines.append(line)
        text = "\n".join(steps.lines)[-limit:]
        if steps.message is not None:
            await writer.settle(steps.message, text)
        return steps

    async def _typing(self, message: InboundMessage, writer: ReplyWriter, tools: object) -> None:
        if not self.outbound.capabilities.typing:
            return
        while not writer.finished:
            if not writer.has_text or tools():  # type: ignore[operator]
                with suppress(TransientSendError, PermanentSendError):  # not worth a retry
                    await retrying(lambda: self.outbound.typing(message), attempts=1)
            await anyio.sleep(_TYPING_EVERY)

    async def _ticker(self, writer: ReplyWriter) -> None:
        """Show what the answer has so far, every ``interval``. A send that fails here ends the
        ticking only: the turn goes on, and its last write (``finish``) tries again and says so if
        the answer cannot be delivered (an error here would cut the turn without a word)."""
        while not writer.finished:
            await anyio.sleep(writer.interval)
            try:
                await writer.flush()
            except (TransientSendError, PermanentSendError) as exc:
                log.warning(
                    "%s: showing the answer so far failed; it is sent when it ends: %s", self.channel, exc
                )
                return

    async def _ask(self, writer: ReplyWriter, message: InboundMessage, event: ApprovalRequired) -> None:
        if not self.outbound.capabilities.buttons:
            self.agent.resolve_approval(event.approval_id, False)
            await writer.send_separate(f"Refused `{event.command}`: this chat cannot show approval buttons.")
            return
        await self.approvals.ask(writer, message, event.approval_id, event.command)


def _model_text(message: InboundMessage, files: list[str]) -> str:
    """The message's text, then what arrived with it (in a group the agent names the sender)."""
    return "\n".join([line for line in (message.text, *files) if line]) if files else message.text


def _final_answer(output: str, sent: list[str]) -> str:
    """The answer still to send: none if ``chat_send`` already sent the same text."""
    answer = output.strip()
    if sent and answer == sent[-1].strip():
        return ""
    return answer
