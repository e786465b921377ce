"""The Slack channel: events by Socket Mode (or the Events API), answers through the Web API.

Why Socket Mode: the app opens a WebSocket to Slack (``apps.connections.open`` with the app-level
token hands out its URL), so the agent needs no public URL, no TLS certificate and no request
signing. slack-sdk's own client keeps the socket alive (pings, reconnects on Slack's ``disconnect``
notices); slack-bolt is not used, since its dispatcher would stand between Slack and the pipeline.

Each envelope is acknowledged (its ``envelope_id`` sent back) only after the pipeline has recorded
the message on disk, so a message is never lost between Slack and the agent: Slack resends an
envelope that was not acknowledged, and the pipeline's dedupe, keyed by channel and message ``ts``,
answers it once however often it comes. Slack has no typing indicator for bots and no toast for a
button click: a refused click gets an ephemeral message that only the clicker sees.

In HTTP mode (``mode: http``) there is no socket: Slack POSTs events, clicks and slash commands to
a listener the channel owns (:mod:`._http`), which checks each request's signature and hands the
same payloads to the same handling, so dedupe, access rules and approvals are the same.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import anyio
import anyio.abc
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from ...._channels_config import SlackConfig
from .._build import channel_pipeline
from .._pipeline import PipelineOptions
from .._types import Capabilities, ChannelHealth
from ._http import EventsListener
from ._sender import SlackOutbound, token_cleaner
from ._wire import is_conversation, send_error, slash_to_inbound, to_inbound, to_press

if TYPE_CHECKING:
    from ....agent._agent import ShipAgent
    from ....tools.execution import ToolExecutionContext

__all__ = ["SlackChannel"]

log = logging.getLogger("shipagent.hosts.channels.slack")

WHERE = (
    "This chat is on Slack. Your answers are shown with Slack's formatting: **bold**, *italics*, "
    "~~strikethrough~~, `inline code`, fenced code blocks, links, quotes and bullet lists render; "
    "headings become bold lines; tables, images and HTML do not (write a list instead of a table). "
    "A long answer is split into messages of about {limit} characters, so prefer short answers. "
    "In a channel, each user line starts with who wrote it."
)
"""What the model is told about where it is, in every turn of a Slack chat (a stable paragraph)."""


class SlackChannel:
    """The agent as a Slack app (``channels.slack`` in ship.json).

    Args:
        agent: the agent to answer with.
        config: ``channels.slack``.
        state_dir: where the dedupe record and pairing codes are kept (``.ship/channels``).
        edit_interval: at most one send or ``chat.update`` per chat this often (seconds).
        ping_interval: seconds between the Socket Mode client's pings (a dead socket is noticed
            after four missed ones and reconnected).
        clock: HTTP mode: the time request timestamps are checked against (``time.time``).
    """

    name = "slack"
    capabilities = Capabilities(send_text=True, edit=True, send_file=True, buttons=True)

    def __init__(
        self,
        agent: ShipAgent,
        config: SlackConfig,
        *,
        state_dir: Path,
        edit_interval: float = 1.0,
        ping_interval: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not config.bot_token:
            raise ValueError("channels.slack.botToken must be set")
        if config.mode == "socket" and not config.app_token:
            raise ValueError('channels.slack.appToken must be set (channels.slack.mode is "socket")')
        if config.mode == "http" and not config.signing_secret:
            raise ValueError('channels.slack.signingSecret must be set (channels.slack.mode is "http")')
        self.config = config
        self.agent = agent
        self.health = ChannelHealth()
        self.ping_interval = ping_interval
        self.clock = clock
        self._tokens = (config.bot_token, config.app_token or "")
        self._clean = token_cleaner(*self._tokens, config.signing_secret)
        self.outbound = SlackOutbound(
            lambda: self.web, config, self._clean, http=lambda: self._http, receives=True
        )
        """How this channel sends: the same code a durable worker's sender uses."""
        self.pipeline = channel_pipeline(
            agent,
            self.outbound,
            channel=self.name,
            config=config,
            groups=config.channels,
            options=PipelineOptions.of(config, edit_interval=edit_interval),
            state_dir=state_dir,
            health=self.health,
        )
        self._told = WHERE.format(limit=f"{config.text_chunk_limit:,}")
        self._web: AsyncWebClient | None = None
        self._socket: SocketModeClient | None = None
        self.listener: EventsListener | None = None
        """HTTP mode's listener (made by :meth:`start` in HTTP mode)."""
        self._http: aiohttp.ClientSession | None = None
        self._tasks: anyio.abc.TaskGroup | None = None
        self._accepting = anyio.Lock()  # envelopes are handled in tasks of their own: one at a time
        self._open = False
        self._names: dict[str, str] = {}
        self.team = ""
        self.bot_user = ""
        self.bot_name = ""
        self.hellos = 0
        """Socket Mode connections opened so far (each starts with Slack's ``hello``)."""

    @property
    def web(self) -> AsyncWebClient:
        """slack-sdk's Web API client with the bot token (made by :meth:`start`)."""
        if self._web is None:
            raise RuntimeError("the Slack channel is not started")
        return self._web

    def _fail(self, text: str) -> None:
        self.health.last_error = self._clean(text)
        log.error("slack: %s", self.health.last_error)

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Check the bot token (``auth.test``), open the Socket Mode connection (or, in HTTP mode,
        start the listener), start answering.

        A token Slack refuses stops the start with an error naming the ship.json key.
        """
        root = self.config.api_root + "/"
        bot_token, app_token = self._tokens
        self._web = AsyncWebClient(token=bot_token, base_url=root, timeout=20)
        try:
            auth = await self.web.auth_test()
        except Exception as exc:
            self._fail(f"could not start: channels.slack.botToken: {send_error(exc, self._clean)}")
            raise RuntimeError(self.health.last_error) from None
        self.team, self.bot_user = str(auth.get("team_id") or ""), str(auth.get("user_id") or "")
        self.bot_name = str(auth.get("user") or "bot")
        self.pipeline.bot_username = self.bot_name
        if self.config.mode == "http":
            await self._start_http()
            return
        socket = SocketModeClient(
            app_token,
            logger=logging.getLogger("shipagent.hosts.channels.slack.socket"),
            web_client=AsyncWebClient(base_url=root, timeout=20),
            ping_interval=self.ping_interval,
        )
        socket.message_listeners.append(self._on_message)
        socket.socket_mode_request_listeners.append(self._on_request)
        try:  # asked here, not inside connect(), which would retry a refused token forever
            socket.wss_uri = await socket.issue_new_wss_url()
        except Exception as exc:
            await socket.close()  # type: ignore[no-untyped-call]
            self._fail(f"could not start: channels.slack.appToken: {send_error(exc, self._clean)}")
            raise RuntimeError(self.health.last_error) from None
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300))
        self.agent.instruction_sources.append(self._where_it_is)
        await self.pipeline.__aenter__()
        self._open = True
        self._socket = socket
        try:
            with anyio.fail_after(30):
                await socket.connect()  # type: ignore[no-untyped-call]
        except BaseException:
            await self.stop()
            raise
        self.health.details["bot"] = f"@{self.bot_name}"
        self.health.details["team"] = self.team
        self.health.connected = True
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        self._tasks.start_soon(self._watch)
        log.info("slack: connected by Socket Mode as @%s (team %s)", self.bot_name, self.team)

    async def _start_http(self) -> None:
        """Start the pipeline, then the listener (Slack may post as soon as it answers)."""
        assert self.config.signing_secret is not None  # the config checks
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300))
        self.agent.instruction_sources.append(self._where_it_is)
        await self.pipeline.__aenter__()
        self._open = True
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        self.listener = EventsListener(
            path=self.config.http_path,
            signing_secret=self.config.signing_secret,
            address=self.config.http_address,
            listen=self.config.http_listen,
            handle=self._on_post,
            on_error=self._fail,
            clock=self.clock,
        )
        try:
            await self.listener.start(self._tasks)
        except BaseException as exc:
            self.listener = None
            if isinstance(exc, Exception):
                self._fail(f"could not start: {type(exc).__name__}: {exc}")
            await self.stop()
            raise
        self.health.details["bot"] = f"@{self.bot_name}"
        self.health.details["team"] = self.team
        self.health.details["events"] = f"listening on {self.config.http_listen}{self.config.http_path}"
        self.health.connected = True
        log.info(
            "slack: @%s (team %s) receives events over HTTP on %s%s",
            self.bot_name,
            self.team,
            self.config.http_listen,
            self.config.http_path,
        )

    async def stop(self) -> None:
        """Close the socket or the listener (nothing new comes in), finish the answers already
        accepted, clean up."""
        try:
            if self.listener is not None:  # requests in flight finish first
                self._open = False
                await self.listener.stop()
                self.listener = None
            if self._socket is not None:
                self._open = False
                await self._socket.close()  # type: ignore[no-untyped-call]
                self._socket = None
            async with self._accepting:  # an envelope being accepted is recorded before the pipeline stops
                pass
            if self._tasks is not None:
                self._tasks.cancel_scope.cancel()
                await self._tasks.__aexit__(None, None, None)
                self._tasks = None
            await self.pipeline.__aexit__(None, None, None)
        finally:
            self.health.connected = False
            if self._http is not None:
                await self._http.close()
                self._http = None
            if self._where_it_is in self.agent.instruction_sources:
                self.agent.instruction_sources.remove(self._where_it_is)

    def _where_it_is(self, ctx: ToolExecutionContext) -> str | None:
        """The paragraph that tells the model it is on Slack (this channel's chats only)."""
        return self._told if ctx.chat_key.startswith("slack:") else None

    async def _watch(self) -> None:
        """Keep ``health.connected`` true to the socket (slack-sdk reconnects on its own)."""
        while self._socket is not None:
            await anyio.sleep(min(self.ping_interval, 2.0))
            socket = self._socket
            if socket is not None:
                connected = await socket.is_connected()
                if connected != self.health.connected and not connected:
                    self._fail("the Socket Mode connection is down; reconnecting")
                self.health.connected = connected

    # -- inbound ----------------------------------------------------------------------------------

    async def _on_message(
        self, client: AsyncBaseSocketModeClient, message: dict[str, Any], raw: str | None
    ) -> None:
        if message.get("type") == "hello":
            self.hellos += 1
            self.health.connected = True
            if self.hellos > 1:  # a new connection replaced one that was lost or recycled
                self.health.restarts = self.hellos - 1
                self.health.details["reconnects"] = str(self.hellos - 1)

    async def _on_request(self, client: AsyncBaseSocketModeClient, request: SocketModeRequest) -> None:
        """One envelope: hand it to the pipeline, then acknowledge it (not before it is recorded)."""
        async with self._accepting:
            if not self._open:
                return  # stopping: not acknowledged, so Slack sends it again to the next process
            try:
                await self._dispatch(request.type, request.payload)
            except OSError as exc:  # the dedupe record could not be written: Slack will resend it
                self._fail(f"could not record envelope {request.envelope_id}: {exc}; not acknowledged")
                return
            except Exception as exc:  # a bug or a broken state file: say so, do not stall the chat
                self._fail(f"envelope {request.envelope_id} was dropped: {type(exc).__name__}: {exc}")
                log.exception("slack: envelope %s could not be handled", request.envelope_id)
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))

    async def _on_post(self, kind: str, payload: dict[str, Any]) -> None:
        """One signed request of HTTP mode: recorded when this returns; an ``OSError`` makes a 500."""
        async with self._accepting:
            if not self._open:
                raise OSError("the channel is stopping")  # a 500: Slack sends it again
            try:
                await self._dispatch(kind, payload)
            except OSError:
                raise
            except Exception as exc:  # a bug or a broken state file: say so, do not stall the chat
                self._fail(f"a {kind} request was dropped: {type(exc).__name__}: {exc}")
                log.exception("slack: a %s request could not be handled", kind)

    async def _dispatch(self, kind: str, payload: dict[str, Any]) -> None:
        """A Socket Mode envelope's or an HTTP request's payload, by its kind, to the pipeline."""
        if kind == "events_api":
            await self._event(payload)
        elif kind == "interactive":
            await self._interactive(payload)
        elif kind == "slash_commands":
            slash = slash_to_inbound(payload, self.team)
            if slash is not None:
                await self.pipeline.accept(slash)

    async def _event(self, payload: dict[str, Any]) -> None:
        event = payload.get("event") or {}
        if not is_conversation(event, self.bot_user):
            return
        message = to_inbound(
            event,
            team=str(payload.get("team_id") or self.team),
            bot_user=self.bot_user,
            bot_name=self.bot_name,
            sender_name=await self._name(str(event["user"])),
        )
        await self.pipeline.accept(message)

    async def _interactive(self, payload: dict[str, Any]) -> None:
        press = to_press(payload, self.team)
        if press is not None:
            await self.pipeline.press(press)

    async def _name(self, user: str) -> str:
        """The display name of ``user`` (``users.info``, kept for the process); the id if unknown."""
        if user not in self._names:
            try:
                found = (await self.web.users_info(user=user)).get("user") or {}
            except Exception as exc:  # users:read missing, or Slack busy: the id will do
                log.info("slack: users.info %s failed (%s); using the id", user, send_error(exc, self._clean))
                return user
            profile = found.get("profile") or {}
            name = profile.get("display_name") or profile.get("real_name") or found.get("name") or user
            self._names[user] = str(name)
        return self._names[user]
