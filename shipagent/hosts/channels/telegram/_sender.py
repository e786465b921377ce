"""Telegram's send API alone, for a durable worker that answers a chat it does not poll.

The Bot API is stateless HTTP: sending needs the bot token and the chat id, not the process that
received the message. So a worker that runs a channel's turn builds this sender from ship.json
``channels.telegram`` (the token from its own environment) and answers through it, while another
process polls. It speaks the same :class:`~shipagent.hosts.channels.Outbound` protocol as
:class:`~shipagent.hosts.channels.telegram.TelegramChannel` (HTML formatting, topics, the same
error translation), without ``getMe``, commands or polling. Downloads and button answers belong
to the receiving process and are refused here.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from telegram import Bot, LinkPreviewOptions
from telegram.constants import ChatAction, ParseMode
from telegram.error import TelegramError
from telegram.request import HTTPXRequest

from ...._channels_config import TelegramConfig
from .._types import (
    Attachment,
    Button,
    ButtonPress,
    Capabilities,
    InboundMessage,
    PermanentSendError,
    SentMessage,
)
from ._html import markdown_to_html
from ._redact import TokenFilter
from ._wire import send_error

if TYPE_CHECKING:
    from ....tools.execution import OutgoingFile

__all__ = ["TelegramSender"]

_NO_PREVIEW = LinkPreviewOptions(is_disabled=True)


class TelegramSender:
    """Sends into Telegram chats for the life of an ``async with`` block (one HTTP client)."""

    name = "telegram"
    capabilities = Capabilities(send_text=True, edit=True, typing=True)

    def __init__(self, config: TelegramConfig) -> None:
        if not config.bot_token:
            raise PermanentSendError("channels.telegram.botToken is not set in this worker's ship.json")
        self._token = TokenFilter(config.bot_token)
        self._root = config.api_root
        self._request: HTTPXRequest | None = None
        self._bot: Bot | None = None

    async def __aenter__(self) -> Self:
        self._token.install()  # before the first request: httpx logs URLs, and they hold the token
        self._request = HTTPXRequest(connection_pool_size=4, read_timeout=20.0, pool_timeout=10.0)
        self._bot = Bot(
            self._token.token,
            base_url=f"{self._root}/bot",
            base_file_url=f"{self._root}/file/bot",
            request=self._request,
        )
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._request is not None:
                await self._request.shutdown()
        finally:
            self._request = self._bot = None
            self._token.remove()

    @property
    def bot(self) -> Bot:
        if self._bot is None:
            raise RuntimeError("use the Telegram sender inside `async with`")
        return self._bot

    def _where(self, chat: InboundMessage) -> dict[str, Any]:
        where: dict[str, Any] = {"chat_id": int(chat.chat_id)}
        if chat.thread_id is not None:
            where["message_thread_id"] = int(chat.thread_id)
        return where

    async def _call(self, operation: Any) -> Any:
        try:
            return await operation
        except TelegramError as exc:
            translated = send_error(exc, self._token.clean)
            if translated is None:
                return None
            raise translated from None

    async def send(
        self, chat: InboundMessage, text: str, *, formatted: bool, buttons: tuple[Button, ...] = ()
    ) -> SentMessage:
        if buttons:
            raise PermanentSendError(
                "a worker cannot show buttons: their presses reach the receiving process"
            )
        sent = await self._call(
            self.bot.send_message(
                text=markdown_to_html(text) if formatted else text,
                parse_mode=ParseMode.HTML if formatted else None,
                link_preview_options=_NO_PREVIEW,
                **self._where(chat),
            )
        )
        return SentMessage(str(sent.message_id))

    async def edit(self, chat: InboundMessage, message: SentMessage, text: str, *, formatted: bool) -> None:
        await self._call(
            self.bot.edit_message_text(
                text=markdown_to_html(text) if formatted else text,
                chat_id=int(chat.chat_id),
                message_id=int(message.message_id),
                parse_mode=ParseMode.HTML if formatted else None,
                link_preview_options=_NO_PREVIEW,
            )
        )

    async def delete(self, chat: InboundMessage, message: SentMessage) -> None:
        await self._call(
            self.bot.delete_message(chat_id=int(chat.chat_id), message_id=int(message.message_id))
        )

    async def typing(self, chat: InboundMessage) -> None:
        await self._call(self.bot.send_chat_action(action=ChatAction.TYPING, **self._where(chat)))

    async def send_file(self, chat: InboundMessage, file: OutgoingFile, *, formatted: bool) -> SentMessage:
        raise PermanentSendError("a worker does not send files yet")

    async def download(self, attachment: Attachment, target: Path) -> None:
        raise PermanentSendError("files are downloaded by the process that received the message")

    async def acknowledge(self, press: ButtonPress, text: str) -> None:
        raise PermanentSendError("button presses are answered by the process that received them")
