"""The Discord driver: discord.py's gateway and REST clients against :mod:`tests.support.discord_server`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from tests.support.channels.base import ADA, Delivery, Feature, Person, Place, Shown, fenced_code_lines
from tests.support.discord_server import (
    APP_ID,
    GUILD,
    GUILD_CHANNEL,
    THREAD,
    TOKEN,
    USER,
    BotMessage,
    FakeDiscord,
    discord_server,
)

if TYPE_CHECKING:
    from shipagent import ShipAgent
    from shipagent.hosts.channels import Channel

__all__ = ["DiscordDriver"]

_DM_CHANNELS = 730_000_000_000_000_100


class DiscordDriver:
    """Discord: a DM channel per person; the group is a guild channel; the thread is that guild's thread."""

    name = "discord"
    requires = "discord"
    limit = 2000
    new_command = "/new"
    lacks: Mapping[Feature, str] = {}

    def __init__(self) -> None:
        self._fake: FakeDiscord | None = None
        self._presses: dict[str, Person] = {}  # interaction id -> who pressed

    @property
    def fake(self) -> FakeDiscord:
        assert self._fake is not None, "the Discord server is not running"
        return self._fake

    @asynccontextmanager
    async def serve(self) -> AsyncIterator[None]:
        async with discord_server() as fake:
            self._fake = fake
            yield

    def ship_json(self, known: Sequence[Person]) -> dict[str, Any]:
        config = {
            "enabled": True,
            "botToken": TOKEN,
            "apiRoot": self.fake.api_root,
            "dmPolicy": "pairing",
            "allowFrom": [self.user_id(p) for p in known],
            "guilds": {"policy": "allowlist", "allow": [GUILD], "requireMention": True},
            "debounceMs": 0,
            "rateLimitPerMinute": 0,
            "streaming": "edit",
        }
        return {"channels": {"discord": config}}

    def channels(self, agent: ShipAgent) -> list[Channel]:
        from shipagent.hosts.channels import channels_from_config

        options = {"edit_interval": 0.05, "guild_ready_timeout": 0.1}
        return channels_from_config(agent, agent.config.channels, discord=options)

    @staticmethod
    def user_id(person: Person) -> int:
        return USER if person == ADA else USER + 100 + person.number

    def _where(self, place: Place) -> tuple[int, int | None]:
        if place.kind == "dm":
            assert place.person is not None
            return _DM_CHANNELS + place.person.number, None
        return (THREAD if place.kind == "thread" else GUILD_CHANNEL), GUILD

    def chat_key(self, place: Place) -> str:
        channel, guild = self._where(place)
        if guild is None:
            return f"discord:dm:{channel}"
        if place.kind == "thread":
            return f"discord:{guild}:{GUILD_CHANNEL}:thread:{channel}"
        return f"discord:{guild}:{channel}"

    def say(self, place: Place, person: Person, text: str, *, mention: bool = False) -> Delivery:
        channel, guild = self._where(place)
        data = self.fake.user_message(
            text,
            channel_id=channel,
            guild_id=guild,
            user_id=self.user_id(person),
            name=person.name,
            mention=mention,
        )
        return Delivery(place, person, text, data)

    def say_file(self, place: Place, person: Person, name: str, data: bytes) -> Delivery:
        """``person`` sends the file ``name`` (a MESSAGE_CREATE with it in ``attachments``; the bot
        downloads it from the attachment's ``url``)."""
        channel, guild = self._where(place)
        message = self.fake.user_message(
            "",
            channel_id=channel,
            guild_id=guild,
            user_id=self.user_id(person),
            name=person.name,
            attachment=(name, data),
        )
        return Delivery(place, person, name, message)

    async def replay(self, delivery: Delivery) -> None:
        """A reconnect (op 7) and RESUME, after which the server sends the message again."""
        message_id = delivery.raw["id"]

        def frames() -> list[dict[str, Any]]:
            return [f for f in self.fake.sent if f["t"] == "MESSAGE_CREATE" and f["d"]["id"] == message_id]

        await self.fake.wait_for(lambda: frames())
        since = self.fake.sent[-1]["s"] - frames()[-1]["s"] + 1  # from it to the last dispatch
        resumed = self.fake.resumed
        await self.fake.reconnect(replay=since)
        await self.fake.wait_for(lambda: self.fake.resumed > resumed and len(frames()) == 2)

    def press(self, place: Place, message: Shown, label: str, person: Person) -> None:
        raw: BotMessage = message.raw
        custom_id = next(b["custom_id"] for b in raw.buttons if label in b["label"])
        _, guild = self._where(place)
        pressed = self.fake.press(
            raw, custom_id, user_id=self.user_id(person), name=person.name, guild_id=guild
        )
        self._presses[pressed] = person

    def shown(self, place: Place, *, with_deleted: bool = False) -> list[Shown]:
        channel, _ = self._where(place)
        return [
            _shown(m)
            for m in self.fake.messages
            if m.channel_id == channel and (with_deleted or not m.deleted)
        ]

    def notices(self, person: Person) -> list[str]:
        found = []
        for interaction, who in self._presses.items():
            if who == person:
                calls = self.fake.called("POST", f"/webhooks/{APP_ID}/itoken-{interaction}")
                found += [c.body.get("content") or "" for c in calls]
        return found

    def code_lines(self, message: Shown) -> list[str]:
        return fenced_code_lines(message.markup)

    async def wait_for(self, condition: Callable[[], Any], within: float = 20.0) -> None:
        await self.fake.wait_for(condition, within)


def _shown(m: BotMessage) -> Shown:
    return Shown(
        id=str(m.id),
        text=m.content,
        markup=m.content,
        versions=tuple(m.versions),
        buttons=tuple(b["label"] for b in m.buttons),
        deleted=m.deleted,
        raw=m,
    )
