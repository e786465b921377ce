"""The ship.json sections of Discord, QQ and Feishu: the chat platforms reached only through a
connection the agent opens (Discord's and QQ's gateway WebSocket, Feishu's long connection).

Separate from :mod:`shipagent._channels_config` (Telegram, Slack, and the ``channels`` section
that holds them all) because these sections share a shape the other two do not: nothing comes in
unasked, so there is no delivery mode to choose and no listener address or webhook secret to
check, only credentials, an API root a test server can replace, and the keys every platform has
(:mod:`shipagent._channel_keys`). Every name here is importable from
:mod:`shipagent._channels_config` too, where the code that reads a section looks for it.
"""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from ._channel_keys import (
    MB,
    Bytes,
    DebounceMs,
    DmPolicy,
    GroupSection,
    MentionedGroups,
    PerMinute,
    Streaming,
    http_root,
    require,
)
from ._config_base import ConfigModel as _Model

__all__ = [
    "DEFAULT_DISCORD_API_ROOT",
    "DEFAULT_QQ_API_ROOT",
    "DEFAULT_QQ_TOKEN_URL",
    "FEISHU_DOMAINS",
    "SANDBOX_QQ_API_ROOT",
    "DiscordConfig",
    "DiscordGuildsConfig",
    "FeishuConfig",
    "FeishuGroupsConfig",
    "QQConfig",
    "QQGroupsConfig",
]

DEFAULT_DISCORD_API_ROOT = "https://discord.com/api/v10"


class DiscordGuildsConfig(MentionedGroups[int]):
    """``channels.discord.guilds``: which servers (guilds) the bot answers in, and when."""

    # allow: guild (server) ids: in Discord, Settings → Advanced → Developer Mode, "Copy Server ID"


class DiscordConfig(_Model):
    """``channels.discord``: the agent as a Discord bot (gateway in, REST out)."""

    enabled: bool = False
    bot_token: str | None = Field(default=None, repr=False)
    """From the Developer Portal (Bot → Reset Token); write ``"${DISCORD_BOT_TOKEN}"``."""
    api_root: str = DEFAULT_DISCORD_API_ROOT
    """The REST API, versioned (``https://discord.com/api/v10``); a test server can be named."""
    gateway_url: str | None = None
    """The gateway WebSocket (``wss://…``). Unset: Discord's own, or, when ``apiRoot`` names another
    server, the URL that server's ``GET /gateway/bot`` gives."""
    dm_policy: DmPolicy = "pairing"
    """Direct messages: ``pairing`` (unknown senders get a one-time code for the owner to approve),
    ``allowlist`` (only ``allowFrom``), ``open`` (anyone)."""
    allow_from: list[int] = Field(default_factory=list)
    """Discord user ids that may talk to the bot in direct messages without pairing."""
    guilds: DiscordGuildsConfig = Field(default_factory=DiscordGuildsConfig)
    admins: list[int] = Field(default_factory=list)
    """User ids who may answer any approval question (besides the one who started the turn)."""
    debounce_ms: DebounceMs = None
    """Messages of one chat within this many milliseconds of each other are answered as one turn;
    default 1,500 in guild channels, 0 in direct messages."""
    rate_limit_per_minute: PerMinute = 30
    streaming: Streaming = "edit"
    """``edit``: the answer appears as one message edited as it is written; ``off``: sent when done."""
    show_tool_steps: bool = False
    """Show one short line per tool step (its summary) in the chat while the answer is written."""
    text_chunk_limit: int = Field(default=2000, ge=200, le=2000)
    """A message longer than this is split (Discord's own limit is 2,000 characters)."""
    max_attachment_bytes: Bytes = 10 * MB
    """Attachments larger than this are refused (Discord's upload limit without Nitro is 10 MB)."""
    slash_commands: bool = True
    """Register the chat commands as Discord slash commands on start (replacing the application's
    global commands); ``false``: text commands only."""

    @field_validator("api_root")
    @classmethod
    def _root(cls, value: str) -> str:
        return http_root(value, DEFAULT_DISCORD_API_ROOT)

    @field_validator("gateway_url")
    @classmethod
    def _gateway(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("ws://", "wss://")):
            raise ValueError("must be a ws:// or wss:// URL (e.g. wss://gateway.discord.gg)")
        return value

    @model_validator(mode="after")
    def _token_when_enabled(self) -> DiscordConfig:
        if self.enabled:
            require("discord", "botToken", self.bot_token, "${DISCORD_BOT_TOKEN}")
        return self


