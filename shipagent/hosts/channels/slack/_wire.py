"""Slack's wire details: an event as an :class:`InboundMessage`, a button click as a
:class:`ButtonPress`, slack-sdk's errors as the pipeline's, a question as Block Kit.

Chat keys: ``slack:<team>:<channel>`` for a channel, a group DM or a DM; a message inside a
thread belongs to ``slack:<team>:<channel>:thread:<thread ts>``, so every thread is its own
conversation and its replies go back into the thread.

A message's identity is its channel and its ``ts`` (Slack's message timestamp). That is the dedupe
key rather than the event id: when the bot is subscribed to both ``app_mention`` and
``message.channels``, Slack sends one message as two events with two event ids but one ``ts``, and
an envelope replayed after a reconnect carries the same ``ts`` again.
"""

from __future__ import annotations

import re
from typing import Any

from slack_sdk.errors import SlackApiError

from .._commands import parse_command
from .._types import (
    Attachment,
    Button,
    ButtonPress,
    InboundMessage,
    MarkupRejected,
    PermanentSendError,
    TransientSendError,
)

__all__ = [
    "approval_blocks",
    "chat_key_of",
    "clean_text",
    "is_conversation",
    "mentions",
    "send_error",
    "slash_to_inbound",
    "thread_of",
    "to_inbound",
    "to_press",
]

