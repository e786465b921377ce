"""Approving a tool's request (``exec_shell`` in ``ask`` mode) with buttons in the chat.

The question goes out as a message with Approve / Deny buttons. Only the person whose message
started the turn, or an id in the channel's ``admins``, may answer; anyone else's press is
refused with a notice and changes nothing. Once answered (or when the turn ends unanswered,
which is a refusal) the message's text says what happened and its buttons are gone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from ._types import Button, ButtonPress, InboundMessage, Outbound, SentMessage

if TYPE_CHECKING:
    from ...agent._agent import ShipAgent
    from ._writer import ReplyWriter

__all__ = ["ApprovalDesk"]

log = logging.getLogger("shipagent.hosts.channels")
_PREFIX = "ap:"


@dataclass(slots=True)
class _Question:
    chat: InboundMessage
    writer: ReplyWriter
    command: str
    message: SentMessage | None = None
    """The question as sent (``None`` until the platform answered the send)."""
    shown: anyio.Event = field(default_factory=anyio.Event)
    """Set once the send returned: a press can arrive before that (the user sees the message
    as soon as the platform has it), and waits for it."""


def _code(command: str) -> str:
    fence = "```"
    return f"{fence}\n{command.replace(fence, '` ` `')}\n{fence}"


class ApprovalDesk:
    """The open questions of one channel, by approval id."""

    def __init__(self, agent: ShipAgent, outbound: Outbound, admins: frozenset[str] = frozenset()) -> None:
        self.agent = agent
        self.outbound = outbound
        self.admins = admins
        self._open: dict[str, _Question] = {}

    async def ask(self, writer: ReplyWriter, chat: InboundMessage, approval_id: str, command: str) -> None:
        """Put the question to the chat (the turn waits for :meth:`press` or its timeout)."""
        buttons = (
            Button("✅ Approve", f"{_PREFIX}{approval_id}:y"),
            Button("❌ Deny", f"{_PREFIX}{approval_id}:n"),
        )
        question = self._open[approval_id] = _Question(chat, writer, command)  # open before it shows
        try:
            question.message = await writer.send_separate(f"Run this command?\n{_code(command)}", buttons)
        finally:
            question.shown.set()
            if question.message is None:  # never shown: nobody can press it
                self._open.pop(approval_id, None)
        if approval_id not in self._open and question.message is not None:  # closed on its way out
            await writer.settle(question.message, f"⌛ No answer: refused.\n{_code(command)}")

    async def press(self, press: ButtonPress) -> None:
        """Someone pressed a button: answer the question if they may."""
        if not press.data.startswith(_PREFIX):
            await self.outbound.acknowledge(press, "")
            return
        approval_id, _, choice = press.data[len(_PREFIX) :].rpartition(":")
        question = self._open.get(approval_id)
        if question is None:
            await self.outbound.acknowledge(press, "This question is closed.")
            return
        if press.sender_id != question.chat.sender_id and press.sender_id not in self.admins:
            await self.outbound.acknowledge(press, f"Only {question.chat.sender_name} can answer this.")
            return
        await question.shown.wait()
        if self._open.pop(approval_id, None) is None or question.message is None:  # answered meanwhile
            await self.outbound.acknowledge(press, "This question is closed.")
            return
        approved = choice == "y"
        self.agent.resolve_approval(approval_id, approved)
        verdict = "✅ Approved" if approved else "❌ Denied"
        await question.writer.settle(
            question.message, f"{verdict} by {press.sender_name}:\n{_code(question.command)}"
        )
        await self.outbound.acknowledge(press, verdict)

    async def close(self, writer: ReplyWriter) -> None:
        """The turn ended: its questions still open were refused (no answer in time)."""
        for approval_id, question in list(self._open.items()):
            if question.writer is writer:
                del self._open[approval_id]
                if question.message is None:  # still on its way: ``ask`` settles it when it arrives
                    continue
                await writer.settle(question.message, f"⌛ No answer: refused.\n{_code(question.command)}")
