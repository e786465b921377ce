"""The QQ channel: messages from QQ's gateway, answers as passive replies over its HTTP API.

Why not qq-botpy: its last release (1.2.1) is from March 2024 and it pulls in APScheduler and
PyYAML for what is a token request, one WebSocket and three POSTs. This adapter speaks the
official API directly with httpx and websockets: the access token (:mod:`._auth`), the gateway
(:mod:`._gateway`), and the reply endpoints here.

Replies are passive: each one answers the message being answered, and QQ takes them only for a
while after it (5 minutes in groups, 60 in direct chats) and at most five per message. QQ cannot
edit a message, so nothing is streamed: the answer is sent when it is done, after any
``chat_send`` texts. The pipeline hands each text over whole; :mod:`._replies` splits it, numbers
the replies and keeps them within QQ's cap.

A file (``chat_send_file``) is uploaded first and then sent as one more passive reply carrying
what the upload returned (:meth:`QQChannel.send_file`).

QQ shows no buttons, so a shell command in ``ask`` mode is refused with a reply saying so (the
pipeline does that for every platform without buttons).
"""

from __future__ import annotations

import base64
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import httpx
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._build import channel_pipeline
from .._pipeline import PipelineOptions
from .._types import (
    Attachment,
    Button,
    ButtonPress,
    Capabilities,
    ChannelHealth,
    InboundMessage,
    PermanentSendError,
    SentMessage,
    TransientSendError,
)
from ._auth import AccessToken, CredentialsRefused
from ._gateway import Gateway, GatewayStopped
from ._replies import CUT_NOTE, PassiveReplies, RepliesUsed, SeqUsed
from ._wire import (
    DUPLICATE_SEQ,
    FILE,
    MAX_REPLIES,
    PUBLIC_GUILD_MESSAGES,
    REPLY_LIMIT_REACHED,
    attachment_url,
    intents_for,
    media_type,
    plain_text,
    send_error,
    to_inbound,
)

if TYPE_CHECKING:
    from ...._channels_config import QQConfig
    from ....agent._agent import ShipAgent
    from ....tools.execution import OutgoingFile, ToolExecutionContext

__all__ = ["QQChannel"]

log = logging.getLogger("shipagent.hosts.channels.qq")

WHERE = (
    "This chat is on QQ. Your answers are shown as plain text: Markdown does not render (no bold, "
    "headings, tables or code formatting; the markers are taken out), so write plain sentences and "
    "lists. QQ may refuse a reply that contains a link to a site the bot has not registered: name "
    "sites rather than linking them. You can send a file of the project with `chat_send_file`; in a "
    "group QQ takes only images (png, jpg), mp4 videos and voice (silk, wav, mp3, flac). QQ allows "
    "at most 5 replies to one user message, and your `chat_send` texts and files count: the fifth "
    "is kept for your answer. A long answer is split into messages of about {limit} characters and "
    "cut where the replies run out, so keep answers short; if the user asks for the rest of a cut "
    "answer, go on from about {cut} characters in. In a group, each user line starts with who wrote it."
)
"""What the model is told about where it is, in every turn of a QQ chat (a stable paragraph)."""

_WHOLE = 1 << 30
"""The pipeline's message limit on QQ: it hands every text over whole, and :class:`PassiveReplies`
splits it, knowing how many replies QQ will still take."""


def _code(response: httpx.Response) -> object:
    try:
        data = response.json()
    except ValueError:
        return None
    return data.get("code") if isinstance(data, dict) else None


