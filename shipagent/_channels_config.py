"""``channels`` in ship.json: which chat platforms the agent is reachable on, and who may talk to it.

The models follow :mod:`shipagent.config`: camelCase keys, unknown keys rejected with the closest
valid one, ``${VAR}`` expanded before validation (so ``"botToken": "${TELEGRAM_BOT_TOKEN}"`` keeps
the secret out of the file). The token is never part of a ``repr`` and never printed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic.alias_generators import to_camel

from ._strict import strict_scalar

__all__ = ["ChannelsConfig", "GroupsConfig", "TelegramConfig"]

DEFAULT_TELEGRAM_API_ROOT = "https://api.telegram.org"


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", allow_inf_nan=False
    )

    @field_validator("*", mode="before")
    @classmethod
    def _strict_scalars(cls, value: Any, info: ValidationInfo) -> Any:
        """Same scalar rules as the rest of ship.json (see :mod:`shipagent._strict`)."""
        field = cls.model_fields.get(info.field_name or "")
        return value if field is None else strict_scalar(field.annotation, value)


class GroupsConfig(_Model):
    """``channels.telegram.groups``: which group chats the bot answers in, and when."""

    policy: Literal["allowlist", "open", "disabled"] = "allowlist"
    """``allowlist``: only the chats in ``allow``; ``open``: any group; ``disabled``: no group."""
    allow: list[int] = Field(default_factory=list)
    """Group chat ids (negative numbers for groups and supergroups)."""
    require_mention: bool = True
    """Answer only messages that mention the bot, reply to it, or are a command."""


class TelegramConfig(_Model):
    """``channels.telegram``: the agent as a Telegram bot."""

    enabled: bool = False
    bot_token: str | None = Field(default=None, repr=False)
    """From @BotFather; write ``"${TELEGRAM_BOT_TOKEN}"`` and keep the token in the environment."""
    api_root: str = DEFAULT_TELEGRAM_API_ROOT
    """The Bot API server: the public one, a Local Bot API Server, or a test server."""
    mode: Literal["polling"] = "polling"
    """How updates arrive: ``getUpdates`` long polling (the only mode so far)."""
    dm_policy: Literal["pairing", "allowlist", "open"] = "pairing"
    """Direct messages: ``pairing`` (unknown senders get a one-time code for the owner to approve),
    ``allowlist`` (only ``allowFrom``), ``open`` (anyone)."""
    allow_from: list[int] = Field(default_factory=list)
    """Telegram user ids that may talk to the bot in direct messages without pairing."""
    groups: GroupsConfig = Field(default_factory=GroupsConfig)
    admins: list[int] = Field(default_factory=list)
    """User ids who may answer any approval question (besides the one who started the turn)."""
    debounce_ms: int | None = Field(default=None, ge=0, le=60_000)
    """Messages of one chat within this many milliseconds of each other are answered as one turn;
    default 1,500 in groups, 0 in direct messages."""
    rate_limit_per_minute: int = Field(default=30, ge=0)
    """Messages one sender may send per minute; more are ignored, with one notice (0: no limit)."""
    streaming: Literal["edit", "off"] = "edit"
    """``edit``: the answer appears as one message edited as it is written; ``off``: sent when done."""
    show_tool_steps: bool = False
    """Show one short line per tool step (its summary) in the chat while the answer is written."""
    text_chunk_limit: int = Field(default=4000, ge=200, le=4096)
    """A message longer than this is split (Telegram's own limit is 4,096 characters)."""
    max_attachment_bytes: int = Field(default=20 * 1024 * 1024, ge=0)
    """Attachments larger than this are refused (the public Bot API serves files up to 20 MB)."""

    @field_validator("api_root")
    @classmethod
    def _root(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _token_when_enabled(self) -> TelegramConfig:
        if self.enabled and not (self.bot_token and self.bot_token.strip()):
            raise ValueError(
                "botToken is required when channels.telegram.enabled is true "
                '(e.g. "botToken": "${TELEGRAM_BOT_TOKEN}")'
            )
        return self


class ChannelsConfig(_Model):
    """``channels``: the chat platforms the agent answers on (each off unless ``enabled``)."""

    telegram: TelegramConfig = Field(default_factory=TelegramConfig)
