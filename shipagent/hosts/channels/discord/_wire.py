"""Discord's wire details: a gateway message as an :class:`InboundMessage`, its errors as the pipeline's.

Chat keys: ``discord:dm:<channel>`` for a direct message, ``discord:<guild>:<channel>`` for a guild
text channel, and ``discord:<guild>:<channel>:thread:<thread>`` for a thread, so every thread is
its own conversation and its replies go back into the thread. ``InboundMessage.chat_id`` is the
channel (the thread's parent for a thread) and ``thread_id`` the thread: a reply goes to the thread
if there is one, else to the channel.

Markdown: Discord renders the model's Markdown itself (bold, italics, underline, strikethrough,
inline code, fenced code with a language, quotes, lists, ``#``/``##``/``###`` headings, masked links,
spoilers), so :func:`discord_markdown` only rewrites the few things it does not: deeper headings
become bold lines, images become links, horizontal rules go. It never makes a text longer, so a
piece split to the limit stays within it.
"""

from __future__ import annotations

import asyncio
import re

import aiohttp
import discord

from .._types import Attachment, ButtonPress, InboundMessage, PermanentSendError, TransientSendError

__all__ = [
    "chat_key_of",
    "discord_markdown",
    "guild_of",
    "place_of",
    "send_error",
    "to_inbound",
    "to_press",
]

_HANDLED = (discord.MessageType.default, discord.MessageType.reply)
_DEEP_HEADING = re.compile(r"^#{4,6}[ \t]+(.+?)[ \t#]*$")
_IMAGE = re.compile(r"!\[([^\]\n]*)\]\(")
_RULE = re.compile(r"^[ \t]*([-*_])(?:[ \t]*\1){2,}[ \t]*$")


def chat_key_of(guild_id: int | None, channel_id: int, thread_id: int | None = None) -> str:
    """The chat key of a Discord DM channel, guild channel or thread."""
    if guild_id is None:
        return f"discord:dm:{channel_id}"
    key = f"discord:{guild_id}:{channel_id}"
    return f"{key}:thread:{thread_id}" if thread_id is not None else key


def discord_markdown(text: str) -> str:
    """The model's Markdown as Discord renders it (code blocks untouched; never longer)."""
    out: list[str] = []
    fenced = False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append(line)
            continue
        if fenced:
            out.append(line)
            continue
        if (heading := _DEEP_HEADING.match(line)) is not None:
            line = f"**{heading.group(1)}**"
        elif _RULE.match(line):
            line = ""
        out.append(_IMAGE.sub(r"[\1](", line))
    return "\n".join(out)


def place_of(channel: object, guild_id: int | None, channel_id: int) -> tuple[int, int | None]:
    """(channel, thread): the parent channel and the thread when ``channel`` is a thread."""
    if isinstance(channel, discord.Thread) and guild_id is not None:
        return channel.parent_id, channel.id
    return channel_id, None


def guild_of(message: discord.Message) -> int | None:
    """The guild a message was posted in (``None``: a direct message), cached or not."""
    if isinstance(message.channel, discord.DMChannel):
        return None
    if message.guild is not None:
        return message.guild.id
    guild_id = getattr(message.channel, "guild_id", None)  # a guild channel not in the cache
    return guild_id if isinstance(guild_id, int) else None


def _kind(content_type: str | None) -> str:
    kind = (content_type or "").split("/")[0]
    return {"image": "photo", "audio": "audio", "video": "video"}.get(kind, "document")


def file_id_of(attachment: discord.Attachment, message: discord.Message) -> str:
    """An attachment's id for the pipeline: path-safe, the attachment's own id first (unique), then
    where it was posted (so it can be fetched again after a restart: CDN URLs expire)."""
    return f"{attachment.id}-{message.channel.id}-{message.id}"


def _mentions(message: discord.Message, bot_id: int) -> bool:
    if any(user.id == bot_id for user in message.mentions):
        return True
    replied = message.reference.resolved if message.reference is not None else None
    return isinstance(replied, discord.Message) and replied.author.id == bot_id


def _text(message: discord.Message, bot_id: int) -> str:
    """The text for the model (mentions as names); a command after a leading @bot stays a command."""
    raw = message.content
    for form in (f"<@{bot_id}>", f"<@!{bot_id}>"):
        if raw.startswith(form) and raw[len(form) :].lstrip().startswith("/"):
            return raw[len(form) :].lstrip()
    return message.clean_content


def to_inbound(message: discord.Message, bot_id: int) -> InboundMessage | None:
    """The message as the pipeline's, or ``None`` for what it does not handle (system messages)."""
    if message.type not in _HANDLED:
        return None
    guild_id = guild_of(message)
    channel_id, thread_id = place_of(message.channel, guild_id, message.channel.id)
    author = message.author
    return InboundMessage(
        channel="discord",
        chat_key=chat_key_of(guild_id, channel_id, thread_id),
        chat_id=str(channel_id),
        message_id=str(message.id),
        sender_id=str(author.id),
        sender_name=author.display_name,
        text=_text(message, bot_id),
        is_group=guild_id is not None,
        mentions_bot=_mentions(message, bot_id),
        sender_is_bot=author.bot,
        thread_id=str(thread_id) if thread_id is not None else None,
        reply_to=str(message.reference.message_id)
        if message.reference is not None and message.reference.message_id is not None
        else None,
        attachments=tuple(
            Attachment(file_id_of(a, message), _kind(a.content_type), a.filename, a.size, a.content_type)
            for a in message.attachments
        ),
    )


def to_press(interaction: discord.Interaction) -> ButtonPress | None:
    """A pressed button (a component interaction) as a :class:`ButtonPress`, if it has a channel."""
    if interaction.type is not discord.InteractionType.component or interaction.channel_id is None:
        return None
    custom_id = dict(interaction.data or {}).get("custom_id")
    if not isinstance(custom_id, str):
        return None
    channel_id, thread_id = place_of(interaction.channel, interaction.guild_id, interaction.channel_id)
    return ButtonPress(
        channel="discord",
        chat_key=chat_key_of(interaction.guild_id, channel_id, thread_id),
        chat_id=str(channel_id),
        press_id=str(interaction.id),
        sender_id=str(interaction.user.id),
        sender_name=interaction.user.display_name,
        data=custom_id,
        message_id=str(interaction.message.id) if interaction.message is not None else None,
    )


def send_error(exc: BaseException, clean: str) -> Exception:
    """discord.py's (or aiohttp's) error as the pipeline's; ``clean`` is the token to keep out.

    Rate limits never arrive here: discord.py waits them out itself. Discord never rejects
    Markdown, so there is no :class:`MarkupRejected`.
    """
    text = f"{type(exc).__name__}: {exc}".replace(clean, "[token]") if clean else str(exc)
    if isinstance(exc, discord.DiscordServerError | aiohttp.ClientError | asyncio.TimeoutError | OSError):
        return TransientSendError(text)
    return PermanentSendError(text)
