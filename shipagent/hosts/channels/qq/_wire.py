"""QQ's wire details: gateway events as :class:`InboundMessage`, replies as plain text, errors.

Chat keys: ``qq:group:<group_openid>`` for an @-message in a QQ group (``GROUP_AT_MESSAGE_CREATE``),
``qq:c2c:<user_openid>`` for a direct message (``C2C_MESSAGE_CREATE``) and
``qq:channel:<channel_id>`` for an @-message in a QQ guild channel (``AT_MESSAGE_CREATE``). QQ gives
every bot its own openids for users and groups: the ids in ``allowFrom`` and ``groups.allow`` are
those openids, not QQ numbers.

Files: ``chat_send_file`` uploads the bytes (``file_type`` by the file name's extension, see
:func:`media_type`) and replies with the ``file_info`` QQ returns (``msg_type`` 7).

Text: a reply is sent as plain text (``msg_type`` 0); QQ renders Markdown only for bots granted
its Markdown permission, and then only with templates. :func:`plain_text` takes the Markdown
markers out (emphasis, headings, code fences, link syntax) and never makes a text longer, so a
piece split to the limit stays within it.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable
from typing import Any

import httpx

from .._types import Attachment, InboundMessage, PermanentSendError, TransientSendError

__all__ = [
    "FILE",
    "GROUP_AND_C2C_EVENT",
    "IMAGE",
    "INTENTS",
    "MAX_REPLIES",
    "PUBLIC_GUILD_MESSAGES",
    "REPLY_LIMIT_REACHED",
    "VIDEO",
    "VOICE",
    "attachment_id",
    "attachment_url",
    "chat_key_of",
    "intents_for",
    "is_guild_channel",
    "media_type",
    "plain_text",
    "send_error",
    "to_inbound",
]

GROUP_AND_C2C_EVENT = 1 << 25
"""Intent: group @-messages and direct (C2C) messages."""
PUBLIC_GUILD_MESSAGES = 1 << 30
"""Intent: @-messages in guild channels (``AT_MESSAGE_CREATE``)."""
INTENTS = GROUP_AND_C2C_EVENT | PUBLIC_GUILD_MESSAGES
"""Everything the channel may identify with (:func:`intents_for` says what a ship.json asks for)."""


def is_guild_channel(chat_id: str) -> bool:
    """Whether an id of ``groups.allow`` is a guild channel's (digits) rather than a group's openid
    (32 hex digits QQ made up for this bot)."""
    return chat_id.isdigit() and len(chat_id) < 32


def intents_for(policy: str, allow: Iterable[str]) -> tuple[int, int]:
    """The intents a ship.json's ``groups`` asks for, and which of them are optional.

    Group and direct messages always. Guild channel messages (``PUBLIC_GUILD_MESSAGES``, which
    QQ grants a bot separately) only when they could be answered: ``groups.policy`` is ``open``, or
    ``groups.allow`` lists a guild channel id. They are optional: a bot QQ refuses them (close code
    4014) goes on with groups and direct messages.
    """
    if policy == "open" or (policy == "allowlist" and any(is_guild_channel(i) for i in allow)):
        return INTENTS, PUBLIC_GUILD_MESSAGES
    return GROUP_AND_C2C_EVENT, 0


DUPLICATE_SEQ = 40054005
"""QQ's error code for a reply whose ``msg_seq`` was already used for that message."""
REPLY_LIMIT_REACHED = 22009
"""QQ's error code (``msg limit exceed``) for a passive reply past :data:`MAX_REPLIES`."""
MAX_REPLIES = 5
"""Passive replies QQ takes to one message in a group or direct chat (within 5 minutes of a group
message, 60 minutes of a direct one): QQ refuses a sixth with :data:`REPLY_LIMIT_REACHED`."""

IMAGE, VIDEO, VOICE, FILE = 1, 2, 3, 4
"""QQ's ``file_type`` of an upload: what QQ shows the file as."""
_MEDIA = {
    ".png": IMAGE,
    ".jpg": IMAGE,
    ".jpeg": IMAGE,
    ".mp4": VIDEO,
    ".silk": VOICE,
    ".wav": VOICE,
    ".mp3": VOICE,
    ".flac": VOICE,
}

_FENCE = re.compile(r"^[ \t]*```[^\n]*$")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$")
_LINK = re.compile(r"!?\[([^\]\n]*)\]\(([^)\s]+)\)")
_EMPHASIS = re.compile(r"(\*\*|__|~~)(?=\S)(.+?)(?<=\S)\1")
_CODE = re.compile(r"`([^`\n]+)`")


def attachment_id(url: str) -> str:
    """An attachment's id: a short hash (what its saved file is named by) and the URL, encoded so
    that the id is safe in a file name and survives a restart in the dedupe record."""
    encoded = base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
    return hashlib.sha256(url.encode()).hexdigest()[:12] + encoded


def attachment_url(file_id: str) -> str:
    """The URL :func:`attachment_id` encoded."""
    encoded = file_id[12:]
    return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()


