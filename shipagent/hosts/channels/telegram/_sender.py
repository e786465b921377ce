"""Telegram's send side: the pipeline's ``Outbound`` on one PTB ``Bot``, for the channel and for workers.

The Bot API is stateless HTTP: sending needs the bot token and the chat id, not the process that
received the message. So the same :class:`TelegramOutbound` serves two owners:

* the :class:`~shipagent.hosts.channels.telegram.TelegramChannel`, which polls (or listens) and
  answers through its own ``Bot``;
* :class:`TelegramSender`, what a durable worker opens from ship.json ``channels.telegram`` (the
  token from its own environment) to answer a chat another process receives. Buttons, downloads
  and button answers belong to the receiving process and are refused there.

Every call translates PTB's errors the same way (:func:`._wire.send_error`): transient ones are
retried by the pipeline, permanent ones are said, and the token never appears in their text.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, InputFile, LinkPreviewOptions
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
    MarkupRejected,
    PermanentSendError,
    SentMessage,
)
from ._html import markdown_to_html
from ._redact import TokenFilter
from ._wire import is_photo, send_error

if TYPE_CHECKING:
    from ....tools.execution import OutgoingFile

__all__ = ["TelegramOutbound", "TelegramSender"]

log = logging.getLogger("shipagent.hosts.channels.telegram")
_NO_PREVIEW = LinkPreviewOptions(is_disabled=True)


class TelegramOutbound:
    """Sends, edits and uploads into Telegram chats through ``bot()`` (the pipeline's ``Outbound``).

    Args:
        bot: the ``Bot`` to use, asked at every call (the channel makes its own at start).
        clean: removes the token from a text (an error message) before it is raised.
        max_attachment_bytes: the largest inbound file :meth:`download` fetches.
        receives: whether this process also receives the chat's updates: only then can it show
            buttons (their presses come back to it), download files and answer presses.
    """

    def __init__(
        self,
        bot: Callable[[], Bot],
        clean: Callable[[str], str],
        *,
        max_attachment_bytes: int,
        receives: bool,
    ) -> None:
        self._bot = bot
        self._clean = clean
        self._max_attachment_bytes = max_attachment_bytes
        self._receives = receives
        self.capabilities = Capabilities(
            send_text=True, edit=True, send_file=True, typing=True, buttons=receives
        )

    @staticmethod
    def _where(chat: InboundMessage) -> dict[str, Any]:
        where: dict[str, Any] = {"chat_id": int(chat.chat_id)}
        if chat.thread_id is not None:
            where["message_thread_id"] = int(chat.thread_id)
        return where

    async def _call(self, operation: Any) -> Any:
        try:
            return await operation
        except TelegramError as exc:
            translated = send_error(exc, self._clean)
            if translated is None:
                return None
            raise translated from None

    def _receiving_only(self, what: str) -> None:
        if not self._receives:
            raise PermanentSendError(f"{what} belong to the process that receives the chat's messages")

    async def send(
        self, chat: InboundMessage, text: str, *, formatted: bool, buttons: tuple[Button, ...] = ()
    ) -> SentMessage:
        if buttons:
            self._receiving_only("buttons")
        keyboard = (
            InlineKeyboardMarkup([[InlineKeyboardButton(b.label, callback_data=b.data) for b in buttons]])
            if buttons
            else None
        )
        sent = await self._call(
            self._bot().send_message(
                text=markdown_to_html(text) if formatted else text,
                parse_mode=ParseMode.HTML if formatted else None,
                link_preview_options=_NO_PREVIEW,
                reply_markup=keyboard,
                **self._where(chat),
            )
        )
        return SentMessage(str(sent.message_id))

    async def send_file(self, chat: InboundMessage, file: OutgoingFile, *, formatted: bool) -> SentMessage:
        """A photo (``sendPhoto``) when Telegram shows it as one, else a document (``sendDocument``).

        A photo Telegram refuses (its dimensions) goes again as a document, which takes any file.
        """
        caption = file.caption or None
        options: dict[str, Any] = {
            "caption": markdown_to_html(caption) if caption and formatted else caption,
            "parse_mode": ParseMode.HTML if caption and formatted else None,
            **self._where(chat),
        }
        if is_photo(file.name, file.data):
            try:
                sent = await self._call(
                    self._bot().send_photo(photo=InputFile(file.data, filename=file.name), **options)
                )
                return SentMessage(str(sent.message_id))
            except PermanentSendError as exc:
                if isinstance(exc, MarkupRejected):
                    raise
                log.info("telegram: %s was refused as a photo (%s); sending it as a document", file.path, exc)
        sent = await self._call(
            self._bot().send_document(document=InputFile(file.data, filename=file.name), **options)
        )
        return SentMessage(str(sent.message_id))

    async def edit(self, chat: InboundMessage, message: SentMessage, text: str, *, formatted: bool) -> None:
        await self._call(
            self._bot().edit_message_text(
                text=markdown_to_html(text) if formatted else text,
                chat_id=int(chat.chat_id),
                message_id=int(message.message_id),
                parse_mode=ParseMode.HTML if formatted else None,
                link_preview_options=_NO_PREVIEW,
            )
        )

    async def delete(self, chat: InboundMessage, message: SentMessage) -> None:
        await self._call(
            self._bot().delete_message(chat_id=int(chat.chat_id), message_id=int(message.message_id))
        )

    async def typing(self, chat: InboundMessage) -> None:
        await self._call(self._bot().send_chat_action(action=ChatAction.TYPING, **self._where(chat)))

    async def download(self, attachment: Attachment, target: Path) -> None:
        self._receiving_only("files sent to the bot")
        file = await self._call(self._bot().get_file(attachment.file_id))
        if file.file_size is not None and file.file_size > self._max_attachment_bytes:
            raise PermanentSendError(f"the file is {file.file_size} bytes, over maxAttachmentBytes")
        await self._call(file.download_to_drive(custom_path=target))

    async def acknowledge(self, press: ButtonPress, text: str) -> None:
        self._receiving_only("button presses")
        await self._call(self._bot().answer_callback_query(press.press_id, text=text or None))


class TelegramSender:
    """A worker's way to answer Telegram chats: ``async with TelegramSender(config) as outbound``.

    One HTTP client for the life of the block; the token filter is on before PTB logs a URL.
    """

    def __init__(self, config: TelegramConfig) -> None:
        if not config.bot_token:
            raise PermanentSendError("channels.telegram.botToken is not set in this worker's ship.json")
        self._config = config
        self._token = TokenFilter(config.bot_token)
        self._request: HTTPXRequest | None = None
        self._bot: Bot | None = None

    def _the_bot(self) -> Bot:
        if self._bot is None:
            raise RuntimeError("use the Telegram sender inside `async with`")
        return self._bot

    async def __aenter__(self) -> TelegramOutbound:
        self._token.install()  # before the first request: httpx logs URLs, and they hold the token
        self._request = HTTPXRequest(connection_pool_size=4, read_timeout=20.0, pool_timeout=10.0)
        root = self._config.api_root
        self._bot = Bot(
            self._token.token, base_url=f"{root}/bot", base_file_url=f"{root}/file/bot", request=self._request
        )
        return TelegramOutbound(
            self._the_bot,
            self._token.clean,
            max_attachment_bytes=self._config.max_attachment_bytes,
            receives=False,
        )

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._request is not None:
                await self._request.shutdown()
        finally:
            self._request = self._bot = None
            self._token.remove()
