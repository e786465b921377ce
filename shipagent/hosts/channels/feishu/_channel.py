"""The Feishu / Lark channel: events over lark-oapi's long connection, answers through its REST client.

Why lark-oapi (1.7.5, pinned): it is Feishu's own SDK, the only one that speaks the long connection
(no public URL needed: the bot connects out), and its REST client fetches and renews the
``tenant_access_token`` by itself. Both are pointed at ``channels.feishu.domain``: Feishu's
(``open.feishu.cn``), Lark's (``open.larksuite.com``) or another server's URL.

What is sent, and how streaming edits work within Feishu's 20 edits of a message, is
:mod:`._rest` (this class is its subclass: the pipeline's outbound is the channel itself). The
streamed message is edited at most once every 1.5 s by default.

Approvals: the question is an interactive card with Approve / Deny buttons; a press arrives over
the same long connection as a ``card.action.trigger`` callback, and the callback's answer is a
toast for the one who pressed (refused, approved, denied). The answered card is changed by
``PATCH`` (the only edit a card takes) into the verdict without buttons. Cards can be updated
after a press only when the app's card has ``update_multi`` (set here).

Files: one sent to the bot is downloaded into the chat's context files (the pipeline's
``receive_file``; this channel's part is :meth:`FeishuRest.download`), one the model sends is
uploaded and sent (:meth:`FeishuRest.send_file`). People are named through the contact API
(:mod:`._names`), since Feishu's events carry only the sender's ``open_id``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from .._build import channel_pipeline
from .._pipeline import PipelineOptions
from .._types import (
    ButtonPress,
    ChannelHealth,
    PermanentSendError,
    TransientSendError,
)
from ._link import LongConnection
from ._names import Names
from ._rest import FeishuRest
from ._wire import to_inbound, to_press

if TYPE_CHECKING:
    from ...._channels_config import FeishuConfig
    from ....agent._agent import ShipAgent
    from ....tools.execution import ToolExecutionContext

__all__ = ["FeishuChannel"]

log = logging.getLogger("shipagent.hosts.channels.feishu")

WHERE = (
    "This chat is on Feishu (Lark). Your answers are shown with Markdown: **bold**, *italics*, "
    "~~strikethrough~~, `inline code`, fenced code blocks, lists and [links](https://example.com) "
    "render; tables, images and HTML do not (write a list instead of a table; send an image or any "
    "other file of the project with `chat_send_file`). A long answer is "
    "split into messages of about {limit} characters, so prefer short answers. In a group, each "
    "user line starts with who wrote it."
)
"""What the model is told about where it is, in every turn of a Feishu chat (a stable paragraph)."""


class FeishuChannel(FeishuRest):
    """The agent as a Feishu / Lark app bot (``channels.feishu`` in ship.json)."""

    name = "feishu"

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
        super().__init__(config)
        self.agent = agent
        self.health = ChannelHealth()
        self.ready_timeout = ready_timeout
        self.pipeline = channel_pipeline(
            agent,
            self,
            channel=self.name,
            config=config,
            groups=config.groups,
            options=PipelineOptions.of(config, edit_interval=edit_interval),
            state_dir=state_dir,
            health=self.health,
        )
        self._told = WHERE.format(limit=f"{config.text_chunk_limit:,}")
        self._link: LongConnection | None = None
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self._toasts: dict[str, tuple[anyio.Event, list[str]]] = {}  # press id -> its notice
        self.bot_open_id = ""
        self.names = Names(self._client, self._clean)
        """People's names by ``open_id`` (Feishu's events carry none)."""

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Ask who the bot is (this checks the credentials), open the long connection, return once
        it is connected."""
        config = self.config
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
        press = replace(press, sender_name=await self.names.of(press.sender_id))
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
        if not message.sender_is_bot:
            message = replace(message, sender_name=await self.names.of(message.sender_id))
        await self.pipeline.accept(message)

    async def acknowledge(self, press: ButtonPress, text: str) -> None:
        """The notice goes back as the press's toast (if the press is still waiting for it)."""
        waiting = self._toasts.get(press.press_id)
        if waiting is not None:
            waiting[1].append(text)
            waiting[0].set()
