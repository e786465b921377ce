"""The Discord channel: messages from the gateway (discord.py's ``Client``), answers through REST.

Why discord.py (2.7.1, pinned): it speaks the gateway completely (identify, heartbeat, resume
with the session's sequence, reconnect with backoff, rate-limit buckets for REST), and its
``Client`` can run on its own without a command framework, so the events it receives are ours to
hand to the pipeline. The intents asked for are ``guilds`` (to know threads and their parent
channels), ``guild_messages``, ``dm_messages`` and the privileged ``message_content`` (without it
a guild message arrives with empty text unless it mentions the bot).

Pointing it elsewhere (a test server): the REST root is ``discord.http.Route.BASE``; discord.py's
``Client`` never asks ``GET /gateway/bot`` and connects to ``DiscordWebSocket.DEFAULT_GATEWAY``
(then to READY's ``resume_gateway_url`` to resume). Both are class attributes, so they are set for
the life of the channel and restored when it stops: one Discord channel with a non-default
``apiRoot`` per process.

The gateway confirms nothing: an event is delivered once, and again after a RESUME only if it was
not acknowledged by sequence, so a replayed ``MESSAGE_CREATE`` is recognised by its message id in
the pipeline's dedupe record. Events are handed to the pipeline one at a time, in arrival order.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import anyio
import anyio.abc
import discord
import yarl
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from discord.gateway import DiscordWebSocket

from ...._channels_config import DEFAULT_DISCORD_API_ROOT, DiscordConfig
from .._access import decide
from .._build import channel_pipeline
from .._pipeline import PipelineOptions
from .._types import Capabilities, ChannelHealth
from ._sender import DiscordOutbound, remember
from ._slash import command_tree, to_command
from ._wire import guild_of, send_error, to_inbound, to_press

if TYPE_CHECKING:
    from ....agent._agent import ShipAgent
    from ....tools.execution import ToolExecutionContext

__all__ = ["DiscordChannel"]

log = logging.getLogger("shipagent.hosts.channels.discord")

WHERE = (
    "This chat is on Discord. Your answers are shown with Discord's Markdown: **bold**, *italics*, "
    "__underline__, ~~strikethrough~~, `inline code`, fenced code blocks, > quotes, lists, # headings "
    "(three levels) and [links](https://example.com) render; tables, images and HTML do not (write a "
    "list instead of a table; send an image or any other file of the project with `chat_send_file`). "
    "A long answer is split into messages of about {limit} characters, so "
    "prefer short answers. In a server channel, each user line starts with who wrote it."
)
"""What the model is told about where it is, in every turn of a Discord chat (a stable paragraph)."""


def intents() -> discord.Intents:
    """The gateway intents the channel asks for (``message_content`` must be on in the portal)."""
    wanted = discord.Intents.none()
    wanted.guilds = True
    wanted.guild_messages = True
    wanted.dm_messages = True
    wanted.message_content = True
    return wanted


class _Client(discord.Client):
    """discord.py's client, passing messages and button presses on in arrival order."""

    def __init__(self, channel: DiscordChannel, guild_ready_timeout: float) -> None:
        discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False  # no voice: no warning
        super().__init__(
            intents=intents(),
            guild_ready_timeout=guild_ready_timeout,
            max_messages=None,
            chunk_guilds_at_startup=False,
            member_cache_flags=discord.MemberCacheFlags.none(),
        )
        self.channel = channel

    async def on_ready(self) -> None:
        self.channel.connected()

    async def on_resumed(self) -> None:
        self.channel.connected()

    async def on_disconnect(self) -> None:
        self.channel.health.connected = False

    async def on_message(self, message: discord.Message) -> None:
        self.channel.inbox(message)  # no await before this: tasks start in event order

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        self.channel.inbox(interaction)