_SUBTYPES = {None, "file_share", "thread_broadcast"}
"""Message subtypes that are someone writing (edits, deletions, joins and bots' posts are not)."""
_TRANSIENT = {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
_SECTION_LIMIT = 3000  # Block Kit: a section's text is at most 3,000 characters


def chat_key_of(team: str, channel: str, thread_ts: str | None) -> str:
    """The chat key of a Slack conversation (and thread)."""
    key = f"slack:{team}:{channel}"
    return f"{key}:thread:{thread_ts}" if thread_ts else key


def thread_of(chat_key: str) -> str | None:
    """The thread ``ts`` a chat key names, if any."""
    return chat_key.partition(":thread:")[2] or None


def mentions(text: str, bot_user: str) -> bool:
    """Whether ``text`` mentions the bot user (``<@U123>`` or ``<@U123|name>``)."""
    return bool(bot_user) and re.search(rf"<@{re.escape(bot_user)}(\|[^>]*)?>", text) is not None


def clean_text(text: str, bot_user: str, bot_name: str) -> str:
    """What the model and the command parser read: Slack's markup of a user's text undone.

    The bot's own leading mention goes (``@ship summarise this`` is ``summarise this``); other
    mentions of it read ``@name``; links read as their text; ``&amp;``, ``&lt;``, ``&gt;`` are
    unescaped. A leading ``!command`` becomes ``/command``: Slack's client takes a leading ``/``
    for one of its own slash commands, so ``!new``, ``!status``, ``!stop``… are how people type them.
    """
    if bot_user:
        own = rf"<@{re.escape(bot_user)}(?:\|[^>]*)?>"
        text = re.sub(rf"^\s*{own}[:,]?\s*", "", text)
        text = re.sub(own, f"@{bot_name}", text)
    text = re.sub(r"<((?:https?|mailto):[^|>]+)\|([^>]+)>", r"\2 (\1)", text)
    text = re.sub(r"<((?:https?|mailto):[^>]+)>", r"\1", text)
    text = re.sub(r"<[@#]([A-Z0-9]+)(?:\|([^>]*))?>", lambda m: f"@{m.group(2) or m.group(1)}", text)
    text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    if text.startswith("!") and parse_command("/" + text[1:], None) is not None:
        text = "/" + text[1:]
    return text


def _kind(mime: str) -> str:
    if mime.startswith("image/"):
        return "photo"
    if mime.startswith("audio/"):
        return "audio"
    return "document"


def _attachments(event: dict[str, Any]) -> tuple[Attachment, ...]:
    found = []
    for item in event.get("files") or ():
        if (
            not isinstance(item, dict)
            or not item.get("id")
            or item.get("mode") in ("tombstone", "hidden_by_limit")
        ):
            continue
        mime = str(item.get("mimetype") or "application/octet-stream")
        size = item.get("size")
        found.append(
            Attachment(
                str(item["id"]),
                _kind(mime),
                item.get("name") or None,
                int(size) if isinstance(size, int) else None,
                mime,
            )
        )
    return tuple(found)


def is_conversation(event: dict[str, Any], bot_user: str) -> bool:
    """Whether ``event`` is someone (not this bot) writing a message the pipeline should see."""
    if event.get("type") not in ("message", "app_mention"):
        return False
    if event.get("subtype") not in _SUBTYPES:
        return False  # edits, deletions, joins, other bots' posts (bot_message)
    user = event.get("user")
    return bool(user) and user != bot_user and bool(event.get("channel")) and bool(event.get("ts"))


def to_inbound(
    event: dict[str, Any], *, team: str, bot_user: str, bot_name: str, sender_name: str
) -> InboundMessage:
    """A message event (``message`` or ``app_mention``; see :func:`is_conversation`) for the pipeline."""
    channel = str(event["channel"])
    ts = str(event["ts"])
    kind = event.get("channel_type") or {"D": "im", "G": "group"}.get(channel[:1], "channel")
    thread = event.get("thread_ts")
    thread = str(thread) if thread and thread != ts else None
    raw = str(event.get("text") or "")
    return InboundMessage(
        channel="slack",
        chat_key=chat_key_of(team, channel, thread),
        chat_id=channel,
        message_id=ts,
        sender_id=str(event["user"]),
        sender_name=sender_name,
        text=clean_text(raw, bot_user, bot_name),
        is_group=kind != "im",
        mentions_bot=event.get("type") == "app_mention"
        or mentions(raw, bot_user)
        or (thread is not None and event.get("parent_user_id") == bot_user),  # a reply to the bot
        sender_is_bot=bool(event.get("bot_id")),
        thread_id=thread,
        attachments=_attachments(event),
    )


def slash_to_inbound(payload: dict[str, Any], team: str) -> InboundMessage | None:
    """A slash command of the app (``/ship new``, ``/ship what is up?``) as a message to the bot.

    The command's first word, if it is one of the chat commands, is that command (``/ship new`` is
    ``/new``); anything else is a message. A slash command addresses the bot, so it counts as a
    mention. Its ``trigger_id`` identifies it (Slack gives it no message ``ts``).
    """
    channel, user, trigger = payload.get("channel_id"), payload.get("user_id"), payload.get("trigger_id")
    if not channel or not user or not trigger:
        return None
    text = str(payload.get("text") or "").strip()
    if parse_command("/" + text, None) is not None:
        text = "/" + text
    return InboundMessage(
        channel="slack",
        chat_key=chat_key_of(str(payload.get("team_id") or team), str(channel), None),
        chat_id=str(channel),
        message_id=f"slash:{trigger}",
        sender_id=str(user),
        sender_name=str(payload.get("user_name") or user),
        text=text,
        is_group=not str(channel).startswith("D"),
        mentions_bot=True,
    )


def to_press(payload: dict[str, Any], team: str) -> ButtonPress | None:
    """A ``block_actions`` payload (a clicked button) as a :class:`ButtonPress`, if it has a message."""
    actions = payload.get("actions") or []
    message = payload.get("message") or {}
    container = payload.get("container") or {}
    channel = (payload.get("channel") or {}).get("id") or container.get("channel_id")
    user = payload.get("user") or {}
    if payload.get("type") != "block_actions" or not actions or not channel or not user.get("id"):
        return None
    action = actions[0]
    ts = message.get("ts") or container.get("message_ts")
    thread = message.get("thread_ts") or container.get("thread_ts")
    thread = thread if thread and thread != ts else None
    return ButtonPress(
        channel="slack",
        chat_key=chat_key_of((payload.get("team") or {}).get("id") or team, channel, thread),
        chat_id=channel,
        press_id=str(action.get("action_ts") or payload.get("trigger_id") or ""),
        sender_id=str(user["id"]),
        sender_name=str(user.get("name") or user.get("username") or user["id"]),
        data=str(action.get("value") or ""),
        message_id=str(ts) if ts else None,
    )


def approval_blocks(body: str, buttons: tuple[Button, ...]) -> list[dict[str, Any]]:
    """A message with ``buttons`` as Block Kit: the text in a section, the buttons in an actions block."""
    elements = [
        {
            "type": "button",
            "action_id": f"shipagent-{n}",
            "text": {"type": "plain_text", "text": b.label[:75], "emoji": True},
            "value": b.data,
            **({"style": "primary"} if n == 0 else {}),
        }
        for n, b in enumerate(buttons)
    ]
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": body[:_SECTION_LIMIT]}},
        {"type": "actions", "block_id": "shipagent-buttons", "elements": elements},
    ]


def send_error(exc: Exception, clean: Any) -> Exception:
    """slack-sdk's (or aiohttp's) error as the pipeline's; ``clean`` removes the tokens from a text."""
    if not isinstance(exc, SlackApiError):
        return TransientSendError(clean(f"{type(exc).__name__}: {exc}"))  # network, timeout
    response = exc.response
    error = str(response.get("error") or "") if isinstance(response.data, dict) else ""
    text = clean(f"Slack said {error or response.status_code}")
    if response.status_code == 429 or error == "ratelimited":
        retry = response.headers.get("Retry-After") or response.headers.get("retry-after")
        return TransientSendError(text, float(retry) if retry and str(retry).isdigit() else 1.0)
    if response.status_code >= 500 or error in _TRANSIENT:
        return TransientSendError(text)
    if error in ("invalid_blocks", "invalid_blocks_format"):
        return MarkupRejected(text)
    return PermanentSendError(text)
