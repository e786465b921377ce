"""The Telegram channel: updates by ``getUpdates`` long polling (or a webhook), sends through the Bot API.

Why PTB (22.8, pinned) rather than aiogram: its ``Bot`` is usable on its own, without its
``Application`` dispatcher, so the poll loop is ours and the offset is confirmed exactly when the
pipeline has durably accepted an update; its HTTP layer is httpx (already a dependency of
shipagent), and ``base_url`` / ``base_file_url`` point it at any Bot API server. aiogram would
bring aiohttp and its own dispatcher we would have to work around.

The loop: ``deleteWebhook`` once (a webhook and polling exclude each other), then ``getUpdates``
with the offset of the last update the pipeline accepted, so Telegram redelivers anything not yet
accepted after a crash and the dedupe record stops a double answer. A 409 (another process polls
this bot) stops the channel with a clear error instead of fighting it; a 429 waits ``retry_after``;
a poll that has not returned within its timeout plus a margin is abandoned and started again by
the watchdog, and counted in the health.

In webhook mode (``mode: webhook``) there is no loop: Telegram posts each update to a listener the
channel owns (:mod:`._webhook`), which hands it to the same pipeline and answers 200 only once the
pipeline recorded it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from telegram import (
    Bot,
    BotCommand,
    LinkPreviewOptions,
    Update,
)
from telegram.error import Conflict, Forbidden, InvalidToken, RetryAfter, TelegramError, TimedOut
from telegram.request import HTTPXRequest

from ...._channels_config import TelegramConfig
from .._build import channel_pipeline
from .._commands import COMMANDS
from .._pipeline import PipelineOptions
from .._types import (
    Capabilities,
    ChannelHealth,
)
from ._redact import TokenFilter
from ._sender import TelegramOutbound
from ._webhook import BadUpdate, WebhookMode
from ._wire import ALLOWED_UPDATES, seconds, to_inbound, to_press

if TYPE_CHECKING:
    from ....agent._agent import ShipAgent
    from ....tools.execution import ToolExecutionContext

__all__ = ["TelegramChannel"]

log = logging.getLogger("shipagent.hosts.channels.telegram")
_NO_PREVIEW = LinkPreviewOptions(is_disabled=True)


WHERE = (
    "This chat is on Telegram. Your answers are shown with Telegram's formatting: **bold**, "
    "*italics*, `inline code`, fenced code blocks, links and quotes render; tables, images and "
    "HTML do not (write a list instead of a table; send an image or any other file of the project "
    "with `chat_send_file`). A long answer is split into messages of about "
    "{limit} characters, so prefer short answers. In a group, each user line starts with who wrote it."
)
"""What the model is told about where it is, in every turn of a Telegram chat (a stable paragraph)."""


class TelegramChannel:
    """The agent as a Telegram bot (``channels.telegram`` in ship.json)."""

    name = "telegram"
    capabilities = Capabilities(send_text=True, edit=True, send_file=True, typing=True, buttons=True)

    def __init__(
        self,
        agent: ShipAgent,
        config: TelegramConfig,
        *,
        state_dir: Path,
        poll_timeout: float = 30.0,
        watchdog_margin: float = 15.0,
        edit_interval: float = 1.0,
        webhook_check_interval: float = 60.0,
    ) -> None:
        if not config.bot_token:
            raise ValueError("channels.telegram.botToken is not set")
        self.config = config
        self.health = ChannelHealth()
        self.poll_timeout = poll_timeout
        self.watchdog_margin = watchdog_margin
        self.webhook_check_interval = webhook_check_interval
        self._token = TokenFilter(config.bot_token)
        self.outbound = TelegramOutbound(
            lambda: self.bot,
            self._token.clean,
            max_attachment_bytes=config.max_attachment_bytes,
            receives=True,
        )
        """How this channel sends: the same code a durable worker's sender uses."""
        options = PipelineOptions.of(
            config, edit_interval=edit_interval, history_limit=config.groups.history_limit
        )
        self.pipeline = channel_pipeline(
            agent,
            self.outbound,
            channel=self.name,
            config=config,
            groups=config.groups,
            options=options,
            state_dir=state_dir,
            health=self.health,
        )
        self.agent = agent
        self._told = WHERE.format(limit=f"{config.text_chunk_limit:,}")
        self._tasks: anyio.abc.TaskGroup | None = None
        self._bot: Bot | None = None
        self._bot_id = 0
        self._username = ""
        self.offset: int | None = None
        """The next ``getUpdates`` offset: one past the last update the pipeline accepted."""
        self.webhook: WebhookMode | None = None
        """Webhook mode's listener and checks (made by :meth:`start` in webhook mode)."""
        self._accepting = anyio.Lock()  # webhook requests run concurrently: accept one at a time

    @property
    def bot(self) -> Bot:
        """PTB's bot (made by :meth:`start`, so the token filter is on before PTB logs a URL)."""
        if self._bot is None:
            raise RuntimeError("the Telegram channel is not started")
        return self._bot

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Check the token (``getMe``), register the commands, then start receiving updates.

        Polling mode drops any webhook first (Telegram refuses ``getUpdates`` while one is set);
        webhook mode starts its listener, then sets the webhook to ``webhookUrl``.
        """
        self._token.install()  # before the Bot exists: PTB logs its URLs (with the token) at once
        root = self.config.api_root
        self._bot = Bot(
            self._token.token,
            base_url=f"{root}/bot",
            base_file_url=f"{root}/file/bot",
            request=HTTPXRequest(connection_pool_size=32, read_timeout=20.0, pool_timeout=10.0),
            get_updates_request=HTTPXRequest(connection_pool_size=2, read_timeout=5.0),
        )
        try:
            await self.bot.initialize()
            me = self.bot.bot
            self._bot_id, self._username = me.id, me.username or ""
            self.pipeline.bot_username = self._username
            if self.config.mode == "polling":
                await self.bot.delete_webhook(drop_pending_updates=False)
            await self.bot.set_my_commands([BotCommand(n, d) for n, d in COMMANDS.items()])
        except TelegramError as exc:
            await self.bot.shutdown()
            self._token.remove()
            self.health.last_error = self._token.clean(f"could not start: {type(exc).__name__}: {exc}")
            raise
        self.health.details["bot"] = f"@{self._username}"
        self.health.connected = True  # the Bot API answered; a failing poll says otherwise
        self.agent.instruction_sources.append(self._where_it_is)
        await self.pipeline.__aenter__()
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        if self.config.mode == "webhook":
            await self._start_webhook(self._tasks)
            log.info("telegram: @%s receives updates by webhook", self._username)
        else:
            self._tasks.start_soon(self._poll)
            log.info("telegram: polling as @%s", self._username)

    async def _start_webhook(self, tasks: anyio.abc.TaskGroup) -> None:
        self.webhook = WebhookMode(
            self.bot,
            self.config,
            self.health,
            handle=self._take,
            fail=self._fail,
            check_interval=self.webhook_check_interval,
        )
        try:
            await self.webhook.start(tasks)
        except BaseException as exc:
            if isinstance(exc, Exception):
                self._fail(f"could not start the webhook: {type(exc).__name__}: {exc}")
            self.webhook = None
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop polling, finish the answers already accepted (for a while), close the HTTP clients."""
        try:
            if self.webhook is not None:  # no new update is taken; those in flight finish first
                await self.webhook.stop()
                self.webhook = None
            if self._tasks is not None:
                self._tasks.cancel_scope.cancel()
                await self._tasks.__aexit__(None, None, None)
                self._tasks = None
            await self.pipeline.__aexit__(None, None, None)
            await self.bot.shutdown()
        finally:
            self.health.connected = False
            self._token.remove()
            if self._where_it_is in self.agent.instruction_sources:
                self.agent.instruction_sources.remove(self._where_it_is)

    def _where_it_is(self, ctx: ToolExecutionContext) -> str | None:
        """The paragraph that tells the model it is on Telegram (this channel's chats only)."""
        return self._told if ctx.chat_key.startswith("telegram:") else None

    # -- polling ----------------------------------------------------------------------------------

    def _fail(self, text: str) -> None:
        self.health.connected = False
        self.health.last_error = self._token.clean(text)
        log.error("telegram: %s", self.health.last_error)

    async def _poll(self) -> None:
        backoff = 1.0
        while True:
            try:
                with anyio.fail_after(self.poll_timeout + self.watchdog_margin):
                    updates = await self.bot.get_updates(
                        offset=self.offset,
                        timeout=int(self.poll_timeout),
                        allowed_updates=ALLOWED_UPDATES,
                    )
            except (TimeoutError, TimedOut):
                self.health.restarts += 1
                self._fail(f"the poll did not return within {self.poll_timeout:g} s; restarted it")
                continue
            except Conflict:
                self.health.stopped = True
                self._fail(
                    "409 Conflict: another process is polling this bot (or a webhook is set); "
                    "stopped. Stop the other process, then restart this one."
                )
                return
            except (InvalidToken, Forbidden) as exc:
                self.health.stopped = True
                self._fail(f"the Bot API refused the token ({type(exc).__name__}); stopped")
                return
            except RetryAfter as exc:
                self._fail(f"flood control: waiting {seconds(exc):g} s")
                await anyio.sleep(seconds(exc))
                continue
            except Exception as exc:  # PTB wraps network errors in TelegramError; anything else too
                self._fail(f"poll failed: {type(exc).__name__}: {exc}; retrying in {backoff:g} s")
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            backoff = 1.0
            self.health.connected = True
            for update in updates:
                await self._accept(update)

    async def _dispatch(self, update: Update) -> None:
        """Hand ``update`` to the pipeline; returns once it is recorded (raises if it could not be)."""
        message = to_inbound(update, self._bot_id, self._username)
        if message is not None:
            await self.pipeline.accept(message)
        elif (press := to_press(update)) is not None:
            await self.pipeline.press(press)

    async def _accept(self, update: Update) -> None:
        while True:
            try:
                await self._dispatch(update)
                break
            except OSError as exc:  # the dedupe record could not be written: do not confirm it
                self._fail(f"could not record update {update.update_id}: {exc}; retrying")
                await anyio.sleep(1.0)
            except Exception as exc:  # a bug or a broken state file: say so, do not stall the chat
                self._fail(f"update {update.update_id} was dropped: {type(exc).__name__}: {exc}")
                log.exception("telegram: update %s could not be handled", update.update_id)
                break
        self.offset = update.update_id + 1  # confirmed to Telegram by the next getUpdates

    async def _take(self, data: dict[str, Any]) -> None:
        """A webhook's update (its JSON): recorded when this returns; an error makes a non-2xx.

        One at a time, as the poll loop does, so a chat's messages reach the pipeline in the order
        they were taken even when Telegram posts over several connections.
        """
        try:
            update = Update.de_json(data, self.bot)
        except Exception as exc:
            raise BadUpdate(f"not a Telegram update: {type(exc).__name__}: {exc}") from None
        async with self._accepting:
            await self._dispatch(update)
