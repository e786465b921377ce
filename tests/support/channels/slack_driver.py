"""The Slack driver: slack-sdk's Socket Mode and Web API clients against :mod:`tests.support.slack_server`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

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

__all__ = ["SlackDriver"]

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
