"""One turn's reply in a chat: streamed by edits, rolled over before the limit, finished exactly once.

With editing, the answer appears as one message that grows as the model writes: at most one
send or edit per ``interval`` seconds, never an edit that would not change the text, and a new
message started before ``limit`` is reached. The streamed text is shown plain (half-written
Markdown does not render); :meth:`ReplyWriter.finish` then replaces the streamed messages with
the final answer, formatted and split into valid pieces, editing each message once more, sending
pieces that did not exist yet and deleting streamed messages the answer no longer needs. A failed
turn says so in the same message. Without editing, only :meth:`finish` sends.

A streamed answer survives a crash of the process: each message it is posted as is recorded
(``record``, the channel's dedupe record) as soon as it is sent, and the answer given after the
restart is handed those messages (``resume``). It writes into them in order instead of posting
new ones, so the chat ends with one answer, not a half-written one above a second. A message it
cannot edit (the platform refuses, or cannot edit at all) is deleted and the text posted anew;
one it cannot delete either is left as it is (and logged). Messages it does not need (the new
answer is shorter), or that would sit above a message of its own (``chat_send``, a file), are
deleted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from ._delivery import retrying, with_plain_fallback
from ._split import split_markdown
from ._types import Button, InboundMessage, Outbound, PermanentSendError, SentMessage, TransientSendError

if TYPE_CHECKING:
    from ...tools.execution import OutgoingFile

__all__ = ["Pacer", "ReplyWriter", "SendSink"]

log = logging.getLogger("shipagent.hosts.channels")


@dataclass(slots=True)
class Pacer:
    """When a chat last got a send or an edit: shared by the chat's replies, so the pace holds
    across turns too (Telegram throttles a bot per chat, not per answer)."""

    last: float = float("-inf")


@dataclass(slots=True)
class _Shown:
    message: SentMessage
    text: str
    formatted: bool


class ReplyWriter:
    """The messages of one reply; every method is safe to call from concurrent tasks."""

    def __init__(
        self,
        outbound: Outbound,
        chat: InboundMessage,
        *,
        limit: int,
        stream: bool,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        pacer: Pacer | None = None,
        resume: Sequence[str] = (),
        record: Callable[[list[str]], Awaitable[None]] | None = None,
    ) -> None:
        self.outbound = outbound
        self.chat = chat
        self.limit = limit
        self.stream = stream and outbound.capabilities.edit
        self.interval = interval
        self._clock = clock
        self._buffer = ""
        self._start = 0  # where the message being streamed begins in the buffer
        self._shown: list[_Shown] = []  # every message of this reply, in order
        self._streamed: list[int] = []  # which of them hold the streamed answer (indexes)
        self._current = 0  # the one being streamed into (== len(_streamed): none yet)
        self._pacer = pacer if pacer is not None else Pacer()
        self._lock = anyio.Lock()
        self._dirty = False
        self.finished = False
        self._leftover = [SentMessage(sent) for sent in resume]  # an earlier process's, not written into yet
        self._resumed = frozenset(resume)
        self._answer = list(resume)  # the messages the answer is in (what ``record`` is told)
        self._record = record if self.stream else None  # only a streamed answer is seen half-written

    @property
    def has_text(self) -> bool:
        """Whether any text of the answer arrived yet (the typing indicator stops then)."""
        return bool(self._buffer.strip())

    async def _pace(self) -> None:
        wait = self._pacer.last + self.interval - self._clock()
        if wait > 0:
            await anyio.sleep(wait)
        self._pacer.last = self._clock()

    async def _send(self, text: str, formatted: bool, buttons: tuple[Button, ...] = ()) -> SentMessage:
        self._shown.append(await self._post(text, formatted, buttons))
        return self._shown[-1].message

    async def _post(self, text: str, formatted: bool, buttons: tuple[Button, ...] = ()) -> _Shown:
        await self._pace()

        async def go(fmt: bool) -> SentMessage:
            return await self.outbound.send(self.chat, text, formatted=fmt, buttons=buttons)

        if formatted:
            sent, used = await with_plain_fallback(go)
        else:
            sent, used = await retrying(lambda: go(False)), False
        return _Shown(sent, text, used)

    async def _add(self, text: str, formatted: bool) -> int:
        """A new message of the answer (its index): a message left by an earlier process if one is
        left (edited), else a new one (sent, and recorded before anything else is shown)."""
        if self._leftover and self.outbound.capabilities.edit:
            message = self._leftover.pop(0)
            log.info(
                "%s: writing the answer into message %s, posted before a restart",
                self.chat.channel,
                message.message_id,
            )
            self._shown.append(_Shown(message, "", False))
            await self._edit(len(self._shown) - 1, text, formatted)
            return len(self._shown) - 1
        await self._drop_leftover()  # the platform cannot edit them: the answer goes anew
        sent = await self._send(text, formatted)
        self._answer.append(sent.message_id)
        await self._save()
        return len(self._shown) - 1

    async def _save(self) -> None:
        if self._record is None:
            return
        with anyio.CancelScope(shield=True):  # the message is in the chat: its record must follow
            try:
                await self._record(list(self._answer))
            except OSError as exc:  # the answer still goes out; only a crash would show it twice
                log.warning("%s: could not record the answer's messages: %s", self.chat.channel, exc)

    async def _delete(self, message: SentMessage) -> None:
        """Remove a message of an earlier process's answer; one that cannot go stays (logged)."""
        if message.message_id in self._answer:
            self._answer.remove(message.message_id)
        try:
            await retrying(lambda: self.outbound.delete(self.chat, message))
        except (TransientSendError, PermanentSendError) as exc:
            log.warning(
                "%s: message %s, posted before a restart, could not be deleted and stays: %s",
                self.chat.channel,
                message.message_id,
                exc,
            )

    async def _drop_leftover(self) -> None:
        while self._leftover:
            await self._delete(self._leftover.pop(0))

    async def _edit(self, index: int, text: str, formatted: bool) -> None:
        try:
            await self._change(index, text, formatted)
        except PermanentSendError:
            old = self._shown[index].message
            if old.message_id not in self._resumed:
                raise
            log.info(
                "%s: message %s, posted before a restart, cannot be edited; posting anew",
                self.chat.channel,
                old.message_id,
            )
            await self._delete(old)
            await self._drop_leftover()  # they would sit above the text posted now
            self._shown[index] = await self._post(text, formatted)
            self._answer.append(self._shown[index].message.message_id)
            await self._save()

    async def _change(self, index: int, text: str, formatted: bool) -> None:
        shown = self._shown[index]
        if shown.text == text and shown.formatted == formatted:
            return  # nothing would change: no edit
        await self._pace()

        async def go(fmt: bool) -> None:
            await self.outbound.edit(self.chat, shown.message, text, formatted=fmt)

        if formatted:
            _, used = await with_plain_fallback(go)
        else:
            await retrying(lambda: go(False))
            used = False
        shown.text, shown.formatted = text, used

    async def delta(self, text: str) -> None:
        """More of the answer arrived; shown now if the last edit is ``interval`` old."""
        self._buffer += text
        if not self.stream:
            return
        self._dirty = True
        if self._clock() - self._pacer.last >= self.interval:
            await self.flush()

    async def flush(self) -> None:
        """Show what arrived since the last edit (the ticker calls this every ``interval``)."""
        if not self.stream or self.finished:
            return
        async with self._lock:
            if not self._dirty or self.finished:
                return
            self._dirty = False
            current = self._buffer[self._start :]
            while len(current) > self.limit:  # roll over: end this message, go on in a new one
                cut = _cut_at(current, self.limit)
                await self._show(current[:cut].rstrip())
                self._start += cut
                self._current += 1
                current = self._buffer[self._start :]
            if current.strip():
                await self._show(current)

    async def _show(self, text: str) -> None:
        """Put ``text`` (plain) into the message being streamed, sending it if it is new."""
        if self._current < len(self._streamed):
            await self._edit(self._streamed[self._current], text, False)
        elif text.strip():
            self._streamed.append(await self._add(text, False))

    async def send_separate(self, text: str, buttons: tuple[Button, ...] = ()) -> SentMessage | None:
        """A message of its own (``chat_send``, a question with ``buttons``), formatted, paced.

        What was streamed before it stays as it is; text streamed after it (and the final
        answer) goes into new messages below it, so the chat reads in the order things were said.
        """
        async with self._lock:
            await self._drop_leftover()  # an earlier answer's messages would sit above it
            pieces = split_markdown(text, self.limit)
            sent = None
            for n, piece in enumerate(pieces):
                sent = await self._send(piece, True, buttons if n == len(pieces) - 1 else ())
            self._streamed = []
            self._current = 0
            self._start = len(self._buffer)
            return sent

    async def send_file(self, file: OutgoingFile) -> SentMessage:
        """A file (``chat_send_file``) as a message of its own, paced and retried like text.

        Like :meth:`send_separate`, text streamed after it goes into new messages below it. A
        caption is formatted, and goes plain if the platform rejects its markup.
        """
        async with self._lock:
            await self._drop_leftover()
            await self._pace()

            async def go(fmt: bool) -> SentMessage:
                return await self.outbound.send_file(self.chat, file, formatted=fmt)

            if file.caption:
                sent, _ = await with_plain_fallback(go)
            else:
                sent = await retrying(lambda: go(False))
            self._streamed = []
            self._current = 0
            self._start = len(self._buffer)
            return sent

    async def settle(self, message: SentMessage, text: str) -> None:
        """Replace a question's text (and so remove its buttons), paced with the stream."""
        async with self._lock:
            for index, shown in enumerate(self._shown):
                if shown.message == message:
                    await self._edit(index, text, True)

    async def finish(self, answer: str, *, failure: str | None = None) -> None:
        """End the reply: the final ``answer`` in place of the streamed text, or the ``failure``."""
        async with self._lock:
            if self.finished:
                return
            self.finished = True
            if failure is not None:
                await self._fail(failure)
                await self._drop_leftover()
                return
            pieces = split_markdown(answer, self.limit)
            for offset, piece in enumerate(pieces):
                if offset < len(self._streamed):
                    await self._edit(self._streamed[offset], piece, True)
                else:
                    await self._add(piece, True)
            for index in self._streamed[len(pieces) :]:
                message = self._shown[index].message
                await retrying(lambda m=message: self.outbound.delete(self.chat, m))  # type: ignore[misc]
                if message.message_id in self._answer:
                    self._answer.remove(message.message_id)
            await self._drop_leftover()

    async def _fail(self, failure: str) -> None:
        """The failure under what was written so far, in the message being streamed if it fits."""
        note = f"⚠️ {failure}"
        written = self._buffer[self._start :].strip()
        text = f"{written}\n\n{note}" if written else note
        if self._current < len(self._streamed) and len(text) <= self.limit:
            await self._edit(self._streamed[self._current], text, False)
            return
        await self._add((text if len(text) <= self.limit else note)[: self.limit], False)


def _cut_at(text: str, limit: int) -> int:
    for sep in ("\n\n", "\n", " "):
        at = text.rfind(sep, 0, limit)
        if at > limit // 4:
            return at + len(sep)
    return limit


class SendSink:
    """What a turn's ``chat_send`` talks to (``ToolExecutionContext.channel``): each text is sent
    at once as its own message, through the turn's writer, and remembered (something was said,
    so no "(no answer)" follows)."""

    def __init__(self, writer: ReplyWriter) -> None:
        self.writer = writer
        self.sent: list[str] = []

    async def send_text(self, chat_key: str, text: str) -> None:
        await self.writer.send_separate(text)
        self.sent.append(text)
