"""Slack's send side: the pipeline's ``Outbound`` on one slack-sdk ``AsyncWebClient``, for the
channel and for workers.

The Web API is stateless HTTP: answering needs the bot token and the channel id, not the Socket
Mode connection that received the message. So the same :class:`SlackOutbound` serves two owners:

* the :class:`~shipagent.hosts.channels.slack.SlackChannel`, which receives by Socket Mode and
  answers through its own client;
* :class:`SlackSender`, what a durable worker opens from ship.json ``channels.slack`` (the bot
  token from its own environment) to answer a chat another process receives. Buttons (their
  clicks come back over the receiving socket), downloads and click answers are refused there.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import aiohttp
import anyio
from slack_sdk.web.async_client import AsyncWebClient

from ...._channels_config import SlackConfig
from .._types import (
    Attachment,
    Button,
    ButtonPress,
    Capabilities,
    InboundMessage,
    PermanentSendError,
    SentMessage,
)
from ._mrkdwn import escape, markdown_to_mrkdwn
from ._wire import approval_blocks, send_error, thread_of

if TYPE_CHECKING:
    from ....tools.execution import OutgoingFile

__all__ = ["SlackOutbound", "SlackSender", "token_cleaner"]

_TRUSTED_FILE_HOSTS = ("slack.com", "slack-edge.com")


def token_cleaner(*tokens: str | None) -> Callable[[str], str]:
    """A function that replaces every one of ``tokens`` in a text (an error message) by ``<token>``."""
    kept = tuple(t for t in tokens if t)

    def clean(text: str) -> str:
        for token in kept:
            text = text.replace(token, "<token>")
        return text

    return clean


class SlackOutbound:
    """Sends, edits and uploads into Slack conversations through ``web()`` (the pipeline's ``Outbound``).

    Args:
        web: the Web API client with the bot token, asked at every call (the channel makes its own
            at start).
        config: ``channels.slack`` (the bot token for downloads, ``apiRoot``, ``maxAttachmentBytes``).
        clean: removes the tokens from a text (an error message) before it is raised.
        http: the HTTP session file downloads go through (only the receiving process has one).
        receives: whether this process also receives the conversation's events: only then can it
            show buttons (their clicks come back to it), download files and answer clicks.
    """

    def __init__(
        self,
        web: Callable[[], AsyncWebClient],
        config: SlackConfig,
        clean: Callable[[str], str],
        *,
        http: Callable[[], aiohttp.ClientSession | None] = lambda: None,
        receives: bool,
    ) -> None:
        self._web = web
        self._config = config
        self._clean = clean
        self._http = http
        self._receives = receives
        self.capabilities = Capabilities(send_text=True, edit=True, send_file=True, buttons=receives)

    async def _call(self, operation: Any) -> Any:
        try:
            return await operation
        except Exception as exc:
            raise send_error(exc, self._clean) from None

    def _receiving_only(self, what: str) -> None:
        if not self._receives:
            raise PermanentSendError(f"{what} belong to the process that receives the chat's messages")

    @staticmethod
    def _where(chat: InboundMessage) -> dict[str, Any]:
        where: dict[str, Any] = {"channel": chat.chat_id}
        if chat.thread_id is not None:
            where["thread_ts"] = chat.thread_id
        return where

    async def send(
        self, chat: InboundMessage, text: str, *, formatted: bool, buttons: tuple[Button, ...] = ()
    ) -> SentMessage:
        if buttons:
            self._receiving_only("buttons")
        body = markdown_to_mrkdwn(text) if formatted else escape(text)
        extra: dict[str, Any] = {"blocks": approval_blocks(body, buttons)} if buttons else {}
        sent = await self._call(
            self._web().chat_postMessage(
                text=body,
                unfurl_links=False,
                unfurl_media=False,
                **self._where(chat),
                **extra,
            )
        )
        return SentMessage(str(sent["ts"]))

    async def edit(self, chat: InboundMessage, message: SentMessage, text: str, *, formatted: bool) -> None:
        body = markdown_to_mrkdwn(text) if formatted else escape(text)
        await self._call(  # blocks=[]: an edited question loses its buttons
            self._web().chat_update(channel=chat.chat_id, ts=message.message_id, text=body, blocks=[])
        )

    async def send_file(self, chat: InboundMessage, file: OutgoingFile, *, formatted: bool) -> SentMessage:
        """Upload ``file`` (its ``name``, ``data`` and ``caption``) into the chat (and thread).

        Slack's external upload: ``files.getUploadURLExternal``, the bytes to the URL it returns,
        then ``files.completeUploadExternal`` shares the file with the caption as its comment.
        """
        caption = file.caption
        comment = (markdown_to_mrkdwn(caption) if formatted else escape(caption)) if caption else None
        done = await self._call(
            self._web().files_upload_v2(
                filename=file.name,
                content=file.data,
                title=file.name,
                channel=chat.chat_id,
                thread_ts=chat.thread_id,
                initial_comment=comment,
            )
        )
        return SentMessage(str((done.get("file") or {}).get("id") or ""))

    async def delete(self, chat: InboundMessage, message: SentMessage) -> None:
        await self._call(self._web().chat_delete(channel=chat.chat_id, ts=message.message_id))

    async def acknowledge(self, press: ButtonPress, text: str) -> None:
        """Slack has no notice for a click: a non-empty ``text`` goes to the clicker alone (ephemeral)."""
        self._receiving_only("button clicks")
        if not text:
            return
        await self._call(
            self._web().chat_postEphemeral(
                channel=press.chat_id,
                user=press.sender_id,
                text=escape(text),
                thread_ts=thread_of(press.chat_key),
            )
        )

    async def typing(self, chat: InboundMessage) -> None:
        """Slack shows no typing indicator for bots (the capability is not declared)."""

    async def download(self, attachment: Attachment, target: Path) -> None:
        """``files.info`` for the file's private URL, then a GET with the bot token, size-capped."""
        self._receiving_only("files sent to the bot")
        http = self._http()
        if http is None:
            raise RuntimeError("the Slack channel is not started")
        limit = self._config.max_attachment_bytes
        info = (await self._call(self._web().files_info(file=attachment.file_id))).get("file") or {}
        size = info.get("size")
        if isinstance(size, int) and size > limit:
            raise PermanentSendError(f"the file is {size} bytes, over maxAttachmentBytes")
        url = str(info.get("url_private_download") or info.get("url_private") or "")
        host = urlsplit(url).hostname or ""
        own = urlsplit(self._config.api_root).hostname
        if not (host == own or any(host == h or host.endswith("." + h) for h in _TRUSTED_FILE_HOSTS)):
            raise PermanentSendError(f"the file's URL is not on Slack ({host or 'no host'}); not downloaded")
        try:
            async with http.get(
                url, headers={"Authorization": f"Bearer {self._config.bot_token}"}
            ) as response:
                if response.status >= 500 or response.status == 429:
                    raise send_error(OSError(f"HTTP {response.status}"), self._clean)
                if response.status != 200:
                    raise PermanentSendError(f"the file download answered HTTP {response.status}")
                written = 0
                async with await anyio.open_file(target, "wb") as out:
                    async for chunk in response.content.iter_chunked(64 * 1024):
                        written += len(chunk)
                        if written > limit:
                            raise PermanentSendError("the file is over maxAttachmentBytes")
                        await out.write(chunk)
        except PermanentSendError:
            await anyio.Path(target).unlink(missing_ok=True)
            raise
        except (aiohttp.ClientError, TimeoutError) as exc:
            await anyio.Path(target).unlink(missing_ok=True)
            raise send_error(exc, self._clean) from None


class SlackSender:
    """A worker's way to answer Slack conversations: ``async with SlackSender(config) as outbound``.

    The Web API client with the bot token on ``apiRoot``; no Socket Mode connection (the app
    token is not needed). slack-sdk's async client opens a session per request, so there is
    nothing to close at the end.
    """

    def __init__(self, config: SlackConfig) -> None:
        if not config.bot_token:
            raise PermanentSendError("channels.slack.botToken is not set in this worker's ship.json")
        self._config = config
        self._web: AsyncWebClient | None = None

    def _the_client(self) -> AsyncWebClient:
        if self._web is None:
            raise RuntimeError("use the Slack sender inside `async with`")
        return self._web

    async def __aenter__(self) -> SlackOutbound:
        self._web = AsyncWebClient(
            token=self._config.bot_token, base_url=self._config.api_root + "/", timeout=20
        )
        return SlackOutbound(
            self._the_client,
            self._config,
            token_cleaner(self._config.bot_token, self._config.app_token, self._config.signing_secret),
            receives=False,
        )

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._web = None
