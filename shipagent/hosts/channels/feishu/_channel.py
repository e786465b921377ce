"""The Feishu / Lark channel: events over lark-oapi's long connection, answers through its REST client.

Why lark-oapi (1.7.5, pinned): it is Feishu's own SDK, the only one that speaks the long connection
(no public URL needed: the bot connects out), and its REST client fetches and renews the
``tenant_access_token`` by itself. Both are pointed at ``channels.feishu.domain``: Feishu's
(``open.feishu.cn``), Lark's (``open.larksuite.com``) or another server's URL.

Streaming is by editing a message (``PUT /open-apis/im/v1/messages/:message_id``, "update"), not by
``PATCH`` on the same path: PATCH updates only interactive cards, PUT edits ``text`` and ``post``
messages, which is what the answer is (a ``post`` with a Markdown element: it renders the model's
Markdown without building a card). Feishu allows 20 edits of a message, so the channel edits a
message at most :data:`STREAM_EDITS` times while it is streamed (one edit every 1.5 s by default)
and keeps the rest for the final answer and a failure note; streamed text past that shows when
the answer is done. The first message of an answer in a group is a reply to the message it
answers (``…/messages/:message_id/reply``), so a busy group sees who is answered.

Approvals: the question is an interactive card with Approve / Deny buttons; a press arrives over
the same long connection as a ``card.action.trigger`` callback, and the callback's answer is a
toast for the one who pressed (refused, approved, denied). The answered card is changed by
``PATCH`` (the only edit a card takes) into the verdict without buttons. Cards can be updated
after a press only when the app's card has ``update_multi`` (set here).

Not yet: files in and out (an image or file message arrives as a line saying so).

All REST calls run in worker threads: lark-oapi's client sends with ``requests`` (blocking), and
even its ``a…`` methods fetch the token with it.
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from .._access import AccessRules
from .._dedupe import Dedupe
from .._pairing import PairingStore
from .._pipeline import Pipeline, PipelineOptions
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
from ._link import LongConnection
from ._wire import card_content, post_content, send_error, to_inbound, to_press

if TYPE_CHECKING:
    from ...._channels_config import FeishuConfig
    from ....agent._agent import ShipAgent
    from ....tools.execution import OutgoingFile, ToolExecutionContext

__all__ = ["STREAM_EDITS", "FeishuChannel"]

log = logging.getLogger("shipagent.hosts.channels.feishu")

STREAM_EDITS = 17
"""Edits of one message while it is streamed (Feishu allows 20: three stay for the end, the final
answer or the note that the turn failed)."""


def _says_failure(text: str) -> bool:
    """Whether a plain edit is the writer's note that the turn failed (``⚠️ …`` after what was
    written): it is shown even past :data:`STREAM_EDITS`, so a failed turn never looks finished."""
    return text.startswith("⚠️ ") or "\n\n⚠️ " in text


WHERE = (
    "This chat is on Feishu (Lark). Your answers are shown with Markdown: **bold**, *italics*, "
    "~~strikethrough~~, `inline code`, fenced code blocks, lists and [links](https://example.com) "
    "render; tables, images and HTML do not (write a list instead of a table). A long answer is "
    "split into messages of about {limit} characters, so prefer short answers. In a group, each "
    "user line starts with who wrote it."
)
"""What the model is told about where it is, in every turn of a Feishu chat (a stable paragraph)."""


class FeishuChannel:
    """The agent as a Feishu / Lark app bot (``channels.feishu`` in ship.json)."""

    name = "feishu"
    capabilities = Capabilities(send_text=True, edit=True, buttons=True)

    def __init__(
        self,
        agent: ShipAgent,
        config: FeishuConfig,
        *,
        state_dir: Path,
        edit_interval: float = 1.5,
        ready_timeout: float = 30.0,
    ) -> None:
        if not (config.app_id and config.app_secret):
            raise ValueError("channels.feishu.appId and appSecret are not set")
        self.agent = agent
        self.config = config
        self.health = ChannelHealth()
        self.ready_timeout = ready_timeout
        groups = config.groups
        self.pipeline = Pipeline(
            agent,
            self,
            channel=self.name,
            rules=AccessRules(
                dm_policy=config.dm_policy,
                allow_from=frozenset(config.allow_from),
                group_policy=groups.policy,
                group_allow=frozenset(groups.allow),
                require_mention=groups.require_mention,
            ),
            pairing=PairingStore(state_dir),
            dedupe=Dedupe(state_dir, self.name),
            health=self.health,
            admins=frozenset(config.admins),
            options=PipelineOptions(
                stream=config.streaming == "edit",
                limit=config.text_chunk_limit,
                edit_interval=edit_interval,
                max_attachment_bytes=config.max_attachment_bytes,
                rate_per_minute=config.rate_limit_per_minute,
                show_tool_steps=config.show_tool_steps,
            ).debounced(config.debounce_ms),
        )
        self._told = WHERE.format(limit=f"{config.text_chunk_limit:,}")
        self._client: Any = None
        self._link: LongConnection | None = None
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self._edits: dict[str, int] = {}  # message id -> edits so far
        self._answered: set[str] = set()  # groups: inbound ids already replied to
        self._cards: set[str] = set()  # ids of the bot's interactive cards (an approval question)
        self._toasts: dict[str, tuple[anyio.Event, list[str]]] = {}  # press id -> its notice
        self.bot_open_id = ""

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Ask who the bot is (this checks the credentials), open the long connection, return once
        it is connected."""
        import lark_oapi as lark  # type: ignore[import-untyped]

        config = self.config
        self._client = (
            lark.Client.builder()
            .app_id(config.app_id)
            .app_secret(config.app_secret)
            .domain(config.base_url)
            .log_level(lark.LogLevel.WARNING)
            .build()
        )
        try:
            bot = await self._bot_info()
        except (PermanentSendError, TransientSendError) as exc:
            self._fail(f"could not start: {exc}")
            raise RuntimeError(f"feishu: {self.health.last_error}") from None
        self.bot_open_id = str(bot.get("open_id") or "")
        self.health.details["bot"] = f"{bot.get('app_name') or '?'} ({self.bot_open_id})"
        self.pipeline.bot_username = str(bot.get("app_name") or "") or None
        self.agent.instruction_sources.append(self._where_it_is)
        await self.pipeline.__aenter__()
        self._token = anyio.lowlevel.current_token()
        self._link = LongConnection(
            app_id=config.app_id or "",
            app_secret=config.app_secret or "",
            domain=config.base_url,
            on_message=self._from_link,
            on_state=self._state,
            on_press=self._press_from_link,
        )
        self._link.start()
        for _ in range(max(1, round(self.ready_timeout / 0.05))):  # the client tells nobody it connected
            if self._link.connected or not self._link.alive:
                break
            await anyio.sleep(0.05)
        if not self._link.connected:
            problem = self._link.failure or f"no long connection within {self.ready_timeout:g} s"
            self._fail(problem)
            await self.stop()
            raise RuntimeError(f"feishu: could not connect: {problem}")
        self.health.connected = True
        log.info("feishu: connected as %s", self.health.details["bot"])

    async def stop(self) -> None:
        """Close the long connection, then finish the answers already accepted (for a while)."""
        try:
            if self._link is not None:
                await anyio.to_thread.run_sync(self._link.stop)
                self._link = None
            await self.pipeline.__aexit__(None, None, None)
        finally:
            self.health.connected = False
            if self._where_it_is in self.agent.instruction_sources:
                self.agent.instruction_sources.remove(self._where_it_is)

    def _where_it_is(self, ctx: ToolExecutionContext) -> str | None:
        """The paragraph that tells the model it is on Feishu (this channel's chats only)."""
        return self._told if ctx.chat_key.startswith("feishu:") else None

    def _clean(self, text: str) -> str:
        secret = self.config.app_secret or ""
        return text.replace(secret, "[secret]") if secret else text

    def _fail(self, text: str) -> None:
        self.health.connected = False
        self.health.last_error = self._clean(text)
        log.error("feishu: %s", self.health.last_error)

    def _state(self, connected: bool, problem: str | None) -> None:
        """From the connection's thread: it was lost, or is back."""
        self.health.connected = connected
        if problem is not None:
            self.health.last_error = self._clean(problem)
            log.warning("feishu: %s", self.health.last_error)
        else:
            self.health.restarts += 1

    # -- inbound ----------------------------------------------------------------------------------

    def _from_link(self, event: dict[str, Any]) -> None:
        """On the connection's thread: hand the event to the channel's loop and wait until it is
        recorded; an exception here makes the client acknowledge with 500 (Feishu sends it again)."""
        anyio.from_thread.run(self._take, event, token=self._token)

    def _press_from_link(self, callback: dict[str, Any]) -> str:
        """On the connection's thread: a card button was pressed; the text returned is the toast
        the one who pressed sees (Feishu shows what the callback's answer says, within 3 s)."""
        return anyio.from_thread.run(self._press, callback, token=self._token)

    async def _press(self, callback: dict[str, Any]) -> str:
        press = to_press(callback)
        if press is None:
            return ""
        waiting = self._toasts[press.press_id] = (anyio.Event(), [])
        try:
            await self.pipeline.press(press)
            with anyio.move_on_after(2.0):
                await waiting[0].wait()
            return waiting[1][0] if waiting[1] else ""
        finally:
            self._toasts.pop(press.press_id, None)

    async def _take(self, event: dict[str, Any]) -> None:
        message = to_inbound(event.get("event") or {}, self.bot_open_id)
        if message is None or message.sender_id == self.bot_open_id:
            return
        await self.pipeline.accept(message)

    # -- outbound (the pipeline's Outbound) -------------------------------------------------------

    async def _call(self, operation: str, request: Any) -> Any:
        """``self._client.im.v1.message.<operation>(request)`` in a worker thread, as the pipeline's
        errors when it fails."""
        method = getattr(self._client.im.v1.message, operation)
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
        from lark_oapi.api.im.v1 import (  # type: ignore[import-untyped]
            CreateMessageRequest,
            CreateMessageRequestBody,
            ReplyMessageRequest,
            ReplyMessageRequestBody,
        )

        kind = "interactive" if buttons else "post"
        content = card_content(text, buttons) if buttons else post_content(text, formatted=formatted)
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
        sent = str(response.data.message_id)
        if buttons:
            self._cards.add(sent)
        return SentMessage(sent)

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
        raise PermanentSendError("the Feishu channel does not send files yet")

    async def download(self, attachment: Attachment, target: Path) -> None:
        raise PermanentSendError("the Feishu channel does not download files yet")

    async def acknowledge(self, press: ButtonPress, text: str) -> None:
        """The notice goes back as the press's toast (if the press is still waiting for it)."""
        waiting = self._toasts.get(press.press_id)
        if waiting is not None:
            waiting[1].append(text)
            waiting[0].set()

    async def typing(self, chat: InboundMessage) -> None:
        return None  # Feishu has no typing indicator for bots
