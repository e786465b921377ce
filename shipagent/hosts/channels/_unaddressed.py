"""What a group said that was not for the bot (``groups.historyLimit``), kept for its next turn.

In a group with ``requireMention`` the bot answers only messages that address it, so without this
it answers a question like "what do you think?" blind to the conversation it refers to. With
``historyLimit`` N > 0 the last N unaddressed messages of each group chat (a forum topic is its
own) are kept and given to the model with the next addressed turn, before the message, as a
block it is told nobody addressed to it; then they are dropped.

They are kept in memory only, on purpose: a restart loses at most N lines of context, while
writing every group message the bot was *not* asked about to disk would keep people's chatter
the bot was never meant to read. The number of groups kept is bounded too.
"""

from __future__ import annotations

from collections import deque

from ..._cache import BoundedCache
from ...results import Sender
from ._types import InboundMessage

__all__ = ["GroupChatter", "sender_of"]

MAX_GROUPS = 1000
"""Group chats whose chatter is kept at once; the one quiet longest is dropped first."""


def sender_of(message: InboundMessage) -> Sender | None:
    """The message's sender as the transcript records it (``None`` if the platform gave no id)."""
    try:
        return Sender(message.sender_id, message.sender_name)
    except ValueError:
        return None


class GroupChatter:
    """The last ``limit`` unaddressed messages per group chat key, until its next turn takes them."""

    def __init__(self, limit: int, *, max_groups: int = MAX_GROUPS) -> None:
        self.limit = limit
        self._chats: BoundedCache[str, deque[str]] = BoundedCache(max_groups)  # the most recently active last

    def keep(self, message: InboundMessage) -> None:
        """Remember ``message`` (a group message that did not address the bot), if any are kept."""
        if self.limit <= 0:
            return
        text = " ".join(message.text.split()) or ("(a file)" if message.attachments else "")
        if not text:
            return
        sender = sender_of(message)
        line = f"{sender.label}: {text}" if sender is not None else text
        lines = self._chats.get(message.chat_key) or deque(maxlen=self.limit)
        lines.append(line)
        self._chats[message.chat_key] = lines

    @property
    def max_groups(self) -> int:
        return self._chats.max_size

    def take(self, chat_key: str) -> str | None:
        """The preface for the chat's next turn (and forget those messages), or ``None``."""
        lines = self._chats.pop(chat_key, None)
        if not lines:
            return None
        return "Messages in this group since your last reply (not addressed to you):\n" + "\n".join(lines)