DEFAULT_QQ_API_ROOT = "https://api.sgroup.qq.com"
SANDBOX_QQ_API_ROOT = "https://sandbox.api.sgroup.qq.com"
DEFAULT_QQ_TOKEN_URL = "https://bots.qq.com/app/getAppAccessToken"


class QQGroupsConfig(GroupSection[str]):
    """``channels.qq.groups``: which QQ groups the bot answers in (QQ delivers only @-messages)."""

    # allow: group openids (group_openid of an event) or guild channel ids

    require_mention: bool = True
    """Accepted so a ship.json moves between platforms, and only as ``true``: QQ delivers to a bot
    only the group and guild channel messages that @-mention it, so every message it sees is
    addressed to it."""

    @field_validator("require_mention")
    @classmethod
    def _mentioned(cls, value: bool) -> bool:
        if not value:
            raise ValueError(
                "cannot be false on QQ: QQ delivers to a bot only the group messages that @-mention "
                "it, so the bot cannot see the others (remove the key or set it to true)"
            )
        return value


class QQConfig(_Model):
    """``channels.qq``: the agent as a QQ bot on the official bot API (gateway in, passive replies out)."""

    enabled: bool = False
    app_id: str | None = None
    """The bot's AppID (QQ Open Platform → the bot → Development → Settings)."""
    client_secret: str | None = Field(default=None, repr=False)
    """The bot's AppSecret; write ``"${QQ_BOT_SECRET}"`` and keep it in the environment."""
    sandbox: bool = False
    """Use QQ's sandbox API host (``sandbox.api.sgroup.qq.com``), where only sandbox groups and
    members configured on the platform reach the bot."""
    api_root: str | None = None
    """The API host; unset: QQ's own (or its sandbox with ``sandbox``). A test server can be named."""
    token_url: str = DEFAULT_QQ_TOKEN_URL
    """Where the access token is asked for (AppID and AppSecret in, ``access_token`` out)."""
    dm_policy: DmPolicy = "pairing"
    """Direct (C2C) messages: ``pairing`` (unknown senders get a one-time code for the owner to
    approve), ``allowlist`` (only ``allowFrom``), ``open`` (anyone)."""
    allow_from: list[str] = Field(default_factory=list)
    """User openids (``user_openid``) that may talk to the bot directly without pairing."""
    groups: QQGroupsConfig = Field(default_factory=QQGroupsConfig)
    admins: list[str] = Field(default_factory=list)
    """Openids who may answer an approval question besides the asker (QQ shows no buttons, so a
    command in ``ask`` mode is refused there; kept so a ship.json moves between platforms)."""
    debounce_ms: DebounceMs = None
    """Messages of one chat within this many milliseconds of each other are answered as one turn;
    default 1,500 in groups, 0 in direct messages."""
    rate_limit_per_minute: PerMinute = 30
    streaming: Streaming = "edit"
    """Accepted so a ship.json moves between platforms; either value does the same on QQ: QQ cannot
    edit a message, so the answer is always sent when it is done, as one set of replies."""
    show_tool_steps: bool = False
    """Accepted so a ship.json moves between platforms, and only as ``false``: tool steps are shown
    by editing one message, which QQ cannot do, and every line would be one of the five replies QQ
    allows to a message."""
    text_chunk_limit: int = Field(default=2000, ge=200, le=4000)
    """A reply longer than this is split into several passive replies (at most five per message:
    a longer answer is cut, and its last reply says so)."""
    max_attachment_bytes: Bytes = 20 * MB
    """Attachments larger than this are refused."""

    @property
    def api_base(self) -> str:
        """The API host requests go to: ``apiRoot``, else QQ's (sandbox) host."""
        if self.api_root is not None:
            return self.api_root
        return SANDBOX_QQ_API_ROOT if self.sandbox else DEFAULT_QQ_API_ROOT

    @field_validator("api_root", "token_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return None if value is None else http_root(value, DEFAULT_QQ_API_ROOT)

    @field_validator("show_tool_steps")
    @classmethod
    def _no_steps(cls, value: bool) -> bool:
        if value:
            raise ValueError(
                "cannot be true on QQ: tool steps are shown by editing one message, which QQ cannot "
                "do, and each line would use up one of the 5 replies QQ allows to a message "
                "(remove the key or set it to false)"
            )
        return value

    @model_validator(mode="after")
    def _credentials_when_enabled(self) -> QQConfig:
        if self.enabled:
            require("qq", "appId", self.app_id, "102012345")
            require("qq", "clientSecret", self.client_secret, "${QQ_BOT_SECRET}")
        return self


FEISHU_DOMAINS = {"feishu": "https://open.feishu.cn", "lark": "https://open.larksuite.com"}


class FeishuGroupsConfig(MentionedGroups[str]):
    """``channels.feishu.groups``: which group chats the bot answers in, and when."""

    # allow: group chat ids (oc_…; in Feishu: the group's settings, or the event's chat_id);
    # requireMention: an @mention of the bot, or a command


class FeishuConfig(_Model):
    """``channels.feishu``: the agent as a Feishu / Lark app bot (long connection in, REST out)."""

    enabled: bool = False
    app_id: str | None = None
    """The app's App ID (``cli_…``; Developer Console → the app → Credentials & Basic Info)."""
    app_secret: str | None = Field(default=None, repr=False)
    """The app's App Secret; write ``"${FEISHU_APP_SECRET}"`` and keep it in the environment."""
    domain: str = "feishu"
    """``feishu`` (open.feishu.cn), ``lark`` (open.larksuite.com), or a URL (a test server)."""
    dm_policy: DmPolicy = "pairing"
    """Direct messages: ``pairing`` (unknown senders get a one-time code for the owner to approve),
    ``allowlist`` (only ``allowFrom``), ``open`` (anyone who can find the bot)."""
    allow_from: list[str] = Field(default_factory=list)
    """Users' ``open_id`` (``ou_…``) that may talk to the bot in direct messages without pairing."""
    groups: FeishuGroupsConfig = Field(default_factory=FeishuGroupsConfig)
    admins: list[str] = Field(default_factory=list)
    """``open_id`` of users who may answer any approval question (besides the one who asked)."""
    debounce_ms: DebounceMs = None
    """Messages of one chat within this many milliseconds of each other are answered as one turn;
    default 1,500 in groups, 0 in direct messages."""
    rate_limit_per_minute: PerMinute = 30
    streaming: Streaming = "edit"
    """``edit``: the answer appears as one message edited as it is written (Feishu allows 20 edits
    of a message: later streamed text waits for the final edit); ``off``: sent when done."""
    show_tool_steps: bool = False
    """Show one short line per tool step (its summary) in the chat while the answer is written."""
    text_chunk_limit: int = Field(default=4000, ge=200, le=8000)
    """A message longer than this is split. Answers are rich-text (``post``) messages, which Feishu
    takes up to 30 KB: 8,000 Chinese characters (3 bytes each, escaped twice as JSON in JSON) stay
    below it."""
    max_attachment_bytes: Bytes = 20 * MB
    """Attachments larger than this are refused."""

    @field_validator("domain")
    @classmethod
    def _domain(cls, value: str) -> str:
        if value in FEISHU_DOMAINS:
            return value
        if not value.startswith(("http://", "https://")):
            raise ValueError('must be "feishu", "lark", or an http(s):// URL (e.g. "https://open.feishu.cn")')
        return value.rstrip("/")

    @property
    def base_url(self) -> str:
        """The Open Platform's root URL that ``domain`` names."""
        return FEISHU_DOMAINS.get(self.domain, self.domain)

    @model_validator(mode="after")
    def _credentials_when_enabled(self) -> FeishuConfig:
        if self.enabled:
            require("feishu", "appId", self.app_id, "cli_a1b2c3")
            require("feishu", "appSecret", self.app_secret, "${FEISHU_APP_SECRET}")
        return self
