"""Feishu's REST side: the messages the bot sends, edits and deletes, through lark-oapi's client.

Why a class of its own: it needs only ``channels.feishu`` (the app's credentials and ``domain``),
not the long connection, so a process that sends without receiving (a durable worker answering a
turn another process accepted) can use it as it is (:class:`FeishuSender`).

Streaming is by editing a message (``PUT /open-apis/im/v1/messages/:message_id``, "update"), not by
``PATCH`` on the same path: PATCH updates only interactive cards, PUT edits ``text`` and ``post``
messages, which is what the answer is (a ``post`` with a Markdown element: it renders the model's
Markdown without building a card). Feishu allows 20 edits of a message, so a message is edited at
most :data:`STREAM_EDITS` times while it is streamed and the rest are kept for the final answer and
a failure note; streamed text past that shows when the answer is done. The first message of an
answer in a group is a reply to the message it answers (``…/messages/:message_id/reply``), so a
busy group sees who is answered. A question with buttons is an interactive card, changed by
``PATCH`` (the only edit a card takes) into the verdict without buttons.

Files: a file sent to the bot is fetched from the message that carries it
(``GET …/messages/:message_id/resources/:file_key``); lark-oapi reads it whole (Feishu serves up to
100 MB), and one over ``maxAttachmentBytes`` is refused before anything is written. A file the model
sends (``chat_send_file``) is uploaded first, then sent as a message naming it: an image (PNG, JPEG,
GIF, WebP, BMP, TIFF, ICO, at most 10 MB) through ``POST /open-apis/im/v1/images`` and shown
inline (with its caption, one ``post`` holding the caption and the image), anything else through
``POST /open-apis/im/v1/files`` (at most 30 MB, Feishu's limit) as a ``file`` message, its caption
in a ``post`` after it.

All calls run in worker threads: lark-oapi's client sends with ``requests`` (blocking), and even
its ``a…`` methods fetch the token with it. lark-oapi keeps the tenant access token per App ID for
the life of the process (about two hours).
"""

from __future__ import annotations

import io
import json
import mimetypes
import uuid
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from .._types import (
    Attachment,
    Button,
    ButtonPress,
    Capabilities,
    InboundMessage,
    PermanentSendError,
    SentMessage,
    TransientSendError,
)
from ._wire import card_content, post_content, resource_of, send_error

if TYPE_CHECKING:
    from ...._channels_config import FeishuConfig
    from ....tools.execution import OutgoingFile

__all__ = ["STREAM_EDITS", "FeishuRest", "FeishuSender"]

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff", ".ico"})
MAX_IMAGE = 10 * 1024 * 1024
"""Feishu's limit for an uploaded image; a larger picture goes as a file."""
MAX_FILE = 30 * 1024 * 1024
"""Feishu's limit for an uploaded file."""
_FILE_TYPES = {".pdf": "pdf", ".doc": "doc", ".docx": "doc", ".xls": "xls", ".xlsx": "xls"}
_FILE_TYPES |= {".ppt": "ppt", ".pptx": "ppt"}  # anything else is a "stream"

STREAM_EDITS = 17
"""Edits of one message while it is streamed (Feishu allows 20: three stay for the end, the final
answer or the note that the turn failed)."""


def _says_failure(text: str) -> bool:
    """Whether a plain edit is the writer's note that the turn failed (``⚠️ …`` after what was
    written): it is shown even past :data:`STREAM_EDITS`, so a failed turn never looks finished."""
    return text.startswith("⚠️ ") or "\n\n⚠️ " in text


