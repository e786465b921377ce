"""The Slack drivers: slack-sdk's Socket Mode and Web API clients against :mod:`tests.support.slack_server`,
and the same over the Events API (the server's envelopes POSTed, signed, to the channel's listener)."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import httpx

from tests.support.channels.base import (
    ADA,
    EVE,
    MALLORY,
    Delivery,
    Feature,
    Person,
    Place,
    Shown,
    fenced_code_lines,
)
from tests.support.net import free_port
from tests.support.slack_server import (
    APP_TOKEN,
    BOT_TOKEN,
    TEAM,
    BotMessage,
    Envelope,
    FakeSlack,
    slack_server,
)

if TYPE_CHECKING:
    from shipagent import ShipAgent
    from shipagent.hosts.channels import Channel

__all__ = ["NOW", "SIGNING_SECRET", "SlackDriver", "SlackHttpDriver", "signed"]

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5-test-signing-secret"
NOW = 1_800_000_000
"""The HTTP-mode channel's clock in the tests: requests are signed for this time, not the wall clock."""


def signed(body: bytes, *, timestamp: int = NOW, secret: str = SIGNING_SECRET) -> dict[str, str]:
    """Slack's signing headers for ``body``: ``v0=`` + HMAC-SHA256(secret, ``v0:{ts}:{body}``)."""
    base = f"v0:{timestamp}:".encode() + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": str(timestamp), "X-Slack-Signature": f"v0={digest}"}


def request_of(envelope: Envelope) -> tuple[bytes, str]:
    """The Events API request Slack makes of ``envelope``: its body and content type."""
    if envelope.type == "events_api":
        return json.dumps(envelope.payload).encode(), "application/json"
    form = {"payload": json.dumps(envelope.payload)} if envelope.type == "interactive" else envelope.payload
    return str(httpx.QueryParams(form)).encode(), "application/x-www-form-urlencoded"


CHANNEL = "C0GEN"
THREAD_TS = "1700000000.000100"
_IDS = {ADA: "U7", MALLORY: "U8", EVE: "U99"}  # the users the server knows by name


class SlackDriver:
    """Slack: a DM is an ``im`` channel; the group is a channel; the thread hangs under a message."""

    name = "slack"
    requires = "slack_sdk"
    limit = 3000
    new_command = "!new"
    lacks: Mapping[Feature, str] = {}

    def __init__(self) -> None:
        self._fake: FakeSlack | None = None

    @property
    def fake(self) -> FakeSlack:
        assert self._fake is not None, "the Slack server is not running"
        return self._fake

    @asynccontextmanager
    async def serve(self) -> AsyncIterator[None]:
        async with slack_server() as fake:
            self._fake = fake
            yield

    def ship_json(self, known: Sequence[Person]) -> dict[str, Any]:
        config = {
            "enabled": True,
            "botToken": BOT_TOKEN,
            "appToken": APP_TOKEN,
            "apiRoot": f"{self.fake.url}/api",
            "dmPolicy": "pairing",
            "allowFrom": [self.user_id(p) for p in known],
            "channels": {"policy": "allowlist", "allow": [CHANNEL], "requireMention": True},
            "debounceMs": 0,
            "rateLimitPerMinute": 0,
            "streaming": "edit",
        }
        return {"channels": {"slack": config}}

    def channels(self, agent: ShipAgent) -> list[Channel]:
        from shipagent.hosts.channels.slack import SlackChannel

        state = agent.paths.ship_dir / "channels"
        config = agent.config.channels.slack
        return [SlackChannel(agent, config, state_dir=state, edit_interval=0.05, ping_interval=1.0)]

    @staticmethod
    def user_id(person: Person) -> str:
        return _IDS.get(person, f"U{100 + person.number}")

    def _where(self, place: Place) -> tuple[str, str | None]:
        if place.kind == "dm":
            assert place.person is not None
            return f"D0{place.person.key.upper()}", None
        return CHANNEL, THREAD_TS if place.kind == "thread" else None

    def chat_key(self, place: Place) -> str:
        channel, thread = self._where(place)
        return f"slack:{TEAM}:{channel}" + (f":thread:{thread}" if thread else "")

    def say(self, place: Place, person: Person, text: str, *, mention: bool = False) -> Delivery:
        channel, thread = self._where(place)
        envelope = self.fake.user_message(
            text,
            channel=channel,
            user=self.user_id(person),
            channel_type="im" if place.kind == "dm" else "channel",
            thread_ts=thread,
            mention=mention,
        )
        return Delivery(place, person, text, envelope)

    def say_file(self, place: Place, person: Person, name: str, data: bytes) -> Delivery:
        """``person`` shares the file ``name`` (a ``file_share`` message; the bot downloads its
        ``url_private_download`` with the bot token)."""
        channel, thread = self._where(place)
        envelope = self.fake.user_message(
            "",
            channel=channel,
            user=self.user_id(person),
            channel_type="im" if place.kind == "dm" else "channel",
            thread_ts=thread,
            file=(name, data),
        )
        return Delivery(place, person, name, envelope)

    async def replay(self, delivery: Delivery) -> None:
        """A reconnect Slack asked for, then the envelope again (a new envelope id, ``retry_attempt`` 1)."""
        connections = self.fake.connections
        await self.fake.disconnect()
        await self.fake.wait_for(lambda: self.fake.connections > connections)
        envelope: Envelope = delivery.raw
        again = self.fake.replay(envelope)
        await self.fake.wait_for(lambda: again.acked)

    def press(self, place: Place, message: Shown, label: str, person: Person) -> None:
        raw: BotMessage = message.raw
        value = next(b["value"] for b in raw.buttons if label in b["text"]["text"])
        self.fake.click(raw, value, user=self.user_id(person))

    def shown(self, place: Place, *, with_deleted: bool = False) -> list[Shown]:
        channel, thread = self._where(place)
        return [
            _shown(m)
            for m in self.fake.messages
            if m.channel == channel and m.thread_ts == thread and (with_deleted or not m.deleted)
        ]

    def notices(self, person: Person) -> list[str]:
        return [e["text"] for e in self.fake.ephemeral if e.get("user") == self.user_id(person)]

    def code_lines(self, message: Shown) -> list[str]:
        return fenced_code_lines(message.markup)

    async def wait_for(self, condition: Callable[[], Any], within: float = 20.0) -> None:
        await self.fake.wait_for(condition, within)


