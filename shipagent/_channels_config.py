"""``channels`` in ship.json: which chat platforms the agent is reachable on, and who may talk to it.

The models follow :mod:`shipagent.config`: camelCase keys, unknown keys rejected with the closest
valid one, ``${VAR}`` expanded before validation (so ``"botToken": "${TELEGRAM_BOT_TOKEN}"`` keeps
the secret out of the file). The token is never part of a ``repr`` and never printed.

Telegram and Slack are here: each has a delivery mode to choose (polling or a webhook, Socket Mode
or the Events API) and, for the push mode, a listener address and a secret to check. Discord, QQ
and Feishu, reached only through a connection the agent opens, are in
:mod:`shipagent._channel_gateways`, and importable from here as before.
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from ._channel_gateways import (
    DEFAULT_DISCORD_API_ROOT,
    DEFAULT_QQ_API_ROOT,
    DEFAULT_QQ_TOKEN_URL,
    FEISHU_DOMAINS,
    SANDBOX_QQ_API_ROOT,
    DiscordConfig,
    DiscordGuildsConfig,
    FeishuConfig,
    FeishuGroupsConfig,
    QQConfig,
    QQGroupsConfig,
)
from ._channel_keys import (
    MB,
    Bytes,
    DebounceMs,
    DmPolicy,
    MentionedGroups,
    PerMinute,
    Streaming,
    http_root,
    parse_listen,
    require,
)
from ._config_base import ConfigModel as _Model

__all__ = [
    "DEFAULT_DISCORD_API_ROOT",
    "DEFAULT_QQ_API_ROOT",
    "DEFAULT_QQ_TOKEN_URL",
    "FEISHU_DOMAINS",
    "SANDBOX_QQ_API_ROOT",
    "ChannelsConfig",
    "DiscordConfig",
    "DiscordGuildsConfig",
    "FeishuConfig",
    "FeishuGroupsConfig",
    "GroupsConfig",
    "QQConfig",
    "QQGroupsConfig",
    "SlackChannelsConfig",
    "SlackConfig",
    "TelegramConfig",
]

DEFAULT_TELEGRAM_API_ROOT = "https://api.telegram.org"
DEFAULT_SLACK_API_ROOT = "https://slack.com/api"
DEFAULT_WEBHOOK_LISTEN = "127.0.0.1:8443"
DEFAULT_SLACK_HTTP_LISTEN = "127.0.0.1:3000"
_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")  # what Telegram accepts as a webhook's secret_token


class GroupsConfig(MentionedGroups[int]):
    """``channels.telegram.groups``: which group chats the bot answers in, and when."""

    # allow: group chat ids (negative numbers for groups and supergroups)

    history_limit: int = Field(default=0, ge=0, le=100)
    """With ``requireMention``: keep the last this many messages that did not address the bot (in
    memory) and give them to the model with the next message that does, then drop them (0: none)."""


class TelegramConfig(_Model):
    """``channels.telegram``: the agent as a Telegram bot."""

    enabled: bool = False
    bot_token: str | None = Field(default=None, repr=False)
    """From @BotFather; write ``"${TELEGRAM_BOT_TOKEN}"`` and keep the token in the environment."""
    api_root: str = DEFAULT_TELEGRAM_API_ROOT
    """The Bot API server: the public one, a Local Bot API Server, or a test server."""
    mode: Literal["polling", "webhook"] = "polling"
    """How updates arrive: ``polling`` (``getUpdates`` long polling; nothing to expose) or
    ``webhook`` (Telegram POSTs each update to ``webhookUrl``; needs a public HTTPS address)."""
    webhook_url: str | None = None
    """Webhook mode: the public ``https://`` URL Telegram posts updates to (its path is the path the
    listener serves; a reverse proxy or tunnel forwards it to ``webhookListen``)."""
    secret_token: str | None = Field(default=None, repr=False)
    """Webhook mode: the secret Telegram sends with every update (``X-Telegram-Bot-Api-Secret-Token``)
    so nobody else can post fake updates; write ``"${TELEGRAM_WEBHOOK_SECRET}"``."""
    webhook_listen: str = DEFAULT_WEBHOOK_LISTEN
    """Webhook mode: where the listener binds, ``host:port`` (loopback by default: put a TLS
    reverse proxy or tunnel in front of it)."""
    dm_policy: DmPolicy = "pairing"
    """Direct messages: ``pairing`` (unknown senders get a one-time code for the owner to approve),
    ``allowlist`` (only ``allowFrom``), ``open`` (anyone)."""
    allow_from: list[int] = Field(default_factory=list)
    """Telegram user ids that may talk to the bot in direct messages without pairing."""
    groups: GroupsConfig = Field(default_factory=GroupsConfig)
    admins: list[int] = Field(default_factory=list)
    """User ids who may answer any approval question (besides the one who started the turn)."""
    debounce_ms: DebounceMs = None
    """Messages of one chat within this many milliseconds of each other are answered as one turn;
    default 1,500 in groups, 0 in direct messages."""
    rate_limit_per_minute: PerMinute = 30
    streaming: Streaming = "edit"
    """``edit``: the answer appears as one message edited as it is written; ``off``: sent when done."""
    show_tool_steps: bool = False
    """Show one short line per tool step (its summary) in the chat while the answer is written."""
    text_chunk_limit: int = Field(default=4000, ge=200, le=4096)
    """A message longer than this is split (Telegram's own limit is 4,096 characters)."""
    max_attachment_bytes: Bytes = 20 * MB
    """Attachments larger than this are refused (the public Bot API serves files up to 20 MB)."""

    @field_validator("api_root")
    @classmethod
    def _root(cls, value: str) -> str:
        return http_root(value, DEFAULT_TELEGRAM_API_ROOT)

    @field_validator("webhook_url")
    @classmethod
    def _webhook_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.fragment:
            raise ValueError("must be an https:// URL without a #fragment (e.g. https://bot.example.com/tg)")
        return value

    @field_validator("secret_token")
    @classmethod
    def _secret(cls, value: str | None) -> str | None:
        if value is not None and not _SECRET.fullmatch(value):  # the value is never echoed
            raise ValueError("must be 1 to 256 characters of A-Z, a-z, 0-9, _ and - (Telegram's rule)")
        return value

    @field_validator("webhook_listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        parse_listen(value)
        return value.strip()

    @property
    def webhook_address(self) -> tuple[str, int]:
        """``webhookListen`` as the host and port the listener binds."""
        return parse_listen(self.webhook_listen)

    @property
    def webhook_path(self) -> str:
        """The path of ``webhookUrl``: what the listener serves (``/`` for a bare host)."""
        return urlsplit(self.webhook_url or "").path or "/"

    @model_validator(mode="after")
    def _token_when_enabled(self) -> TelegramConfig:
        if self.enabled:
            require("telegram", "botToken", self.bot_token, "${TELEGRAM_BOT_TOKEN}")
        return self

    @model_validator(mode="after")
    def _webhook_keys(self) -> TelegramConfig:
        if self.mode == "polling":
            if self.webhook_url is not None:
                raise ValueError(
                    'webhookUrl is set but channels.telegram.mode is "polling": '
                    'set "mode": "webhook" to receive updates there, or remove webhookUrl'
                )
            return self
        if not self.enabled:
            return self
        if self.webhook_url is None:
            raise ValueError(
                'channels.telegram.webhookUrl is required when channels.telegram.mode is "webhook" '
                '(the public https:// URL Telegram posts to, e.g. "https://bot.example.com/tg")'
            )
        if self.secret_token is None or not self.secret_token.strip():
            raise ValueError(
                'channels.telegram.secretToken is required when channels.telegram.mode is "webhook" '
                '(e.g. "secretToken": "${TELEGRAM_WEBHOOK_SECRET}"; 1 to 256 of A-Z a-z 0-9 _ -)'
            )
        if self.api_root == DEFAULT_TELEGRAM_API_ROOT and not self.webhook_url.startswith("https://"):
            raise ValueError(
                "channels.telegram.webhookUrl must be https:// (Telegram posts to HTTPS webhooks only)"
            )
        return self


class SlackChannelsConfig(MentionedGroups[str]):
    """``channels.slack.channels``: which Slack channels (and group DMs) the bot answers in, and when."""

    # allow: channel ids (C0123ABCD; in Slack: the channel's details, at the bottom);
    # requireMention: a mention is @ship, or the message is a !command; disabled: direct messages only


def _slack_token(value: str | None, prefix: str, what: str) -> str | None:
    """``value`` if it looks like a Slack ``prefix`` token (the value itself is never echoed)."""
    if value is not None and value.strip() and not value.strip().startswith(prefix):
        raise ValueError(f"must be {what} (it starts with {prefix!r})")
    return value.strip() if value is not None else None


class SlackConfig(_Model):
    """``channels.slack``: the agent as a Slack app, by Socket Mode (no public URL) or the Events API."""

    enabled: bool = False
    mode: Literal["socket", "http"] = "socket"
    """How events arrive: ``socket`` (Socket Mode: the app opens a WebSocket to Slack with
    ``appToken``; nothing to expose) or ``http`` (the Events API: Slack POSTs each event, click and
    slash command to ``httpPath`` on a public HTTPS URL, signed with ``signingSecret``)."""
    bot_token: str | None = Field(default=None, repr=False)
    """The bot token (``xoxb-…``, OAuth & Permissions); write ``"${SLACK_BOT_TOKEN}"``."""
    app_token: str | None = Field(default=None, repr=False)
    """Socket Mode: the app-level token with ``connections:write`` (``xapp-…``) that opens the
    connection; write ``"${SLACK_APP_TOKEN}"``."""
    signing_secret: str | None = Field(default=None, repr=False)
    """HTTP mode: the app's Signing Secret (Basic Information), which every request from Slack is
    checked against, so nobody else can post fake events; write ``"${SLACK_SIGNING_SECRET}"``."""
    http_listen: str = DEFAULT_SLACK_HTTP_LISTEN
    """HTTP mode: where the listener binds, ``host:port`` (loopback by default: put a TLS reverse
    proxy or tunnel in front of it)."""
    http_path: str = "/slack/events"
    """HTTP mode: the path of the Request URL (events, interactivity and slash commands share it)."""
    api_root: str = DEFAULT_SLACK_API_ROOT
    """The Web API's base URL (a test server can be named here)."""
    dm_policy: DmPolicy = "pairing"
    """Direct messages: ``pairing`` (unknown senders get a one-time code for the owner to approve),
    ``allowlist`` (only ``allowFrom``), ``open`` (anyone in the workspace)."""
    allow_from: list[str] = Field(default_factory=list)
    """Slack user ids (``U0123ABCD``) that may talk to the bot in direct messages without pairing."""
    channels: SlackChannelsConfig = Field(default_factory=SlackChannelsConfig)
    admins: list[str] = Field(default_factory=list)
    """User ids who may answer any approval question (besides the one who started the turn)."""
    debounce_ms: DebounceMs = None
    """Messages of one conversation within this many milliseconds are answered as one turn;
    default 1,500 in channels, 0 in direct messages."""
    rate_limit_per_minute: PerMinute = 30
    streaming: Streaming = "edit"
    """``edit``: the answer appears as one message updated (``chat.update``) as it is written;
    ``off``: sent when done."""
    show_tool_steps: bool = False
    """Show one short line per tool step (its summary) while the answer is written."""
    text_chunk_limit: int = Field(default=3000, ge=200, le=4000)
    """A message longer than this is split. Slack shows up to 4,000 characters of a message's text
    in full (longer ones are cut behind "Show more" or refused); 3,000 also fits one Block Kit
    section, which is what a message with buttons is made of."""
    max_attachment_bytes: Bytes = 20 * MB
    """Files larger than this are refused instead of downloaded."""

    @field_validator("api_root")
    @classmethod
    def _root(cls, value: str) -> str:
        return http_root(value, DEFAULT_SLACK_API_ROOT)

    @field_validator("bot_token")
    @classmethod
    def _bot_token(cls, value: str | None) -> str | None:
        return _slack_token(value, "xoxb-", "a bot token")

    @field_validator("app_token")
    @classmethod
    def _app_token(cls, value: str | None) -> str | None:
        return _slack_token(value, "xapp-", "an app-level token")

    @field_validator("signing_secret")
    @classmethod
    def _signing_secret(cls, value: str | None) -> str | None:
        return value.strip() if value is not None else None  # the value is never echoed

    @field_validator("http_listen")
    @classmethod
    def _http_listen(cls, value: str) -> str:
        parse_listen(value)
        return value.strip()

    @field_validator("http_path")
    @classmethod
    def _http_path(cls, value: str) -> str:
        if not value.startswith("/") or any(c in value for c in "?# "):
            raise ValueError('must be a path starting with "/", without ? or # (e.g. "/slack/events")')
        return value

    @property
    def http_address(self) -> tuple[str, int]:
        """``httpListen`` as the host and port the listener binds."""
        return parse_listen(self.http_listen)

    @model_validator(mode="after")
    def _tokens_when_enabled(self) -> SlackConfig:
        if self.mode == "socket" and self.signing_secret:
            raise ValueError(
                'signingSecret is set but channels.slack.mode is "socket": set "mode": "http" to '
                "receive events over HTTP, or remove signingSecret"
            )
        if self.mode == "http" and self.app_token:
            raise ValueError(
                'appToken is set but channels.slack.mode is "http": the app-level token is for '
                'Socket Mode; remove appToken, or set "mode": "socket" and remove signingSecret'
            )
        if not self.enabled:
            return self
        require("slack", "botToken", self.bot_token, "${SLACK_BOT_TOKEN}")
        if self.mode == "http" and not self.signing_secret:
            raise ValueError(
                'signingSecret is required when channels.slack.mode is "http": every request from '
                'Slack is checked with it (e.g. "signingSecret": "${SLACK_SIGNING_SECRET}")'
            )
        if self.mode == "socket" and not self.app_token:
            raise ValueError(
                "appToken is required when channels.slack.enabled is true: Socket Mode connects with it "
                '(e.g. "appToken": "${SLACK_APP_TOKEN}"; or "mode": "http" with a signingSecret)'
            )
        return self


class ChannelsConfig(_Model):
    """``channels``: the chat platforms the agent answers on (each off unless ``enabled``)."""

    telegram: TelegramConfig = Field(default_factory=TelegramConfig)
    slack: SlackConfig = Field(default_factory=SlackConfig)
    discord: DiscordConfig = Field(default_factory=DiscordConfig)
    feishu: FeishuConfig = Field(default_factory=FeishuConfig)
    qq: QQConfig = Field(default_factory=QQConfig)