def chat_key_of(kind: str, chat_id: str) -> str:
    """The chat key of a QQ group (``group``), direct chat (``c2c``) or guild channel (``channel``)."""
    return f"qq:{kind}:{chat_id}"


def media_type(name: str) -> int:
    """The ``file_type`` a file named ``name`` is uploaded as: QQ takes png/jpg images, mp4 videos
    and silk/wav/mp3/flac voice as such; anything else is a plain file (``FILE``)."""
    dot = name.rfind(".")
    return _MEDIA.get(name[dot:].lower(), FILE) if dot >= 0 else FILE


def plain_text(text: str) -> str:
    """The model's Markdown as QQ shows plain text: markers out, code kept as it is; never longer."""
    out: list[str] = []
    fenced = False
    for line in text.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            out.append(line)
            continue
        if (heading := _HEADING.match(line)) is not None:
            line = heading.group(1)
        line = _LINK.sub(
            lambda m: m.group(1) if m.group(1) == m.group(2) else f"{m.group(1)} {m.group(2)}", line
        )
        line = _EMPHASIS.sub(r"\2", line)
        out.append(_CODE.sub(r"\1", line))
    return "\n".join(out).strip("\n") or text


def _attachments(data: dict[str, Any]) -> tuple[Attachment, ...]:
    found = []
    for item in data.get("attachments") or ():
        url = str(item.get("url") or "")
        if not url:
            continue
        if url.startswith("//"):
            url = "https:" + url
        elif not url.startswith(("http://", "https://")):
            url = "https://" + url  # QQ often leaves the scheme out
        content_type = item.get("content_type")
        kind = {"image": "photo", "audio": "audio", "video": "video"}.get(
            str(content_type or "").split("/")[0], "document"
        )
        size = item.get("size")
        found.append(
            Attachment(
                file_id=attachment_id(url),
                kind=kind,
                name=item.get("filename"),
                size=int(size) if isinstance(size, int | str) and str(size).isdigit() else None,
                mime_type=content_type,
            )
        )
    return tuple(found)


def to_inbound(event: str, data: dict[str, Any], bot_id: str, bot_name: str) -> InboundMessage | None:
    """A gateway dispatch as the pipeline's message (``None``: not a message the channel handles)."""
    author = data.get("author") or {}
    message_id = str(data.get("id") or "")
    text = str(data.get("content") or "")
    if not message_id:
        return None
    if event == "C2C_MESSAGE_CREATE":
        sender = str(author.get("user_openid") or author.get("id") or "")
        kind, chat_id, group = "c2c", sender, False
    elif event == "GROUP_AT_MESSAGE_CREATE":
        sender = str(author.get("member_openid") or author.get("id") or "")
        kind, chat_id, group = "group", str(data.get("group_openid") or data.get("group_id") or ""), True
    elif event == "AT_MESSAGE_CREATE":
        sender = str(author.get("id") or "")
        kind, chat_id, group = "channel", str(data.get("channel_id") or ""), True
        if bot_id:  # the mention QQ puts in the text, as people read it
            text = re.sub(rf"<@!?{re.escape(bot_id)}>", f"@{bot_name}", text)
    else:
        return None
    if not sender or not chat_id:
        return None
    reference = data.get("message_reference") or {}
    return InboundMessage(
        channel="qq",
        chat_key=chat_key_of(kind, chat_id),
        chat_id=chat_id,
        message_id=message_id,
        sender_id=sender,
        sender_name=str(author.get("username") or f"QQ user {sender[-6:]}"),
        text=text.strip(),
        is_group=group,
        mentions_bot=group,  # QQ delivers group and channel messages only when they @ the bot
        sender_is_bot=bool(author.get("bot")),
        reply_to=str(reference["message_id"]) if reference.get("message_id") else None,
        attachments=_attachments(data),
    )


def send_error(exc: Exception, secrets: tuple[str, ...]) -> TransientSendError | PermanentSendError:
    """A failed request as the pipeline's error: a passing one may be retried; never a secret."""

    def clean(text: str) -> str:
        for secret in secrets:
            if secret:
                text = text.replace(secret, "[secret]")
        return text

    if isinstance(exc, httpx.HTTPStatusError):
        response = exc.response
        try:
            body = response.json()
        except ValueError:
            body = {}
        detail = body.get("message") if isinstance(body, dict) else None
        code = body.get("code") or body.get("err_code") if isinstance(body, dict) else None
        said = clean(f"HTTP {response.status_code}" + (f": {code} {detail}" if detail or code else ""))
        if response.status_code == 429 or response.status_code >= 500:
            after = response.headers.get("Retry-After")
            return TransientSendError(said, float(after) if after and after.isdigit() else None)
        if response.status_code == 401:
            return TransientSendError(said)  # the token is fetched again before the retry
        return PermanentSendError(said)
    if isinstance(exc, httpx.HTTPError | OSError | TimeoutError):
        return TransientSendError(clean(f"{type(exc).__name__}: {exc}"))
    return PermanentSendError(clean(f"{type(exc).__name__}: {exc}"))