def _shown(m: BotMessage) -> Shown:
    return Shown(
        id=m.ts,
        text=m.text,
        markup=m.text,
        versions=tuple(m.versions),
        buttons=tuple(b["text"]["text"] for b in m.buttons),
        deleted=m.deleted,
        raw=m,
    )


class SlackHttpDriver(SlackDriver):
    """Slack in HTTP mode: the server's envelopes go out as signed POSTs to the channel's Request URL.

    A loop posts every envelope not yet answered 200, in order, as Slack does; one that gets
    anything else (or no answer) is sent again with ``X-Slack-Retry-Num``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slack/events"

    @asynccontextmanager
    async def serve(self) -> AsyncIterator[None]:
        async with (
            super().serve(),
            httpx.AsyncClient(timeout=10) as client,
            anyio.create_task_group() as tasks,
        ):
            tasks.start_soon(self._deliver, client)
            yield
            tasks.cancel_scope.cancel()

    async def post(self, client: httpx.AsyncClient, envelope: Envelope, retry: int = 0) -> bool:
        """POST ``envelope`` as Slack would; whether the app answered 200."""
        body, content_type = request_of(envelope)
        headers = {"Content-Type": content_type, **signed(body)}
        if retry:
            headers |= {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_error"}
        try:
            return (await client.post(self.url, content=body, headers=headers)).status_code == 200
        except httpx.TransportError:  # not listening yet
            return False

    async def _deliver(self, client: httpx.AsyncClient) -> None:
        while True:
            for envelope in list(self.fake.envelopes):
                if envelope.acked:
                    continue
                if not await self.post(client, envelope, envelope.retry_attempt):
                    envelope.retry_attempt += 1
                    break  # in order: try this one again first
                envelope.acked = True
            await anyio.sleep(0.02)

    def ship_json(self, known: Sequence[Person]) -> dict[str, Any]:
        config = super().ship_json(known)
        slack = config["channels"]["slack"]
        del slack["appToken"]
        slack |= {"mode": "http", "signingSecret": SIGNING_SECRET, "httpListen": f"127.0.0.1:{self.port}"}
        return config

    def channels(self, agent: ShipAgent) -> list[Channel]:
        from shipagent.hosts.channels.slack import SlackChannel

        state = agent.paths.ship_dir / "channels"
        config = agent.config.channels.slack
        return [SlackChannel(agent, config, state_dir=state, edit_interval=0.05, clock=lambda: float(NOW))]

    async def replay(self, delivery: Delivery) -> None:
        """Slack's retry of a request it already had an answer to (``X-Slack-Retry-Num: 1``)."""
        envelope: Envelope = delivery.raw
        await self.wait_for(lambda: envelope.acked)
        async with httpx.AsyncClient(timeout=10) as client:
            assert await self.post(client, envelope, retry=1)
