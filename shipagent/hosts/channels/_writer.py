"""One turn's reply in a chat: streamed by edits, rolled over before the limit, finished exactly once.

With editing, the answer appears as one message that grows as the model writes: at most one
send or edit per ``interval`` seconds, never an edit that would not change the text, and a new
message started before ``limit`` is reached. The streamed text is shown plain (half-written
Markdown does not render); :meth:`ReplyWriter.finish` then replaces the streamed messages with
the final answer, formatted and split into valid pieces, editing each message once more, sending
pieces that did not exist yet and deleting streamed messages the answer no longer needs. A failed
turn says so in the same message. Without editing, only :meth:`finish` sends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from ._delivery import retrying, with_plain_fallback
from ._split import split_markdown
from ._types import Button, InboundMessage, Outbound, SentMessage

if TYPE_CHECKING:
    from ...tools.execution import OutgoingFile

__all__ = ["Pacer", "ReplyWriter"]


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
        await self._pace()

        async def go(fmt: bool) -> SentMessage:
            return await self.outbound.send(self.chat, text, formatted=fmt, buttons=buttons)

        if formatted:
            sent, used = await with_plain_fallback(go)
        else:
            sent, used = await retrying(lambda: go(False)), False
        self._shown.append(_Shown(sent, text, used))
        return sent

    async def _edit(self, index: int, text: str, formatted: bool) -> None:
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
            await self._send(text, False)
            self._streamed.append(len(self._shown) - 1)

    async def send_separate(self, text: str, buttons: tuple[Button, ...] = ()) -> SentMessage | None:
        """A message of its own (``chat_send``, a question with ``buttons``), formatted, paced.

        What was streamed before it stays as it is; text streamed after it (and the final
        answer) goes into new messages below it, so the chat reads in the order things were said.
        """
        async with self._lock:
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
                return
            pieces = split_markdown(answer, self.limit)
            for offset, piece in enumerate(pieces):
                if offset < len(self._streamed):
                    await self._edit(self._streamed[offset], piece, True)
                else:
                    await self._send(piece, True)
            for index in self._streamed[len(pieces) :]:
                message = self._shown[index].message
                await retrying(lambda m=message: self.outbound.delete(self.chat, m))  # type: ignore[misc]

    async def _fail(self, failure: str) -> None:
        """The failure under what was written so far, in the message being streamed if it fits."""
        note = f"⚠️ {failure}"
        written = self._buffer[self._start :].strip()
        text = f"{written}\n\n{note}" if written else note
        if self._current < len(self._streamed) and len(text) <= self.limit:
            await self._edit(self._streamed[self._current], text, False)
            return
        await self._send((text if len(text) <= self.limit else note)[: self.limit], False)


def _cut_at(text: str, limit: int) -> int:
    for sep in ("\n\n", "\n", " "):
        at = text.rfind(sep, 0, limit)
        if at > limit // 4:
            return at + len(sep)
    return limit
