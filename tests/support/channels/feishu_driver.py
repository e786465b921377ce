"""The Feishu driver: lark-oapi's long connection and REST client against :mod:`tests.support.feishu_server`.

Feishu edits a message by ``PUT`` (at most 20 edits of one), asks an approval on an interactive
card with buttons, and sends an event again after a reconnect when it saw no acknowledgement; a
Feishu group has no threads (a reply to a message stays in the group's one conversation).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from tests.support.channels.base import (
    EVE,
    KNOWN,
    Delivery,
    Feature,
    Person,
    Place,
    Shown,
    fenced_code_lines,
)
from tests.support.feishu_server import (
    APP_ID,
    APP_SECRET,
    GROUP_CHAT,
    BotMessage,
    FakeFeishu,
    buttons_of,
    feishu_server,
)

if TYPE_CHECKING:
    from shipagent import ShipAgent
    from shipagent.hosts.channels import Channel

__all__ = ["FeishuDriver"]


class FeishuDriver:
    """Feishu: a direct chat is its own chat id (``oc_…``) per person; the group is a group chat."""

    name = "feishu"
    requires = "lark_oapi"
    limit = 4000
    new_command = "/new"
    lacks: Mapping[Feature, str] = {
        "threads": "the Feishu channel keeps a group as one conversation (no per-thread chats)",
    }

    def __init__(self) -> None:
        self._fake: FakeFeishu | None = None
        self._presses: dict[str, Person] = {}  # callback event id -> who pressed

    @property
    def fake(self) -> FakeFeishu:
        assert self._fake is not None, "the Feishu server is not running"
        return self._fake

    @asynccontextmanager
    async def serve(self) -> AsyncIterator[None]:
        async with feishu_server() as fake:
            self._fake = fake
            fake.users.update({self.user_id(p): p.name for p in (*KNOWN, EVE)})  # the contact API's names
            yield

    def ship_json(self, known: Sequence[Person]) -> dict[str, Any]:
        config = {
            "enabled": True,
            "appId": APP_ID,
            "appSecret": APP_SECRET,
            "domain": self.fake.url,
            "dmPolicy": "pairing",
            "allowFrom": [self.user_id(p) for p in known],
            "groups": {"policy": "allowlist", "allow": [GROUP_CHAT], "requireMention": True},
            "debounceMs": 0,
            "rateLimitPerMinute": 0,
            "streaming": "edit",
        }
        return {"channels": {"feishu": config}}

    def channels(self, agent: ShipAgent) -> list[Channel]:
        from shipagent.hosts.channels import channels_from_config

        return channels_from_config(agent, agent.config.channels, feishu={"edit_interval": 0.05})

    @staticmethod
    def user_id(person: Person) -> str:
        return f"ou_{person.key}{person.number:020d}"

    def _chat(self, place: Place) -> str:
        if place.kind == "dm":
            assert place.person is not None
            return f"oc_dm_{place.person.key}{place.person.number:014d}"
        assert place.kind == "group", "the Feishu channel has no threads"
        return GROUP_CHAT

    def chat_key(self, place: Place) -> str:
        return f"feishu:chat:{self._chat(place)}"

    def say(self, place: Place, person: Person, text: str, *, mention: bool = False) -> Delivery:
        event = self.fake.user_message(
            text,
            chat_id=self._chat(place),
            group=place.kind != "dm",
            user=self.user_id(person),
            mention=mention,
        )
        return Delivery(place, person, text, event)

    def say_file(self, place: Place, person: Person, name: str, data: bytes) -> Delivery:
        """``person`` sends the file ``name`` (a ``file`` message; Feishu serves it from there)."""
        event = self.fake.user_file(
            data, name=name, chat_id=self._chat(place), group=place.kind != "dm", user=self.user_id(person)
        )
        return Delivery(place, person, name, event)

    async def replay(self, delivery: Delivery) -> None:
        """The long connection drops; once the client is back, Feishu sends the event (and any
        after it) again; returns once the client acknowledged the event's second frame."""
        event_id = delivery.raw["header"]["event_id"]
        await self.fake.wait_for(lambda: self.fake.presses.get(event_id) in self.fake.acked)
        first = self.fake.presses[event_id]
        since = len(self.fake.events) - self.fake.events.index(delivery.raw)
        connections = self.fake.connections
        await self.fake.reconnect(replay=since)
        await self.fake.wait_for(
            lambda: (
                self.fake.connections > connections
                and self.fake.presses[event_id] != first
                and self.fake.presses[event_id] in self.fake.acked
            )
        )

    def press(self, place: Place, message: Shown, label: str, person: Person) -> None:
        raw: BotMessage = message.raw
        data = next(b["value"]["data"] for b in buttons_of(raw) if label in b["text"]["content"])
        self._presses[self.fake.press(raw, data, user=self.user_id(person))] = person

    def shown(self, place: Place, *, with_deleted: bool = False) -> list[Shown]:
        chat = self._chat(place)
        return [
            _shown(m) for m in self.fake.messages if m.chat_id == chat and (with_deleted or not m.deleted)
        ]

    def notices(self, person: Person) -> list[str]:
        found = []
        for event_id, who in self._presses.items():
            answer = self.fake.answer_to(event_id)
            if who == person and answer and answer.get("toast"):
                found.append(str(answer["toast"].get("content") or ""))
        return found

    def code_lines(self, message: Shown) -> list[str]:
        return fenced_code_lines(message.markup)

    async def wait_for(self, condition: Callable[[], Any], within: float = 20.0) -> None:
        await self.fake.wait_for(condition, within)


def _shown(m: BotMessage) -> Shown:
    versions = tuple(BotMessage(m.id, m.chat_id, m.msg_type, v).text for v in m.versions)
    return Shown(
        id=m.id,
        text=m.text,
        markup=m.text,  # the Markdown of the post's ``md`` element (or the card's), as sent
        versions=versions,
        buttons=tuple(b["text"]["content"] for b in buttons_of(m)),
        deleted=m.deleted,
        raw=m,
    )
