"""What the ship.json sections of the chat platforms share (``channels.<platform>``): the types of
the keys every platform has, the group section, and the checks of a URL or a listen address.

The keys every platform's section has are typed here once (their choices and bounds), and the
group sections derive from one base. A platform's own section stays one flat class rather than a
subclass of a shared one: pydantic puts a base class's keys first, which would reorder the keys in
the reference docs and in the "valid keys" an unknown-key error lists (``enabled``, then the
credentials, then access and answering, is the order a reader wants).
"""

from __future__ import annotations

from typing import Annotated, Generic, Literal, TypeVar

from pydantic import Field

from ._config_base import ConfigModel

__all__ = [
    "MB",
    "Bytes",
    "DebounceMs",
    "DmPolicy",
    "GroupSection",
    "Id",
    "MentionedGroups",
    "PerMinute",
    "Streaming",
    "group_section_hint",
    "http_root",
    "parse_listen",
    "require",
]


def parse_listen(text: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:8443`` for IPv6) as its parts; ``ValueError`` saying what is wrong."""
    host, sep, port = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError('must be "host:port" with a port from 1 to 65535 (e.g. "127.0.0.1:8443")')
    return host, int(port)


def http_root(value: str, example: str) -> str:
    """``value`` without a trailing slash, if it is an http(s) URL (an API root a test may point at);
    ``example`` (the platform's own root) is named in the error."""
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"must be an http:// or https:// URL (e.g. {example})")
    return value.rstrip("/")


def require(platform: str, key: str, value: str | None, example: str) -> None:
    """An enabled channel's credential ``key`` is set (not blank), or a ``ValueError`` naming it
    with an example value (a ``${VAR}`` keeps a secret out of ship.json)."""
    if not (value and value.strip()):
        raise ValueError(
            f'{key} is required when channels.{platform}.enabled is true (e.g. "{key}": "{example}")'
        )


GROUP_SECTIONS: dict[str, tuple[str, str]] = {
    "telegram": ("Telegram", "groups"),
    "slack": ("Slack", "channels"),
    "discord": ("Discord", "guilds"),
    "feishu": ("Feishu", "groups"),
    "qq": ("QQ", "groups"),
}
"""Each platform's name and what its section calls the group chats it answers in: the one key a
ship.json moved from one platform to another must rename."""


def group_section_hint(loc: tuple[int | str, ...]) -> str | None:
    """For an unknown key ``channels.<platform>.groups`` / ``.channels`` / ``.guilds`` (another
    platform's name for the group section, as when a ship.json is moved between platforms), what
    this platform calls it; ``None`` for any other key."""
    if len(loc) != 3 or loc[0] != "channels" or loc[2] not in ("groups", "channels", "guilds"):
        return None
    platform = GROUP_SECTIONS.get(str(loc[1]))
    if platform is None or platform[1] == loc[2]:
        return None
    name, section = platform
    return f"{name} calls this section '{section}': channels.{loc[1]}.{section}"


DmPolicy = Literal["pairing", "allowlist", "open"]
"""``dmPolicy``: ``pairing`` (unknown senders get a one-time code for the owner to approve),
``allowlist`` (only ``allowFrom``), ``open`` (anyone)."""
Streaming = Literal["edit", "off"]
"""``streaming``: ``edit`` (the answer is one message edited as it is written) or ``off``."""
DebounceMs = Annotated[int | None, Field(ge=0, le=60_000)]
"""``debounceMs``: messages of one chat this close together are one turn (unset: the default)."""
PerMinute = Annotated[int, Field(ge=0)]
"""``rateLimitPerMinute``: messages one sender may send per minute; more are ignored, with one
notice (0: no limit)."""
Bytes = Annotated[int, Field(ge=0)]
"""``maxAttachmentBytes``: a size in bytes."""
MB = 1024 * 1024

Id = TypeVar("Id", int, str)
"""A platform's ids: numbers on Telegram and Discord, text on Slack, Feishu and QQ."""


class GroupSection(ConfigModel, Generic[Id]):
    """A platform's group section: which group chats the bot answers in (its keys come first)."""

    policy: Literal["allowlist", "open", "disabled"] = "allowlist"
    """``allowlist``: only the chats in ``allow``; ``open``: any (the bot is in); ``disabled``: none."""
    allow: list[Id] = Field(default_factory=list)
    """The ids of the group chats (or what the platform's section names) the bot answers in."""


class MentionedGroups(GroupSection[Id], Generic[Id]):
    """A group section where the bot can also hear messages not addressed to it."""

    require_mention: bool = True
    """Answer only messages that mention the bot (or reply to it), or are a command."""
