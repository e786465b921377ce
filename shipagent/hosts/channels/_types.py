"""What every channel shares: the inbound message, the outbound capabilities, the protocols.

An adapter (Telegram, …) turns a platform's update into one :class:`InboundMessage` and offers the
platform's send API as an :class:`Outbound`; everything that is the same on every platform (who
may talk, dedupe, commands, queueing, streaming by edits, splitting, retries) lives once in
:class:`~shipagent.hosts.channels.Pipeline`. The core knows nothing of this package.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ...tools.execution import OutgoingFile

__all__ = [
    "Attachment",
    "Button",
    "ButtonPress",
    "Capabilities",
    "Channel",
    "ChannelHealth",
    "InboundMessage",
    "MarkupRejected",
    "Outbound",
    "PermanentSendError",
    "SentMessage",
    "TransientSendError",
]


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file that came with a message (not downloaded yet): the platform's id, name and size."""

    file_id: str
    kind: str
    name: str | None = None
    size: int | None = None
    mime_type: str | None = None


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """One message from a platform, in the shape the pipeline understands.

    Attributes:
        channel: the adapter's name (``telegram``).
        chat_key: the conversation the message belongs to (``telegram:chat:42``); a forum topic
            has its own key, so each topic is its own conversation.
        chat_id: the platform's chat id (as text), the first half of the dedupe key.
        message_id: the platform's message id (as text), unique within ``chat_id``.
        sender_id: who wrote it (as text); ``sender_name`` is the display name.
        text: the message text (a caption for a file), ``""`` if none.
        is_group: sent in a group (several people) rather than a direct chat.
        mentions_bot: names the bot (an @mention) or replies to one of its messages.
        sender_is_bot: written by a bot (the pipeline ignores those).
        thread_id: the forum topic, if any; replies go there.
        reply_to: the message id this one answers, if any.
    """

    channel: str
    chat_key: str
    chat_id: str
    message_id: str
    sender_id: str
    sender_name: str
    text: str
    is_group: bool = False
    mentions_bot: bool = False
    sender_is_bot: bool = False
    thread_id: str | None = None
    reply_to: str | None = None
    attachments: tuple[Attachment, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """This message as JSON (what the dedupe record keeps until it is answered)."""
        data = asdict(self)
        data["attachments"] = [asdict(a) for a in self.attachments]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> InboundMessage:
        """Read :meth:`to_json` back."""
        fields = dict(data)
        fields["attachments"] = tuple(Attachment(**a) for a in fields.get("attachments", ()))
        return cls(**fields)


@dataclass(frozen=True, slots=True)
class Button:
    """A button under a message: its label, and the data a press sends back (≤ 64 bytes)."""

    label: str
    data: str


@dataclass(frozen=True, slots=True)
class ButtonPress:
    """Someone pressed a :class:`Button`: who, where, which, and the platform's id of the press."""

    channel: str
    chat_key: str
    chat_id: str
    press_id: str
    sender_id: str
    sender_name: str
    data: str
    message_id: str | None = None


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What an adapter's platform can do; the pipeline uses only what is declared."""

    send_text: bool = True
    edit: bool = False
    send_file: bool = False
    typing: bool = False
    buttons: bool = False
    reactions: bool = False


@dataclass(frozen=True, slots=True)
class SentMessage:
    """A message the bot sent: its id, to edit it later."""

    message_id: str


class TransientSendError(Exception):
    """A send that may work if tried again (network, flood control): ``retry_after`` seconds if known."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentSendError(Exception):
    """A send that will not work however often it is tried (chat gone, bot blocked, bad request)."""


class MarkupRejected(PermanentSendError):
    """The platform could not parse the formatted text; the same text can go plain."""


class Outbound(Protocol):
    """The platform's send API, in the pipeline's terms (formatted = Markdown the adapter renders)."""

    capabilities: Capabilities

    async def send(
        self, chat: InboundMessage, text: str, *, formatted: bool, buttons: tuple[Button, ...] = ()
    ) -> SentMessage:
        """Send ``text`` into the chat (and topic) ``chat`` came from, with ``buttons`` under it."""
        ...

    async def edit(self, chat: InboundMessage, message: SentMessage, text: str, *, formatted: bool) -> None:
        """Replace the text of a message the bot sent (its buttons go away)."""
        ...

    async def send_file(self, chat: InboundMessage, file: OutgoingFile, *, formatted: bool) -> SentMessage:
        """Send ``file`` (with its caption) into the chat ``chat`` came from (``capabilities.send_file``)."""
        ...

    async def download(self, attachment: Attachment, target: Path) -> None:
        """Save an inbound file to ``target`` (the pipeline checked its size first)."""
        ...

    async def acknowledge(self, press: ButtonPress, text: str) -> None:
        """Answer a button press (a short notice to the one who pressed)."""
        ...

    async def delete(self, chat: InboundMessage, message: SentMessage) -> None:
        """Remove a message the bot sent."""
        ...

    async def typing(self, chat: InboundMessage) -> None:
        """Show that the bot is writing (a few seconds on most platforms)."""
        ...


@dataclass(slots=True)
class ChannelHealth:
    """What a host reports about a channel (``/healthz``).

    Attributes:
        connected: the last poll or connection attempt worked.
        last_inbound_at: Unix time of the last accepted message, if any.
        last_error: the last problem, said for a person (never containing a secret).
        backlog: messages accepted and not answered yet.
        restarts: polls the watchdog restarted because they did not return in time.
        stopped: the channel gave up (another poller, a revoked token) and needs a person.
        undelivered: answers that could not be sent even after retries.
    """

    connected: bool = False
    last_inbound_at: float | None = None
    last_error: str | None = None
    backlog: int = 0
    restarts: int = 0
    stopped: bool = False
    undelivered: int = 0
    details: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class Channel(Protocol):
    """A running platform connection: started and stopped with the host, reporting its health."""

    name: str
    capabilities: Capabilities
    health: ChannelHealth

    async def start(self) -> None:
        """Connect and begin delivering inbound messages to the pipeline (returns once running)."""
        ...

    async def stop(self) -> None:
        """Stop receiving; messages already accepted are still answered."""
        ...