class DiscordChannel:
    """The agent as a Discord bot (``channels.discord`` in ship.json)."""

    name = "discord"
    capabilities = Capabilities(send_text=True, edit=True, send_file=True, typing=True, buttons=True)

    def __init__(
        self,
        agent: ShipAgent,
        config: DiscordConfig,
        *,
        state_dir: Path,
        edit_interval: float = 1.0,
        ready_timeout: float = 60.0,
        guild_ready_timeout: float = 2.0,
    ) -> None:
        if not config.bot_token:
            raise ValueError("channels.discord.botToken is not set")
        self.agent = agent
        self.config = config
        self.health = ChannelHealth()
        self.ready_timeout = ready_timeout
        self.guild_ready_timeout = guild_ready_timeout
        """Seconds discord.py waits after the last GUILD_CREATE before it calls the session ready."""
        self.outbound = DiscordOutbound(
            lambda: self.client,
            config,
            receives=True,
            view_timeout=lambda: self.pipeline.options.approval_timeout + 60,
            session=lambda: self._session,
        )
        """How this channel sends: the same code a durable worker's sender uses."""
        self.pipeline = channel_pipeline(
            agent,
            self.outbound,
            channel=self.name,
            config=config,
            groups=config.guilds,
            options=PipelineOptions.of(config, edit_interval=edit_interval),
            state_dir=state_dir,
            health=self.health,
            adapter_allowlist=True,  # a guild's channels are its chats: `_take` applies guilds.allow
        )
        self._told = WHERE.format(limit=f"{config.text_chunk_limit:,}")
        self._client: _Client | None = None
        self._session: aiohttp.ClientSession | None = None
        self._tasks: anyio.abc.TaskGroup | None = None
        self._ready = anyio.Event()
        self._ended = anyio.Event()
        self._send: MemoryObjectSendStream[discord.Message | discord.Interaction]
        self._receive: MemoryObjectReceiveStream[discord.Message | discord.Interaction]
        self._send, self._receive = anyio.create_memory_object_stream(math.inf)
        self._saved: tuple[str, yarl.URL] | None = None
        self.bot_id = 0

    @property
    def client(self) -> _Client:
        """discord.py's client (made by :meth:`start`)."""
        if self._client is None:
            raise RuntimeError("the Discord channel is not started")
        return self._client

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Log in (``GET /users/@me`` checks the token), connect the gateway, return once READY."""
        token = self.config.bot_token or ""
        self._saved = (discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)
        discord.http.Route.BASE = self.config.api_root
        self._client = _Client(self, self.guild_ready_timeout)
        try:
            await self.client.login(token)
            assert self.client.user is not None
            self.bot_id = self.client.user.id
            gateway = self.config.gateway_url
            if gateway is None and self.config.api_root != DEFAULT_DISCORD_API_ROOT:
                _, gateway, _ = await self.client.http.get_bot_gateway()
            if gateway is not None:
                DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway)
        except Exception as exc:
            self._fail(f"could not start: {type(exc).__name__}: {exc}")
            await self._close_client()
            self._restore()
            raise
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
        if self.config.slash_commands:
            await self._register_commands()
        self.health.details["bot"] = f"{self.client.user} (id {self.bot_id})"
        self.pipeline.bot_username = self.client.user.name
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
            raise RuntimeError(f"discord: could not connect: {problem}")
        log.info("discord: connected as %s", self.health.details["bot"])

    async def _register_commands(self) -> None:
        """Register the chat commands as global slash commands (see :mod:`._slash`); a refusal is
        logged and is the health's last error, and the text commands still work."""
        tree = command_tree(self.client, in_guilds=self.config.guilds.policy != "disabled")
        try:
            synced = await tree.sync()
        except (discord.DiscordException, aiohttp.ClientError, TimeoutError, OSError) as exc:
            problem = send_error(exc, self.config.bot_token or "")
            self.health.details["slash commands"] = f"not registered: {problem}"
            self.health.last_error = f"the slash commands could not be registered: {problem}"
            log.warning("discord: the slash commands could not be registered: %s", problem)
            return
        self.health.details["slash commands"] = " ".join(f"/{c.name}" for c in synced)

    def connected(self) -> None:
        """The gateway session is up (READY, or RESUMED after a reconnect)."""
        self.health.connected = True
        self._ready.set()

    async def _connect(self) -> None:
        """Run discord.py's gateway loop (it resumes and reconnects by itself); start it again
        with backoff if it ends on something unexpected, stop for good on what needs a person."""
        backoff = 1.0
        try:
            while True:
                try:
                    await self.client.connect(reconnect=True)
                    return  # the client was closed
                except discord.PrivilegedIntentsRequired:
                    self._stopped(
                        "Discord refused the message content intent: turn on Message Content Intent "
                        "(Developer Portal → the application → Bot → Privileged Gateway Intents)"
                    )
                    return
                except (discord.LoginFailure, discord.ConnectionClosed) as exc:
                    self._stopped(f"the gateway refused the connection: {type(exc).__name__}: {exc}")
                    return
                except Exception as exc:
                    self.health.restarts += 1
                    self._fail(
                        f"the gateway loop failed: {type(exc).__name__}: {exc}; again in {backoff:g} s"
                    )
                    await anyio.sleep(backoff)
                    backoff = min(backoff * 2, 60.0)
        finally:
            self.health.connected = False
            self._ended.set()

    def _stopped(self, text: str) -> None:
        self.health.stopped = True
        self._fail(f"{text}; stopped")

    async def stop(self) -> None:
        """Stop taking events, finish the answers already accepted (for a while), then disconnect."""
        try:
            if self._tasks is not None:  # the gateway loop and the inbox; REST stays for the answers
                self._tasks.cancel_scope.cancel()
                await self._tasks.__aexit__(None, None, None)
                self._tasks = None
            await self.pipeline.__aexit__(None, None, None)
        finally:
            await self._close_client()
            if self._session is not None:
                await self._session.close()
                self._session = None
            self.health.connected = False
            self._restore()
            if self._where_it_is in self.agent.instruction_sources:
                self.agent.instruction_sources.remove(self._where_it_is)

    def _restore(self) -> None:
        """Put discord.py's process-wide REST root and gateway back as they were."""
        if self._saved is not None:
            discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = self._saved
            self._saved = None

    async def _close_client(self) -> None:
        if self._client is not None and not self._client.is_closed():
            await self._client.close()

    def _where_it_is(self, ctx: ToolExecutionContext) -> str | None:
        """The paragraph that tells the model it is on Discord (this channel's chats only)."""
        return self._told if ctx.chat_key.startswith("discord:") else None

    def _fail(self, text: str) -> None:
        self.health.connected = False
        token = self.config.bot_token or ""
        self.health.last_error = text.replace(token, "[token]") if token else text
        log.error("discord: %s", self.health.last_error)

    # -- inbound ----------------------------------------------------------------------------------

    def inbox(self, event: discord.Message | discord.Interaction) -> None:
        """An event from the gateway, queued for :meth:`_consume` (which takes one at a time)."""
        self._send.send_nowait(event)

    async def _consume(self) -> None:
        async for event in self._receive:
            while True:
                try:
                    await self._take(event)
                    break
                except OSError as exc:  # the dedupe record could not be written: Discord will not
                    self._fail(f"could not record an event: {exc}; retrying")  # send it again
                    await anyio.sleep(1.0)
                except Exception as exc:  # a bug or a broken state file: say so, do not stall the chat
                    self._fail(f"an event was dropped: {type(exc).__name__}: {exc}")
                    log.exception("discord: an event could not be handled")
                    break

    async def _take(self, event: discord.Message | discord.Interaction) -> None:
        if isinstance(event, discord.Interaction):
            if event.type is discord.InteractionType.application_command:
                await self._slash(event)
                return
            press = to_press(event)
            if press is not None:
                await self._defer(event)
                remember(self.outbound.interactions, press.press_id, event)
                await self.pipeline.press(press)
            return
        if event.author.id == self.bot_id:
            return  # the bot's own messages come back through the gateway
        guild_id, guilds = guild_of(event), self.config.guilds
        if guild_id is not None and guilds.policy == "allowlist" and guild_id not in guilds.allow:
            log.debug("discord: message in guild %s ignored: not in guilds.allow", guild_id)
            return
        message = to_inbound(event, self.bot_id)
        if message is None:
            return
        for item, attachment in zip(message.attachments, event.attachments, strict=True):
            remember(self.outbound.urls, item.file_id, attachment.url)
        await self.pipeline.accept(message)

    async def _slash(self, interaction: discord.Interaction) -> None:
        """A slash command, run as the text command it stands for: refused (only its user sees
        why) when the text command would be ignored, else deferred and answered by followups."""
        message = to_command(interaction)
        if message is None:
            return
        guilds = self.config.guilds
        refused: str | None = None
        guild = interaction.guild_id
        if guild is not None and guilds.policy == "allowlist" and guild not in guilds.allow:
            refused = "This bot does not answer in this server."
        if refused is None:
            pipeline = self.pipeline
            decision = await decide(message, pipeline.rules, pipeline.pairing, is_command=True)
            if decision.action == "ignore":
                log.info("discord: slash command from %s refused: %s", message.sender_id, decision.reason)
                refused = "You may not use this bot's commands here."
        if refused is not None:
            await self._respond(interaction, interaction.response.send_message(refused, ephemeral=True))
            return
        if not await self._respond(interaction, interaction.response.defer(thinking=True)):
            return
        remember(self.outbound.followups, message.message_id, interaction)
        if message.text == "/stop" and self.pipeline.running(message.chat_key):
            await self._respond(interaction, interaction.followup.send("Stopping the answer being written."))
        await self.pipeline.accept(message)

    async def _respond(self, interaction: discord.Interaction, call: Awaitable[object]) -> bool:
        """Make ``call`` (an answer to ``interaction``); a failure is logged, never raised."""
        try:
            await call
        except (discord.DiscordException, aiohttp.ClientError, TimeoutError, OSError) as exc:
            log.warning(
                "discord: could not answer slash command %s: %s",
                interaction.id,
                send_error(exc, self.config.bot_token or ""),
            )
            return False
        return True

    async def _defer(self, interaction: discord.Interaction) -> None:
        """Answer a press at once (Discord wants an answer within 3 s; the approval may take longer
        to settle): a deferred update, so the message stays as it is until the desk edits it."""
        try:
            await interaction.response.defer()
        except (discord.DiscordException, aiohttp.ClientError, TimeoutError, OSError) as exc:
            log.warning(
                "discord: could not acknowledge a button press: %s",
                send_error(exc, self.config.bot_token or ""),
            )
