"""Telegram's wire details: an update as an :class:`InboundMessage`, PTB's errors as the pipeline's.

Chat keys: ``telegram:chat:<chat id>``; a message in a forum topic belongs to
``telegram:chat:<chat id>:topic:<thread id>``, so every topic is its own conversation and its
replies go back into the topic.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from telegram import Message, MessageEntity, Update
from telegram.error import BadRequest, Forbidden, NetworkError, RetryAfter, TelegramError

from .._types import (
    Attachment,
    ButtonPress,
    InboundMessage,
    MarkupRejected,
    PermanentSendError,
    TransientSendError,
)

__all__ = ["ALLOWED_UPDATES", "chat_key_of", "is_photo", "seconds", "send_error", "to_inbound"]

ALLOWED_UPDATES = ["message", "callback_query"]
"""The updates the channel asks Telegram for (polling and webhook alike): messages, button presses."""


def chat_key_of(chat_id: int, thread_id: int | None) -> str:
    """The chat key of a Telegram chat (and forum topic)."""
    key = f"telegram:chat:{chat_id}"
    return f"{key}:topic:{thread_id}" if thread_id is not None else key


PHOTO_MAX_BYTES = 10 * 1024 * 1024
"""``sendPhoto`` takes at most 10 MB; a larger image goes as a document."""

_PHOTO_SIGNATURES = {
    ".png": (b"\x89PNG\r\n\x1a\n",),
    ".jpg": (b"\xff\xd8\xff",),
    ".jpeg": (b"\xff\xd8\xff",),
    ".webp": (b"RIFF",),
}


def is_photo(name: str, data: bytes) -> bool:
    """Whether a file goes as a photo: a PNG, JPEG or WebP (by name and content) of at most 10 MB.

    Telegram recompresses a photo and shows it inline; anything else (a GIF too, which as a photo
    would lose its animation, and a file named ``.png`` that is not one) goes as a document, sent
    byte for byte.
    """
    signatures = _PHOTO_SIGNATURES.get(Path(name).suffix.lower())
    if signatures is None or len(data) > PHOTO_MAX_BYTES:
        return False
    if data.startswith(b"RIFF"):
        return data[8:12] == b"WEBP"
    return data.startswith(signatures)


def seconds(exc: RetryAfter) -> float:
    """``exc.retry_after`` in seconds.

    PTB 22 gives an ``int`` (with a deprecation warning) or a ``timedelta`` (``PTB_TIMEDELTA=1``);
    both are read without the warning.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value: Any = exc.retry_after
    total = getattr(value, "total_seconds", None)
    return float(total()) if callable(total) else float(value)


def _mentions(message: Message, bot_id: int, username: str) -> bool:
    entities = message.parse_entities() if message.text else message.parse_caption_entities()
    handle = f"@{username}".lower()
    for entity, text in entities.items():
        if entity.type == MessageEntity.MENTION and text.lower() == handle:
            return True
        if entity.type == MessageEntity.TEXT_MENTION and entity.user and entity.user.id == bot_id:
            return True
    replied = message.reply_to_message
    return bool(
        replied is not None
        and replied.from_user is not None
        and replied.from_user.id == bot_id
        and replied.forum_topic_created is None
    )


def _attachments(message: Message) -> tuple[Attachment, ...]:
    found: list[Attachment] = []
    if message.document is not None:
        d = message.document
        found.append(Attachment(d.file_id, "document", d.file_name, d.file_size, d.mime_type))
    if message.photo:
        p = message.photo[-1]  # the largest size
        found.append(Attachment(p.file_id, "photo", None, p.file_size, "image/jpeg"))
    if message.voice is not None:
        v = message.voice
        found.append(Attachment(v.file_id, "voice", None, v.file_size, v.mime_type))
    if message.audio is not None:
        a = message.audio
        found.append(Attachment(a.file_id, "audio", a.file_name, a.file_size, a.mime_type))
    return tuple(found)


def to_inbound(update: Update, bot_id: int, username: str) -> InboundMessage | None:
    """The update as a message for the pipeline, or ``None`` for what it does not handle."""
    message = update.message
    if message is None or message.from_user is None:
        return None  # edits, channel posts, service updates
    chat = message.chat
    thread = message.message_thread_id if message.is_topic_message else None
    sender = message.from_user
    replied = message.reply_to_message
    return InboundMessage(
        channel="telegram",
        chat_key=chat_key_of(chat.id, thread),
        chat_id=str(chat.id),
        message_id=str(message.message_id),
        sender_id=str(sender.id),
        sender_name=sender.full_name,
        text=message.text or message.caption or "",
        is_group=chat.type in (chat.GROUP, chat.SUPERGROUP),
        mentions_bot=_mentions(message, bot_id, username),
        sender_is_bot=sender.is_bot,
        thread_id=str(thread) if thread is not None else None,
        reply_to=str(replied.message_id) if replied is not None else None,
        attachments=_attachments(message),
    )


def to_press(update: Update) -> ButtonPress | None:
    """A callback query (a pressed inline button) as a :class:`ButtonPress`, if it has a chat."""
    query = update.callback_query
    if query is None or query.data is None or query.message is None:
        return None
    message = query.message
    thread = (
        getattr(message, "message_thread_id", None) if getattr(message, "is_topic_message", False) else None
    )
    return ButtonPress(
        channel="telegram",
        chat_key=chat_key_of(message.chat.id, thread),
        chat_id=str(message.chat.id),
        press_id=query.id,
        sender_id=str(query.from_user.id),
        sender_name=query.from_user.full_name,
        data=query.data,
        message_id=str(message.message_id),
    )


def send_error(exc: TelegramError, clean: Any) -> Exception | None:
    """PTB's error as the pipeline's (``None``: not an error, e.g. an edit that changed nothing).

    ``clean`` removes the token from a text (PTB's messages never should carry it; belt and braces).
    """
    text = clean(str(exc))
    if isinstance(exc, RetryAfter):
        return TransientSendError(text, seconds(exc))
    if isinstance(exc, BadRequest):  # (a subclass of NetworkError: checked first)
        lowered = text.lower()
        if "message is not modified" in lowered:
            return None
        if "can't parse entities" in lowered or "can't find end of the entity" in lowered:
            return MarkupRejected(text)
        return PermanentSendError(text)
    if isinstance(exc, Forbidden):
        return PermanentSendError(text)
    if isinstance(exc, NetworkError):
        return TransientSendError(text)
    return PermanentSendError(text)
