"""Discord's send side: the pipeline's ``Outbound`` on a logged-in discord.py ``Client``, for the
channel and for workers.

Discord's REST API is stateless HTTP: answering needs the bot token and the channel id, not the
gateway connection that received the message. A ``Client`` that has only logged in (``login``:
``GET /users/@me``, no ``connect``) sends, edits and deletes through REST with discord.py's rate
limit handling. So the same :class:`DiscordOutbound` serves two owners:

* the :class:`~shipagent.hosts.channels.discord.DiscordChannel`, which also connects the gateway;
* :class:`DiscordSender`, what a durable worker opens from ship.json ``channels.discord`` (the
  token from its own environment) to answer a chat another process receives. Buttons (their
  presses arrive on the receiving gateway), downloads and press answers are refused there.

The REST root is discord.py's process-wide ``discord.http.Route.BASE``: a sender points it at
``apiRoot`` while any sender is open (one ``apiRoot`` per process, as for the channel).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp
import anyio
import discord

from ...._channels_config import DiscordConfig
from .._types import (
    Attachment,
    Button,
    ButtonPress,
    Capabilities,
    InboundMessage,
    PermanentSendError,
    SentMessage,
)
from ._wire import discord_markdown, send_error

if TYPE_CHECKING:
    from ....tools.execution import OutgoingFile

__all__ = ["DiscordOutbound", "DiscordSender", "remember"]

T = TypeVar("T")
_NOBODY = discord.AllowedMentions.none()  # the model writing @everyone pings nobody


def remember(table: dict[str, T], key: str, value: T, keep: int = 1000) -> None:
    """``table[key] = value``, forgetting the oldest entries past ``keep`` (what a message that was
    then ignored, or a press seen twice, left behind)."""
    table[key] = value
    while len(table) > keep:
        del table[next(iter(table))]


class DiscordOutbound:
    """Sends, edits and uploads into Discord channels through ``client()`` (the pipeline's ``Outbound``).

    Args:
        client: the logged-in discord.py client, asked at every call.
        config: ``channels.discord`` (the token kept out of errors, ``maxAttachmentBytes``).
        receives: whether this process also receives the chat's events: only then can it show
            buttons (their presses come back to it), download files and answer presses.
        view_timeout: seconds a message's buttons stay live (asked when a question is sent).
        session: the HTTP session attachment downloads go through (the receiving process's).
    """

    def __init__(
        self,
        client: Callable[[], discord.Client],
        config: DiscordConfig,
        *,
        receives: bool,
        view_timeout: Callable[[], float] = lambda: 180.0,
        session: Callable[[], aiohttp.ClientSession | None] = lambda: None,
    ) -> None:
        self._client = client
        self._config = config
        self._receives = receives
        self._view_timeout = view_timeout
        self._session = session
        self.capabilities = Capabilities(
            send_text=True, edit=True, send_file=True, typing=True, buttons=receives
        )
        self.interactions: dict[str, discord.Interaction] = {}
        """Press id -> the interaction waiting for its answer (filled by the receiving channel)."""
        self.followups: dict[str, discord.Interaction] = {}
        """Slash command (interaction) id -> its deferred interaction: answers to it go as followups."""
        self.urls: dict[str, str] = {}
        """Attachment file id -> the URL seen in the event (filled by the receiving channel)."""
        self._views: dict[str, discord.ui.View] = {}  # message id -> its buttons
        self._contents: dict[str, str] = {}  # message id -> the text Discord shows now

    def _target(self, chat: InboundMessage) -> discord.PartialMessageable:
        return self._client().get_partial_messageable(int(chat.thread_id or chat.chat_id))

    async def _call(self, operation: Any) -> Any:
        try:
            return await operation
        except (discord.DiscordException, aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise send_error(exc, self._config.bot_token or "") from None

    def _receiving_only(self, what: str) -> None:
        if not self._receives:
            raise PermanentSendError(f"{what} belong to the process that receives the chat's messages")

    async def send(
        self, chat: InboundMessage, text: str, *, formatted: bool, buttons: tuple[Button, ...] = ()
    ) -> SentMessage:
        view: discord.ui.View | None = None
        if buttons:
            self._receiving_only("buttons")
            view = discord.ui.View(timeout=self._view_timeout())
            for button in buttons:
                style = discord.ButtonStyle.danger if "Deny" in button.label else discord.ButtonStyle.success
                view.add_item(discord.ui.Button(label=button.label, custom_id=button.data, style=style))
        body = discord_markdown(text) if formatted else text
        kwargs: dict[str, Any] = {"allowed_mentions": _NOBODY, "suppress_embeds": True}
        interaction = self.followups.get(chat.message_id)
        if interaction is not None and view is None:  # the answer to a slash command
            sent = await self._call(interaction.followup.send(body, wait=True, **kwargs))
            remember(self._contents, str(sent.id), body)
            return SentMessage(str(sent.id))
        if view is not None:
            kwargs["view"] = view
        sent = await self._call(self._target(chat).send(body, **kwargs))
        if view is not None:
            self._views[str(sent.id)] = view
        remember(self._contents, str(sent.id), body)
        return SentMessage(str(sent.id))

    async def send_file(self, chat: InboundMessage, file: OutgoingFile, *, formatted: bool) -> SentMessage:
        """The file as an attachment (Discord shows an image inline), its caption as the text."""
        caption = file.caption or ""
        upload = discord.File(io.BytesIO(file.data), filename=file.name)
        sent = await self._call(
            self._target(chat).send(
                discord_markdown(caption) if formatted else caption,
                file=upload,
                allowed_mentions=_NOBODY,
                suppress_embeds=True,
            )
        )
        return SentMessage(str(sent.id))

    async def edit(self, chat: InboundMessage, message: SentMessage, text: str, *, formatted: bool) -> None:
        """Replace the message's text; skipped when Discord would show the same (the streamed text
        and the final answer are often identical: Discord renders the Markdown either way)."""
        body = discord_markdown(text) if formatted else text
        if self._contents.get(message.message_id) == body and message.message_id not in self._views:
            return
        target = self._target(chat).get_partial_message(int(message.message_id))
        await self._call(target.edit(content=body, view=None, allowed_mentions=_NOBODY))
        remember(self._contents, message.message_id, body)
        view = self._views.pop(message.message_id, None)
        if view is not None:
            view.stop()

    async def delete(self, chat: InboundMessage, message: SentMessage) -> None:
        await self._call(self._target(chat).get_partial_message(int(message.message_id)).delete())

    async def typing(self, chat: InboundMessage) -> None:
        await self._call(self._target(chat).typing())  # awaited: one indicator, ~10 s

    async def acknowledge(self, press: ButtonPress, text: str) -> None:
        """Tell the one who pressed (a notice only they see); the press itself was answered on arrival."""
        self._receiving_only("button presses")
        interaction = self.interactions.pop(press.press_id, None)
        if interaction is not None and text:
            await self._call(interaction.followup.send(text, ephemeral=True, allowed_mentions=_NOBODY))

    async def download(self, attachment: Attachment, target: Path) -> None:
        self._receiving_only("files sent to the bot")
        url = self.urls.pop(attachment.file_id, None)
        if url is None:  # after a restart: CDN links expire, ask for the message again
            _, channel_id, message_id = attachment.file_id.split("-")
            found = await self._call(
                self._client().get_partial_messageable(int(channel_id)).fetch_message(int(message_id))
            )
            url = next((a.url for a in found.attachments if attachment.file_id.startswith(f"{a.id}-")), None)
            if url is None:
                raise PermanentSendError("the attachment is gone from its message")
        await self._call(self._fetch(url, target))

    async def _fetch(self, url: str, target: Path) -> None:
        """Stream ``url`` to ``target``, refusing it once it passes ``maxAttachmentBytes``."""
        session = self._session()
        if session is None:
            raise RuntimeError("the Discord channel is not started")
        limit = self._config.max_attachment_bytes
        got = 0
        try:
            async with session.get(url) as response:
                if response.status >= 400:
                    raise PermanentSendError(
                        f"the attachment could not be downloaded (HTTP {response.status})"
                    )
                async with await anyio.open_file(target, "wb") as out:
                    async for chunk in response.content.iter_chunked(64 * 1024):
                        got += len(chunk)
                        if got > limit:
                            raise PermanentSendError(f"the file is over maxAttachmentBytes ({limit} bytes)")
                        await out.write(chunk)
        except BaseException:
            await anyio.Path(target).unlink(missing_ok=True)
            raise


class _RestRoot:
    """discord.py's REST root pointed at ``apiRoot`` while any sender is open, then put back."""

    open = 0
    saved = ""

    @classmethod
    def enter(cls, root: str) -> None:
        if cls.open == 0:
            cls.saved = discord.http.Route.BASE
        cls.open += 1
        discord.http.Route.BASE = root

    @classmethod
    def leave(cls) -> None:
        cls.open -= 1
        if cls.open == 0:
            discord.http.Route.BASE = cls.saved


class DiscordSender:
    """A worker's way to answer Discord chats: ``async with DiscordSender(config) as outbound``.

    A discord.py client that logs in (REST: the token is checked) and never connects the gateway;
    closed at the end of the block.
    """

    def __init__(self, config: DiscordConfig) -> None:
        if not config.bot_token:
            raise PermanentSendError("channels.discord.botToken is not set in this worker's ship.json")
        self._config = config
        self._client: discord.Client | None = None

    def _the_client(self) -> discord.Client:
        if self._client is None:
            raise RuntimeError("use the Discord sender inside `async with`")
        return self._client

    async def __aenter__(self) -> DiscordOutbound:
        _RestRoot.enter(self._config.api_root)
        discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False  # no voice: no warning
        client = discord.Client(intents=discord.Intents.none())
        try:
            await client.login(self._config.bot_token or "")
        except BaseException as exc:
            try:
                await client.close()
            finally:
                _RestRoot.leave()
            if isinstance(exc, discord.DiscordException | aiohttp.ClientError | TimeoutError | OSError):
                raise send_error(exc, self._config.bot_token or "") from None
            raise
        self._client = client
        return DiscordOutbound(self._the_client, self._config, receives=False)

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._client is not None:
                await self._client.close()
        finally:
            self._client = None
            _RestRoot.leave()
