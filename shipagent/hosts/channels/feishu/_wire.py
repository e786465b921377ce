"""Feishu's wire shapes: chat keys, an ``im.message.receive_v1`` event as an :class:`InboundMessage`,
the bodies the bot sends, and lark-oapi's failures as the pipeline's.

Chat keys: ``feishu:chat:<chat_id>`` for a direct chat (``p2p``) and a group alike (a chat id,
``oc_…``, names either). A user is their ``open_id`` (``ou_…``), the id ``allowFrom``, ``admins``
and pairing use.

In: ``text`` messages (``{"text": "@_user_1 hi"}``, the ``@_user_N`` placeholders resolved to the
names in ``mentions``) and ``post`` messages (rich text: paragraphs of ``text``, ``a``, ``at``,
``code_block`` … elements, sometimes under a locale key) become plain text. Files come as
attachments: an ``image`` message, a ``file``, ``audio`` or ``media`` (video) message, and the
``img`` / ``media`` elements of a ``post``. Feishu serves a file only through the message that
carries it (``…/messages/:message_id/resources/:file_key?type=image|file``), so an attachment's
``file_id`` is ``<file_key>:<message_id>`` (see :func:`resource_of`). Other kinds (stickers, shared
chats, …) arrive as a line saying what was sent.

Out: every message the bot sends is a ``post`` (the same ``msg_type`` throughout, so an update
never changes a message's kind): formatted text as one ``md`` element, which Feishu renders as
Markdown (bold, italics, links, lists, code blocks), plain text (what is streamed) as a ``text``
element.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .._types import (
    Attachment,
    Button,
    ButtonPress,
    InboundMessage,
    PermanentSendError,
    TransientSendError,
)

__all__ = [
    "attachments_of",
    "card_content",
    "chat_key_of",
    "post_content",
    "resource_of",
    "send_error",
    "text_of",
    "to_inbound",
    "to_press",
]

_PLACEHOLDER = re.compile(r"@_user_\d+")
_RATE_LIMITED = {99991400, 11232, 230020}  # request frequency limits (app, chat, message)


def chat_key_of(chat_id: str) -> str:
    """The chat key of a Feishu chat (direct or group)."""
    return f"feishu:chat:{chat_id}"


def post_content(text: str, *, formatted: bool) -> str:
    """The ``content`` of a ``post`` message showing ``text`` (Markdown if ``formatted``)."""
    element = {"tag": "md", "text": text} if formatted else {"tag": "text", "text": text}
    return json.dumps({"zh_cn": {"title": "", "content": [[element]]}}, ensure_ascii=False)


def card_content(text: str, buttons: tuple[Button, ...] = ()) -> str:
    """The ``content`` of an interactive card: ``text`` as Markdown, then ``buttons`` in a row (a
    press comes back as ``card.action.trigger`` with the button's ``value``)."""
    elements: list[dict[str, Any]] = [{"tag": "markdown", "content": text}]
    if buttons:
        elements.append(
            {
                "tag": "action",
                "actions": [
                    {
                        "tag": "button",
                        "text": {"tag": "plain_text", "content": b.label},
                        "type": "danger" if "Deny" in b.label else "primary",
                        "value": {"data": b.data},
                    }
                    for b in buttons
                ],
            }
        )
    return json.dumps({"config": {"update_multi": True}, "elements": elements}, ensure_ascii=False)


def to_press(callback: dict[str, Any]) -> ButtonPress | None:
    """A ``card.action.trigger`` callback (the whole callback) as a :class:`ButtonPress`."""
    event = callback.get("event") or {}
    context = event.get("context") or {}
    value = (event.get("action") or {}).get("value") or {}
    chat_id, data = context.get("open_chat_id"), value.get("data") if isinstance(value, dict) else None
    press_id = (callback.get("header") or {}).get("event_id") or event.get("token")
    open_id = str((event.get("operator") or {}).get("open_id") or "")
    if not chat_id or not isinstance(data, str) or not press_id or not open_id:
        return None
    return ButtonPress(
        channel="feishu",
        chat_key=chat_key_of(str(chat_id)),
        chat_id=str(chat_id),
        press_id=str(press_id),
        sender_id=open_id,
        sender_name=open_id,
        data=data,
        message_id=str(context["open_message_id"]) if context.get("open_message_id") else None,
    )


def _post_text(content: dict[str, Any]) -> str:
    body = content
    if "content" not in body:  # {"zh_cn": {...}}: the first locale given
        body = next((v for v in content.values() if isinstance(v, dict) and "content" in v), {})
    lines: list[str] = []
    title = body.get("title") or ""
    if title:
        lines.append(str(title))
    for paragraph in body.get("content") or []:
        parts: list[str] = []
        for element in paragraph if isinstance(paragraph, list) else []:
            tag = element.get("tag")
            if tag in ("text", "a", "md"):
                parts.append(str(element.get("text", "")))
            elif tag == "at":
                parts.append(f"@{element.get('user_name') or element.get('user_id', '')}")
            elif tag == "code_block":
                parts.append(f"```{element.get('language', '')}\n{element.get('text', '')}\n```")
        lines.append("".join(parts))
    return "\n".join(lines).strip()


def text_of(message_type: str, content: str, names: dict[str, str]) -> str:
    """The text of a message for the model; ``names`` maps ``@_user_N`` placeholders to names."""
    try:
        data = json.loads(content) if content else {}
    except json.JSONDecodeError:
        data = {}
    if message_type == "text":
        text = str(data.get("text", ""))
    elif message_type == "post":
        text = _post_text(data if isinstance(data, dict) else {})
    elif message_type in _FILE_KINDS:
        return ""  # the file itself is an attachment
    else:
        return f"[sent a {message_type} message, which this chat cannot read yet]"
    return _PLACEHOLDER.sub(lambda m: f"@{names.get(m.group(0), 'someone')}", text).strip()


_FILE_KINDS = {"image": "image", "file": "file", "audio": "audio", "media": "video"}
"""Message kinds that carry a file, and what the model is told it is."""


def _post_files(content: dict[str, Any]) -> list[dict[str, Any]]:
    body = content
    if "content" not in body:
        body = next((v for v in content.values() if isinstance(v, dict) and "content" in v), {})
    found = []
    for paragraph in body.get("content") or []:
        for element in paragraph if isinstance(paragraph, list) else []:
            if isinstance(element, dict) and element.get("tag") in ("img", "media"):
                found.append(element)
    return found


def attachments_of(message_type: str, content: str, message_id: str) -> tuple[Attachment, ...]:
    """The files a message carries (not downloaded): an image, file, audio or video message, or the
    images and videos inside a ``post``."""
    try:
        data = json.loads(content) if content else {}
    except json.JSONDecodeError:
        return ()
    if not isinstance(data, dict):
        return ()
    items: list[tuple[str, str, str | None]]
    if message_type == "post":
        items = [
            ("image", str(e.get("image_key") or ""), None)
            if e.get("tag") == "img"
            else ("video", str(e.get("file_key") or ""), None)
            for e in _post_files(data)
        ]
    elif message_type == "image":
        items = [("image", str(data.get("image_key") or ""), None)]
    elif message_type in _FILE_KINDS:
        name = data.get("file_name")
        items = [(_FILE_KINDS[message_type], str(data.get("file_key") or ""), str(name) if name else None)]
    else:
        return ()
    return tuple(Attachment(f"{key}:{message_id}", kind, name) for kind, key, name in items if key)


def resource_of(attachment: Attachment) -> tuple[str, str, str]:
    """``(message_id, file_key, type)`` of an attachment, for ``…/messages/:id/resources/:key``
    (Feishu's ``type`` is ``image`` for images, ``file`` for files, audio and video)."""
    key, _, message_id = attachment.file_id.partition(":")
    return message_id, key, "image" if attachment.kind == "image" else "file"


def to_inbound(event: dict[str, Any], bot_open_id: str) -> InboundMessage | None:
    """An ``im.message.receive_v1`` event's ``event`` object as the pipeline's message."""
    message = event.get("message") or {}
    sender = event.get("sender") or {}
    chat_id, message_id = message.get("chat_id"), message.get("message_id")
    if not chat_id or not message_id:
        return None
    open_id = str((sender.get("sender_id") or {}).get("open_id") or "")
    mentions = message.get("mentions") or []
    names = {str(m.get("key")): str(m.get("name") or "") for m in mentions}
    mentioned = any((m.get("id") or {}).get("open_id") == bot_open_id for m in mentions if bot_open_id)
    kind, content = str(message.get("message_type") or ""), str(message.get("content") or "")
    text = text_of(kind, content, names)
    if mentioned:  # "@ship /new" is the command /new
        for m in mentions:
            if (m.get("id") or {}).get("open_id") == bot_open_id:
                at = f"@{m.get('name') or ''}"
                if text.startswith(at) and text[len(at) :].lstrip().startswith("/"):
                    text = text[len(at) :].lstrip()
    return InboundMessage(
        channel="feishu",
        chat_key=chat_key_of(str(chat_id)),
        chat_id=str(chat_id),
        message_id=str(message_id),
        sender_id=open_id,
        sender_name=str(sender.get("name") or open_id),
        text=text,
        is_group=message.get("chat_type") != "p2p",
        mentions_bot=mentioned,
        sender_is_bot=sender.get("sender_type") not in (None, "user"),
        reply_to=str(message["parent_id"]) if message.get("parent_id") else None,
        attachments=attachments_of(kind, content, str(message_id)),
    )


def send_error(code: int | None, status: int | None, text: str) -> Exception:
    """A failed Open Platform call (its ``code``, the HTTP ``status``) as the pipeline's error."""
    if code in _RATE_LIMITED or status == 429:
        return TransientSendError(text, retry_after=1.0)
    if status is not None and status >= 500:
        return TransientSendError(text)
    return PermanentSendError(text)
