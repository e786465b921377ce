"""QQ's passive replies: their ``msg_seq`` numbers, QQ's cap of five per message, and retries that
send nothing twice.

Every reply in a group or direct chat names the message it answers (``msg_id``) and a number
unique for that message (``msg_seq``: 1, 2, …), and QQ takes at most :data:`MAX_REPLIES` of them
(a sixth is refused with error 22009). The pipeline hands each text over whole, and it is split
here (to ``textChunkLimit``), because only here is it known how many replies are left:

- While the turn runs (``chat_send`` texts, files), the fifth reply is kept for the answer: a text
  that does not fit in the first four is refused whole, so the model says it in its answer.
- The answer (anything sent once the turn is over) may use all five; one that needs more is cut,
  and its last reply carries as much as fits and ends with :data:`CUT_NOTE`. The model's whole
  answer stays in the chat's history either way.

A number is used up only once QQ took the reply: a send retried after a network failure goes with
the same number, and QQ's "already used" answer then means the first attempt arrived; the pieces
of a text that QQ took before the failure are not sent again. A message answered again after a
restart goes on after the numbers QQ says it already has.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from .._split import split_markdown
from .._types import InboundMessage, PermanentSendError, SentMessage, TransientSendError
from ._wire import MAX_REPLIES

__all__ = ["CUT_NOTE", "PassiveReplies", "RepliesUsed", "SeqUsed"]

log = logging.getLogger("shipagent.hosts.channels.qq")

CUT_NOTE = (
    "(Cut here: QQ allows only 5 replies to one message. Ask me for the rest; the whole answer is "
    "in this chat's history.)"
)
"""How the last reply an answer may have ends when the answer needed more replies than QQ allows."""

Api = Callable[[str, str, dict[str, Any]], Awaitable[dict[str, Any]]]
"""One request to QQ's API (method, path, JSON body), raising the pipeline's send errors."""

_Build = Callable[[int], tuple[dict[str, Any], bool]]
"""A reply's body for a ``msg_seq`` (and whether it is the last reply of its text); raises
:class:`RepliesUsed` when that number is past what the text may use."""


class SeqUsed(PermanentSendError):
    """QQ already has a reply with this ``msg_seq`` for this message."""


class RepliesUsed(PermanentSendError):
    """QQ takes no more replies to this message (:data:`MAX_REPLIES`), or none are left for this."""


class PassiveReplies:
    """The replies a QQ channel sends, per inbound message."""

    def __init__(self, api: Api, limit: int) -> None:
        self._api = api
        self.limit = limit
        """``textChunkLimit``: the longest reply."""
        self._seqs: dict[str, int] = {}  # inbound message id -> the next msg_seq of a reply to it
        self._retry: dict[str, tuple[int, dict[str, Any]]] = {}
        """Inbound message id -> the ``msg_seq`` whose send failed on the network, and what it sent:
        QQ may have taken it, so the retry goes with the same number."""
        self._partly: dict[str, tuple[str, int]] = {}  # message id -> a text, how many pieces went

    def _cap(self, answer: bool) -> int:
        return MAX_REPLIES if answer else MAX_REPLIES - 1  # while the turn runs, one is kept

    def left(self, chat: InboundMessage, *, answer: bool) -> int:
        """How many replies to ``chat`` an answer (or, while the turn runs, anything else) may use."""
        return max(self._cap(answer) - self._next(chat.message_id) + 1, 0)

    def _next(self, message_id: str) -> int:
        """The next ``msg_seq`` a reply to ``message_id`` goes with (a failed send's, retried)."""
        retry = self._retry.get(message_id)
        return retry[0] if retry is not None else self._seqs.get(message_id, 1)

    async def text(self, chat: InboundMessage, body: str, *, answer: bool) -> SentMessage:
        """``body`` as replies to ``chat``, split to :attr:`limit`, within the replies left.

        ``answer``: the turn is over (this is its answer, a failure, a command's reply); otherwise
        the fifth reply is kept for the answer. A send retried after a failure (the same text to
        the same message) goes on from the piece that failed.
        """
        pieces = split_markdown(body, self.limit) or [body]
        done_text, done = self._partly.pop(chat.message_id, ("", 0))
        start = done if done_text == body else 0
        if chat.chat_key.startswith("qq:channel:"):  # guild channels: no msg_seq, no reply count
            return await self._guild(chat, body, pieces, start)
        where = "groups" if chat.is_group else "users"
        cap, left = self._cap(answer), self.left(chat, answer=answer)
        if not answer and len(pieces) - start > left:
            raise RepliesUsed(
                f"QQ allows {MAX_REPLIES} replies to one message and the last is kept for the answer; "
                f"this text needs {len(pieces) - start} and {left} are left, so it was not sent: say it "
                "in your answer instead"
            )
        sent = SentMessage(chat.message_id)
        for index in range(start, len(pieces)):
            self._partly[chat.message_id] = (body, index)
            sent, last = await self._passive(chat, where, self._piece(pieces[index:], cap, answer))
            if last:
                break
        self._partly.pop(chat.message_id, None)
        return sent

    async def _guild(self, chat: InboundMessage, body: str, pieces: list[str], start: int) -> SentMessage:
        sent = SentMessage(chat.message_id)
        for index in range(start, len(pieces)):
            self._partly[chat.message_id] = (body, index)
            payload = {"content": pieces[index], "msg_id": chat.message_id}
            data = await self._api("POST", f"/channels/{chat.chat_id}/messages", payload)
            sent = SentMessage(str(data.get("id") or chat.message_id))
        self._partly.pop(chat.message_id, None)
        return sent

    async def media(
        self, chat: InboundMessage, message: dict[str, Any], name: str, *, answer: bool
    ) -> SentMessage:
        """``message`` (an uploaded file's reply) as the next reply to ``chat``, if one is left."""
        cap = self._cap(answer)

        def build(seq: int) -> tuple[dict[str, Any], bool]:
            if seq > cap:
                raise RepliesUsed(f"QQ allows {MAX_REPLIES} replies to one message; {name} was not sent")
            return message, True

        sent, _ = await self._passive(chat, "groups" if chat.is_group else "users", build)
        return sent

    def _piece(self, rest: list[str], cap: int, answer: bool) -> _Build:
        """The reply carrying ``rest[0]`` at a ``msg_seq``: at the last number ``cap`` allows, with
        more pieces left, as much of the rest as fits with :data:`CUT_NOTE` (the last reply)."""

        def build(seq: int) -> tuple[dict[str, Any], bool]:
            if seq > cap:
                said = (
                    "all were used: this text was not sent" if answer else "the last is kept for the answer"
                )
                raise RepliesUsed(f"QQ allows {MAX_REPLIES} replies to one message and {said}")
            if seq < cap or len(rest) == 1:
                return {"content": rest[0], "msg_type": 0}, len(rest) == 1
            room = max(self.limit - len(CUT_NOTE) - 2, 32)
            shown = split_markdown("\n".join(rest), room)[0].rstrip()
            log.info("qq: an answer needs more than %d replies; the last one says it was cut", MAX_REPLIES)
            return {"content": f"{shown}\n\n{CUT_NOTE}", "msg_type": 0}, True

        return build

    async def _passive(self, chat: InboundMessage, where: str, build: _Build) -> tuple[SentMessage, bool]:
        """Send what ``build`` makes for the next ``msg_seq`` as a reply to ``chat`` (a group or C2C
        message); whether it was the last reply of its text."""
        seq = self._next(chat.message_id)
        retry = self._retry.pop(chat.message_id, None)
        while True:
            message, last = build(seq)  # raises past the numbers this text may use
            self._take(chat.message_id, seq + 1)
            payload = {**message, "msg_id": chat.message_id, "msg_seq": seq}
            try:
                data = await self._api("POST", f"/v2/{where}/{chat.chat_id}/messages", payload)
            except TransientSendError:
                self._retry[chat.message_id] = (seq, payload)  # the retry goes with the same number
                raise
            except RepliesUsed:
                self._take(chat.message_id, MAX_REPLIES + 1)  # QQ counts more than we knew of
                raise
            except SeqUsed:
                if retry == (seq, payload):  # this very reply, retried: the first attempt arrived
                    return SentMessage(f"{chat.message_id}#{seq}"), last
                seq += 1  # taken by another reply (an earlier attempt, or before a restart): the next
                continue
            return SentMessage(str(data.get("id") or f"{chat.message_id}#{seq}")), last

    def _take(self, message_id: str, following: int) -> None:
        self._seqs[message_id] = max(following, self._seqs.get(message_id, 1))
        while len(self._seqs) > 1000:  # replies are accepted for an hour at most: old ones go
            del self._seqs[next(iter(self._seqs))]
