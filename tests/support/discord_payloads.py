"""The JSON shapes Discord sends (users, members, guilds, channels, messages), for the local server.

Only the fields discord.py reads are filled in, with the values a fresh bot in a small server
would see. Kept apart from :mod:`tests.support.discord_server`, which holds the server's behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "APP_ID",
    "BOT_ID",
    "BOT_NAME",
    "TOKEN",
    "USER",
    "BotMessage",
    "application",
    "bot_user",
    "guild_json",
    "member",
    "message_json",
    "partial_channel",
    "user",
]

TOKEN = "MTIzNDU2.discord-test-token.do-not-log"
BOT_ID = 900_000_000_000_000_001
BOT_NAME = "ship"
APP_ID = 900_000_000_000_000_002
USER = 800_000_000_000_000_007
_WHEN = "2026-01-01T00:00:00+00:00"


@dataclass(slots=True)
class BotMessage:
    """A message the bot sent, as Discord shows it now."""

    channel_id: int
    id: int
    content: str
    flags: int = 0
    deleted: bool = False
    versions: list[str] = field(default_factory=list)
    buttons: list[dict[str, Any]] = field(default_factory=list)
    files: list[tuple[str, bytes]] = field(default_factory=list)
    """Files uploaded with the message: (file name, content)."""


def user(user_id: int, name: str, *, bot: bool = False) -> dict[str, Any]:
    found: dict[str, Any] = {
        "id": str(user_id),
        "username": name.lower(),
        "global_name": name,
        "discriminator": "0",
        "avatar": None,
    }
    if bot:
        found["bot"] = True
    return found


def bot_user() -> dict[str, Any]:
    return {**user(BOT_ID, BOT_NAME, bot=True), "global_name": None}


def member(of: dict[str, Any] | None = None) -> dict[str, Any]:
    """A guild member (with ``of`` as its user, as interactions carry it)."""
    found: dict[str, Any] = {"roles": [], "joined_at": _WHEN, "deaf": False, "mute": False, "flags": 0}
    if of is not None:
        found.update(user=of, permissions="0")
    return found


def application() -> dict[str, Any]:
    """``GET /oauth2/applications/@me`` (discord.py asks it at login)."""
    return {
        "id": str(APP_ID),
        "name": BOT_NAME,
        "description": "",
        "icon": None,
        "rpc_origins": [],
        "bot_public": False,
        "bot_require_code_grant": False,
        "owner": user(USER, "Ada"),
        "summary": "",
        "verify_key": "00",
        "flags": 0,
    }


def partial_channel(channel_id: int, guild_id: int | None, thread_parent: int | None) -> dict[str, Any]:
    """The partial channel an interaction carries (its type tells a DM, a channel, a thread)."""
    if guild_id is None:
        return {"id": str(channel_id), "type": 1}
    if thread_parent is not None:
        return {"id": str(channel_id), "type": 11, "guild_id": str(guild_id), "parent_id": str(thread_parent)}
    return {"id": str(channel_id), "type": 0, "guild_id": str(guild_id), "name": "general"}


def guild_json(guild_id: int, channels: list[int], threads: list[int]) -> dict[str, Any]:
    """A GUILD_CREATE: the guild with its text channels and its threads (in the first channel)."""
    metadata = {"archived": False, "auto_archive_duration": 1440, "archive_timestamp": _WHEN, "locked": False}
    return {
        "id": str(guild_id),
        "name": f"guild {guild_id}",
        "unavailable": False,
        "owner_id": str(USER),
        "roles": [],
        "emojis": [],
        "features": [],
        "member_count": 2,
        "members": [],
        "channels": [
            {"id": str(c), "type": 0, "guild_id": str(guild_id), "name": f"general-{n}", "position": n}
            for n, c in enumerate(channels)
        ],
        "threads": [
            {
                "id": str(t),
                "type": 11,
                "guild_id": str(guild_id),
                "parent_id": str(channels[0]),
                "name": "a thread",
                "owner_id": str(USER),
                "thread_metadata": metadata,
                "message_count": 0,
                "member_count": 1,
            }
            for t in threads
        ],
        "presences": [],
        "voice_states": [],
        "stickers": [],
    }


def message_json(
    message_id: int, channel_id: int, author: dict[str, Any], content: str, **extra: Any
) -> dict[str, Any]:
    """A message object (``extra``: more fields, e.g. ``flags``, ``components``, ``guild_id``)."""
    return {
        "id": str(message_id),
        "channel_id": str(channel_id),
        "author": author,
        "content": content,
        "timestamp": _WHEN,
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": [],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "pinned": False,
        "type": 0,
        **extra,
    }