class QQChannel:
    """The agent as a QQ bot (``channels.qq`` in ship.json)."""

    name = "qq"
    capabilities = Capabilities(send_text=True, edit=False, send_file=True, typing=False, buttons=False)

    def __init__(
        self,
        agent: ShipAgent,
        config: QQConfig,
        *,
        state_dir: Path,
        ready_timeout: float = 60.0,
        max_backoff: float = 60.0,
        edit_interval: float = 1.0,
    ) -> None:
        """``edit_interval``: the least time between two sends in one chat (QQ cannot edit, so this
        only paces the replies of a chat, as it paces edits on the other platforms)."""
        if not config.app_id or not config.client_secret:
            raise ValueError("channels.qq.appId and channels.qq.clientSecret must be set")
        self.agent = agent
        self.config = config
        self.health = ChannelHealth()
        self.ready_timeout = ready_timeout
        self.max_backoff = max_backoff
        options = PipelineOptions(
            stream=False,  # no edits on QQ: the answer goes when it is done
            limit=_WHOLE,  # split here, within the replies QQ still takes (send)
            edit_interval=edit_interval,
            max_attachment_bytes=config.max_attachment_bytes,
            rate_per_minute=config.rate_limit_per_minute,
        ).debounced(config.debounce_ms)
        self.pipeline = channel_pipeline(
            agent,
            self,
            channel=self.name,
            config=config,
            groups=config.groups,
            options=options,
            state_dir=state_dir,
            health=self.health,
        )
        limit = config.text_chunk_limit
        self._told = WHERE.format(limit=f"{limit:,}", cut=f"{limit * MAX_REPLIES - len(CUT_NOTE):,}")
        self._http: httpx.AsyncClient | None = None
        self._token: AccessToken | None = None
        self.gateway: Gateway | None = None
        self._tasks: anyio.abc.TaskGroup | None = None
        self._ready = anyio.Event()
        self._ended = anyio.Event()
        self._send: MemoryObjectSendStream[tuple[str, dict[str, Any]]]
        self._receive: MemoryObjectReceiveStream[tuple[str, dict[str, Any]]]
        self._send, self._receive = anyio.create_memory_object_stream(math.inf)
        self.replies = PassiveReplies(self._api, config.text_chunk_limit)
        self.bot_id = ""
        self.bot_name = "bot"

    @property
    def token(self) -> AccessToken:
        """The access token (made by :meth:`start`)."""
        if self._token is None:
            raise RuntimeError("the QQ channel is not started")
        return self._token

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Get a token (checks AppID and AppSecret), connect the gateway, return once READY."""
        self._http = httpx.AsyncClient(base_url=self.config.api_base, timeout=30)
        self._token = AccessToken(
            self._http, self.config.token_url, self.config.app_id or "", self.config.client_secret or ""
        )
        try:
            await self.token.get()
        except (CredentialsRefused, OSError) as exc:
            self._fail(f"could not start: {exc}")
            await self._http.aclose()
            self._http = None
            raise RuntimeError(f"qq: could not start: {self.health.last_error}") from None
        intents, optional = intents_for(self.config.groups.policy, self.config.groups.allow)
        self.gateway = Gateway(
            url_of=self._gateway_url,
            token=self.token,
            intents=intents,
            optional=optional,
            listener=self,
            max_backoff=self.max_backoff,
        )
        self.health.details["guild channels"] = "yes" if intents & PUBLIC_GUILD_MESSAGES else "not asked for"
        self.health.details["app"] = self.config.app_id or ""
        self.health.details["api"] = self.config.api_base
        self.agent.instruction_sources.append(self._where_it_is)
        await self.pipeline.__aenter__()
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        self._tasks.start_soon(self._connect)
        self._tasks.start_soon(self._consume)
        with anyio.move_on_after(self.ready_timeout):
            async with anyio.create_task_group() as wait:

                async def until(event: anyio.Event) -> None:
                    await event.wait()
                    wait.cancel_scope.cancel()

                wait.start_soon(until, self._ready)
                wait.start_soon(until, self._ended)
        if not self._ready.is_set():
            problem = self.health.last_error or f"no READY from the gateway within {self.ready_timeout:g} s"
            await self.stop()
            raise RuntimeError(f"qq: could not connect: {problem}")
        log.info("qq: connected as %s", self.health.details.get("bot", "?"))

    async def _gateway_url(self) -> str:
        data = await self._api("GET", "/gateway")
        url = data.get("url")
        if not isinstance(url, str) or not url.startswith(("ws://", "wss://")):
            raise OSError("GET /gateway gave no WebSocket URL")
        return url

    async def _connect(self) -> None:
        assert self.gateway is not None
        try:
            await self.gateway.run()
        except GatewayStopped as exc:
            self.health.stopped = True
            self._fail(f"{exc}; stopped")
        finally:
            self.health.connected = False
            self._ended.set()

    async def stop(self) -> None:
        """Stop taking events, finish the answers already accepted (for a while), then disconnect."""
        try:
            if self._tasks is not None:  # the gateway and the inbox; HTTP stays for the answers
                self._tasks.cancel_scope.cancel()
                await self._tasks.__aexit__(None, None, None)
                self._tasks = None
            await self.pipeline.__aexit__(None, None, None)
        finally:
            if self._http is not None:
                await self._http.aclose()
                self._http = None
            self.health.connected = False
            if self._where_it_is in self.agent.instruction_sources:
                self.agent.instruction_sources.remove(self._where_it_is)

    def _where_it_is(self, ctx: ToolExecutionContext) -> str | None:
        """The paragraph that tells the model it is on QQ (this channel's chats only)."""
        return self._told if ctx.chat_key.startswith("qq:") else None

    def _clean(self, text: str) -> str:
        for secret in (self.config.client_secret or "", self._token.current if self._token else ""):
            if secret:
                text = text.replace(secret, "[secret]")
        return text

    def _fail(self, text: str) -> None:
        self.health.connected = False
        self.health.last_error = self._clean(text)
        log.error("qq: %s", self.health.last_error)

    # -- the gateway's listener -------------------------------------------------------------------

    def ready(self, data: dict[str, Any]) -> None:
        user = data.get("user") or {}
        self.bot_id = str(user.get("id") or "")
        self.bot_name = str(user.get("username") or "bot")
        self.pipeline.bot_username = self.bot_name
        self.health.details["bot"] = f"{self.bot_name} (id {self.bot_id})"
        self.health.connected = True
        self._ready.set()

    def resumed(self) -> None:
        self.health.connected = True

    def dispatch(self, event: str, data: dict[str, Any]) -> None:
        self._send.send_nowait((event, data))  # taken in arrival order by _consume

    def intents_refused(self, dropped: int) -> None:
        """QQ refused the guild intent (4014): groups and direct messages go on; say what to change."""
        self.health.details["guild channels"] = "refused by QQ (close code 4014)"
        log.error(
            "qq: QQ refused this bot guild channel messages (PUBLIC_GUILD_MESSAGES, close code 4014), "
            "so it goes on with groups and direct messages only. Grant the bot guild messages on the "
            "QQ Open Platform, or stop asking for them: remove the guild channel ids (digits) from "
            'channels.qq.groups.allow, and with channels.qq.groups.policy "open" set it to "allowlist".'
        )

    def lost(self, reason: str) -> None:
        self.health.connected = False
        self.health.last_error = self._clean(f"the gateway connection was lost: {reason}")
        self.health.restarts += 1
        log.warning("qq: %s", self.health.last_error)

    # -- inbound ----------------------------------------------------------------------------------

    async def _consume(self) -> None:
        async for event, data in self._receive:
            message = to_inbound(event, data, self.bot_id, self.bot_name)
            if message is None:
                continue
            while True:
                try:
                    await self.pipeline.accept(message)
                    break
                except OSError as exc:  # the dedupe record could not be written; QQ will not resend
                    self._fail(f"could not record an event: {exc}; retrying")
                    await anyio.sleep(1.0)
                except Exception as exc:  # a bug or a broken state file: say so, do not stall the chat
                    self._fail(f"an event was dropped: {type(exc).__name__}: {exc}")
                    log.exception("qq: an event could not be handled")
                    break

    # -- outbound (the pipeline's Outbound) -------------------------------------------------------

    async def _api(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One API request with the current token; QQ's errors as the pipeline's send errors."""
        if self._http is None:
            raise PermanentSendError("the QQ channel is stopped")
        try:
            token = await self.token.get()
        except CredentialsRefused as exc:
            raise PermanentSendError(str(exc)) from None
        except OSError as exc:
            raise TransientSendError(str(exc)) from None
        headers = {"Authorization": f"QQBot {token}", "X-Union-Appid": self.config.app_id or ""}
        try:
            response = await self._http.request(method, path, json=body, headers=headers)
            response.raise_for_status()
        except (httpx.HTTPError, OSError) as exc:
            if isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code == 401:
                self.token.invalidate()
            if isinstance(exc, httpx.HTTPStatusError) and _code(exc.response) == DUPLICATE_SEQ:
                raise SeqUsed(str(self._error(exc))) from None
            if isinstance(exc, httpx.HTTPStatusError) and _code(exc.response) == REPLY_LIMIT_REACHED:
                raise RepliesUsed(f"QQ takes no more replies to this message ({self._error(exc)})") from None
            raise self._error(exc) from None
        if not response.content:
            return {}
        data = response.json()
        return data if isinstance(data, dict) else {}

    def _error(self, exc: Exception) -> TransientSendError | PermanentSendError:
        return send_error(exc, (self.config.client_secret or "", self.token.current))

    async def send(
        self, chat: InboundMessage, text: str, *, formatted: bool, buttons: tuple[Button, ...] = ()
    ) -> SentMessage:
        """``text`` as passive replies to ``chat`` (the message being answered), split to
        ``textChunkLimit`` and kept within the five replies QQ takes (:class:`PassiveReplies`)."""
        body = plain_text(text) if formatted else text
        return await self.replies.text(chat, body, answer=not self.pipeline.running(chat.chat_key))

    async def edit(self, chat: InboundMessage, message: SentMessage, text: str, *, formatted: bool) -> None:
        raise PermanentSendError("QQ cannot edit a message")  # capabilities.edit is False

    async def delete(self, chat: InboundMessage, message: SentMessage) -> None:
        raise PermanentSendError("the QQ channel does not delete messages")

    async def send_file(self, chat: InboundMessage, file: OutgoingFile, *, formatted: bool) -> SentMessage:
        """Upload ``file`` to QQ (``POST /v2/{groups|users}/{id}/files``), then reply with it.

        QQ's rich media is two steps: the upload returns a ``file_info``, and a message of
        ``msg_type`` 7 carrying it is sent as the next passive reply (``msg_seq``) to the message
        being answered, its caption as the text. The upload goes with ``srv_send_msg: false``: with
        ``true`` QQ would send the file itself as an active message (a small monthly quota, and no
        ``msg_seq`` to keep the replies in order). The bytes go as ``file_data`` (base64): the file
        is in the project, not at a URL QQ could fetch. What QQ does not take is refused here with
        the reason (the model is told): files other than images, videos and voice in a group, and
        anything in a guild channel (whose upload is a different, image-only API).
        """
        kind = media_type(file.name)
        if chat.chat_key.startswith("qq:channel:"):
            raise PermanentSendError(
                f"QQ guild channels do not take files from this bot; {file.name} was not sent "
                "(tell the user where the file is instead)"
            )
        if chat.is_group and kind == FILE:
            raise PermanentSendError(
                f"QQ does not let a bot send {file.name} in a group: only images (png, jpg), videos "
                "(mp4) and voice (silk, wav, mp3, flac); in a direct chat any file can be sent"
            )
        where = "groups" if chat.is_group else "users"
        answer = not self.pipeline.running(chat.chat_key)
        if not self.replies.left(chat, answer=answer):  # before the upload: nothing to send it with
            raise RepliesUsed(
                f"QQ allows {MAX_REPLIES} replies to one message and the last is kept for the answer; "
                f"{file.name} was not sent (tell the user where the file is instead)"
            )
        upload: dict[str, Any] = {
            "file_type": kind,
            "file_data": base64.b64encode(file.data).decode("ascii"),
            "srv_send_msg": False,
        }
        if kind == FILE:
            upload["file_name"] = file.name
        data = await self._api("POST", f"/v2/{where}/{chat.chat_id}/files", upload)
        info = data.get("file_info")
        if not isinstance(info, str) or not info:
            raise PermanentSendError(f"QQ's upload of {file.name} gave no file_info")
        message: dict[str, Any] = {"msg_type": 7, "media": {"file_info": info}}
        if file.caption:
            message["content"] = plain_text(file.caption) if formatted else file.caption
        return await self.replies.media(chat, message, file.name, answer=answer)

    async def typing(self, chat: InboundMessage) -> None:
        return None  # QQ groups have no typing indicator

    async def acknowledge(self, press: ButtonPress, text: str) -> None:
        return None  # no buttons on QQ

    async def download(self, attachment: Attachment, target: Path) -> None:
        """Stream the file QQ's event linked to ``target``, refusing it past ``maxAttachmentBytes``."""
        if self._http is None:
            raise PermanentSendError("the QQ channel is stopped")
        limit = self.config.max_attachment_bytes
        got = 0
        try:
            async with self._http.stream("GET", attachment_url(attachment.file_id)) as response:
                if response.status_code >= 400:
                    raise PermanentSendError(
                        f"the attachment could not be downloaded (HTTP {response.status_code})"
                    )
                async with await anyio.open_file(target, "wb") as out:
                    async for chunk in response.aiter_bytes(64 * 1024):
                        got += len(chunk)
                        if got > limit:
                            raise PermanentSendError(f"the file is over maxAttachmentBytes ({limit} bytes)")
                        await out.write(chunk)
        except (httpx.HTTPError, OSError) as exc:
            await anyio.Path(target).unlink(missing_ok=True)
            raise self._error(exc) from None
        except BaseException:
            await anyio.Path(target).unlink(missing_ok=True)
            raise