class FeishuRest:
    """The pipeline's :class:`~shipagent.hosts.channels.Outbound` on Feishu's REST API."""

    capabilities = Capabilities(send_text=True, edit=True, buttons=True, send_file=True)

    def __init__(self, config: FeishuConfig) -> None:
        if not (config.app_id and config.app_secret):
            raise PermanentSendError("channels.feishu.appId and appSecret are not set")
        import lark_oapi as lark  # type: ignore[import-untyped]

        self.config = config
        self._client: Any = (
            lark.Client.builder()
            .app_id(config.app_id)
            .app_secret(config.app_secret)
            .domain(config.base_url)
            .log_level(lark.LogLevel.WARNING)
            .build()
        )
        self._edits: dict[str, int] = {}  # message id -> edits so far
        self._answered: set[str] = set()  # groups: inbound ids already replied to
        self._cards: set[str] = set()  # ids of the bot's interactive cards (an approval question)

    def _clean(self, text: str) -> str:
        secret = self.config.app_secret or ""
        return text.replace(secret, "[secret]") if secret else text

    async def _call(self, operation: str, request: Any, *, api: str = "message") -> Any:
        """``self._client.im.v1.<api>.<operation>(request)`` in a worker thread, as the pipeline's
        errors when it fails."""
        method = getattr(getattr(self._client.im.v1, api), operation)
        try:
            response = await anyio.to_thread.run_sync(method, request)
        except OSError as exc:  # requests' connection errors are OSErrors
            raise TransientSendError(self._clean(f"{type(exc).__name__}: {exc}")) from None
        if not response.success():
            status = response.raw.status_code if response.raw is not None else None
            raise send_error(
                response.code, status, self._clean(f"{operation}: {response.code} {response.msg}")
            )
        return response

    async def _bot_info(self) -> dict[str, Any]:
        import lark_oapi as lark

        request = (
            lark.BaseRequest.builder()
            .http_method(lark.HttpMethod.GET)
            .uri("/open-apis/bot/v3/info")
            .token_types({lark.AccessTokenType.TENANT})
            .build()
        )
        try:
            response = await anyio.to_thread.run_sync(self._client.request, request)
        except OSError as exc:
            raise TransientSendError(self._clean(f"{type(exc).__name__}: {exc}")) from None
        raw = response.raw.content if response.raw is not None else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = {}
        if not response.success() or not isinstance(body.get("bot"), dict):
            raise PermanentSendError(
                self._clean(f"the app's credentials were refused: {response.code} {response.msg}")
            )
        return dict(body["bot"])

    async def send(
        self, chat: InboundMessage, text: str, *, formatted: bool, buttons: tuple[Button, ...] = ()
    ) -> SentMessage:
        """A ``post`` message; a question with ``buttons`` goes as an interactive card."""
        kind = "interactive" if buttons else "post"
        content = card_content(text, buttons) if buttons else post_content(text, formatted=formatted)
        sent = await self._deliver(chat, kind, content)
        if buttons:
            self._cards.add(sent.message_id)
        return sent

    async def _deliver(self, chat: InboundMessage, kind: str, content: str) -> SentMessage:
        """Send one message of ``kind``; in a group, the first of an answer replies to its message."""
        from lark_oapi.api.im.v1 import (  # type: ignore[import-untyped]
            CreateMessageRequest,
            CreateMessageRequestBody,
            ReplyMessageRequest,
            ReplyMessageRequestBody,
        )

        key = str(uuid.uuid4())  # Feishu sends a request with the same uuid once (a retry is safe)
        if chat.is_group and chat.message_id not in self._answered:
            self._answered.add(chat.message_id)
            body = ReplyMessageRequestBody.builder().msg_type(kind).content(content).uuid(key).build()
            request = ReplyMessageRequest.builder().message_id(chat.message_id).request_body(body).build()
            response = await self._call("reply", request)
        else:
            body = (
                CreateMessageRequestBody.builder()
                .receive_id(chat.chat_id)
                .msg_type(kind)
                .content(content)
                .uuid(key)
                .build()
            )
            request = CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body).build()
            response = await self._call("create", request)
        if len(self._answered) > 1000:
            self._answered.clear()
        return SentMessage(str(response.data.message_id))

    async def edit(self, chat: InboundMessage, message: SentMessage, text: str, *, formatted: bool) -> None:
        """Replace the message's text (``PUT …/messages/:id``); a streamed (plain) edit past
        :data:`STREAM_EDITS` is skipped, so the final one (or the failure note) still fits in
        Feishu's 20."""
        from lark_oapi.api.im.v1 import (
            PatchMessageRequest,
            PatchMessageRequestBody,
            UpdateMessageRequest,
            UpdateMessageRequestBody,
        )

        if message.message_id in self._cards:  # a card is changed by PATCH, and loses its buttons
            self._cards.discard(message.message_id)
            body = PatchMessageRequestBody.builder().content(card_content(text)).build()
            patch = PatchMessageRequest.builder().message_id(message.message_id).request_body(body).build()
            await self._call("patch", patch)
            return
        done = self._edits.get(message.message_id, 0)
        if not formatted and done >= STREAM_EDITS and not _says_failure(text):
            return
        body = (
            UpdateMessageRequestBody.builder()
            .msg_type("post")
            .content(post_content(text, formatted=formatted))
        )
        request = (
            UpdateMessageRequest.builder().message_id(message.message_id).request_body(body.build()).build()
        )
        await self._call("update", request)
        self._edits[message.message_id] = done + 1
        while len(self._edits) > 1000:
            del self._edits[next(iter(self._edits))]

    async def delete(self, chat: InboundMessage, message: SentMessage) -> None:
        from lark_oapi.api.im.v1 import DeleteMessageRequest

        await self._call("delete", DeleteMessageRequest.builder().message_id(message.message_id).build())

    async def send_file(self, chat: InboundMessage, file: OutgoingFile, *, formatted: bool) -> SentMessage:
        """Upload ``file``, then send it: an image inline (with its caption in the same ``post``),
        anything else as a ``file`` message followed by its caption."""
        from lark_oapi.api.im.v1 import (
            CreateFileRequest,
            CreateFileRequestBody,
            CreateImageRequest,
            CreateImageRequestBody,
        )

        size = len(file.data)
        if not size:
            raise PermanentSendError(f"{file.name} is empty; Feishu does not take empty files")
        suffix = PurePosixPath(file.name).suffix.lower()
        mime = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
        part = (file.name, io.BytesIO(file.data), mime)  # a (name, bytes, type) form part
        if suffix in IMAGE_SUFFIXES and size <= MAX_IMAGE:
            body = CreateImageRequestBody.builder().image_type("message").image(part).build()
            response = await self._call(
                "create", CreateImageRequest.builder().request_body(body).build(), api="image"
            )
            image = str(response.data.image_key)
            if not file.caption:
                return await self._deliver(chat, "image", json.dumps({"image_key": image}))
            caption = (
                {"tag": "md", "text": file.caption} if formatted else {"tag": "text", "text": file.caption}
            )
            content = {"zh_cn": {"title": "", "content": [[caption], [{"tag": "img", "image_key": image}]]}}
            return await self._deliver(chat, "post", json.dumps(content, ensure_ascii=False))
        if size > MAX_FILE:
            raise PermanentSendError(
                f"{file.name} is {size:,} bytes; Feishu takes files up to {MAX_FILE:,} bytes"
            )
        body = (
            CreateFileRequestBody.builder()
            .file_type(_FILE_TYPES.get(suffix, "stream"))
            .file_name(file.name)
            .file(part)
            .build()
        )
        response = await self._call(
            "create", CreateFileRequest.builder().request_body(body).build(), api="file"
        )
        sent = await self._deliver(chat, "file", json.dumps({"file_key": str(response.data.file_key)}))
        if file.caption:
            await self._deliver(chat, "post", post_content(file.caption, formatted=formatted))
        return sent

    async def download(self, attachment: Attachment, target: Path) -> None:
        """Fetch a file sent to the bot from its message; over ``maxAttachmentBytes`` is refused
        (nothing is written)."""
        from lark_oapi.api.im.v1 import GetMessageResourceRequest

        message_id, key, kind = resource_of(attachment)
        if not (message_id and key):
            raise PermanentSendError(f"the attachment {attachment.file_id!r} names no Feishu message")
        request = GetMessageResourceRequest.builder().message_id(message_id).file_key(key).type(kind).build()
        response = await self._call("get", request, api="message_resource")
        data = response.file.read() if response.file is not None else b""
        limit = self.config.max_attachment_bytes
        if len(data) > limit:
            raise PermanentSendError(f"the file is {len(data):,} bytes, over maxAttachmentBytes ({limit:,})")
        await anyio.Path(target).write_bytes(data)

    async def typing(self, chat: InboundMessage) -> None:
        return None  # Feishu has no typing indicator for bots

    async def acknowledge(self, press: ButtonPress, text: str) -> None:
        return None  # a press is answered where it arrives (the channel's toast)


class FeishuSender:
    """A worker's way to answer Feishu chats: ``async with FeishuSender(config) as outbound``."""

    def __init__(self, config: FeishuConfig) -> None:
        self._config = config

    async def __aenter__(self) -> FeishuRest:
        return FeishuRest(self._config)

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None
