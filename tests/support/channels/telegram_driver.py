"""The Telegram driver: PTB polls the local Bot API server (:mod:`tests.support.telegram_server`)."""

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
    pre_code_lines,
)
from tests.support.telegram_server import BOT_USERNAME, TOKEN, BotMessage, FakeTelegram, telegram_server

if TYPE_CHECKING:
    from shipagent import ShipAgent
    from shipagent.hosts.channels import Channel

__all__ = ["TelegramDriver"]

GROUP_ID = -1_000_000_500
TOPIC = 7
_IDS = {ADA: 7, MALLORY: 8, EVE: 99}


class TelegramDriver:
    """Telegram: a DM's chat is the user; the group is a forum supergroup; the thread is a topic."""

    name = "telegram"
    requires = "telegram"
    limit = 4000
    new_command = "/new"
    lacks: Mapping[Feature, str] = {}

    def __init__(self) -> None:
        self._fake: FakeTelegram | None = None
        self._presses: dict[str, Person] = {}  # callback query id -> who pressed

    @property
    def fake(self) -> FakeTelegram:
        assert self._fake is not None, "the Telegram server is not running"
        return self._fake

    @asynccontextmanager
    async def serve(self) -> AsyncIterator[None]:
        async with telegram_server() as fake:
            self._fake = fake
            yield

    def ship_json(self, known: Sequence[Person]) -> dict[str, Any]:
        config = {
            "enabled": True,
            "botToken": TOKEN,
            "apiRoot": self.fake.url,
            "dmPolicy": "pairing",
            "allowFrom": [self.user_id(p) for p in known],
            "groups": {"policy": "allowlist", "allow": [GROUP_ID], "requireMention": True},
            "debounceMs": 0,
            "rateLimitPerMinute": 0,
            "streaming": "edit",
        }
        return {"channels": {"telegram": config}}

    def channels(self, agent: ShipAgent) -> list[Channel]:
        from shipagent.hosts.channels import channels_from_config

        return channels_from_config(
            agent, agent.config.channels, poll_timeout=1.0, watchdog_margin=1.0, edit_interval=0.05
        )

    @staticmethod
    def user_id(person: Person) -> int:
        return _IDS.get(person, 100 + person.number)

    def _where(self, place: Place) -> tuple[int, int | None]:
        if place.kind == "dm":
            assert place.person is not None
            return self.user_id(place.person), None
        return GROUP_ID, TOPIC if place.kind == "thread" else None

    def chat_key(self, place: Place) -> str:
        chat, topic = self._where(place)
        return f"telegram:chat:{chat}" + (f":topic:{topic}" if topic is not None else "")

    def say(self, place: Place, person: Person, text: str, *, mention: bool = False) -> Delivery:
        chat, topic = self._where(place)
        update = self.fake.user_message(
            f"@{BOT_USERNAME} {text}" if mention else text,
            chat_id=chat,
            user_id=self.user_id(person),
            name=person.name,
            chat_type="private" if place.kind == "dm" else "supergroup",
            thread_id=topic,
        )
        return Delivery(place, person, text, update)

    def say_file(self, place: Place, person: Person, name: str, data: bytes) -> Delivery:
        """``person`` sends the file ``name`` (a ``document`` message; the bot fetches it with getFile)."""
        chat, topic = self._where(place)
        update = self.fake.user_message(
            "",
            chat_id=chat,
            user_id=self.user_id(person),
            name=person.name,
            chat_type="private" if place.kind == "dm" else "supergroup",
            thread_id=topic,
            document=(name, data),
        )
        return Delivery(place, person, name, update)

    async def replay(self, delivery: Delivery) -> None:
        self.fake.replay(delivery.raw)
        await self.fake.wait_for(lambda: not self.fake.replays)

    def press(self, place: Place, message: Shown, label: str, person: Person) -> None:
        raw: BotMessage = message.raw
        data = next(b["callback_data"] for b in raw.buttons if label in b["text"])
        update = self.fake.press(raw, data, user_id=self.user_id(person), name=person.name)
        self._presses[update["callback_query"]["id"]] = person

    def shown(self, place: Place, *, with_deleted: bool = False) -> list[Shown]:
        chat, topic = self._where(place)
        return [
            _shown(m)
            for m in self.fake.messages
            if m.chat_id == chat and m.thread_id == topic and (with_deleted or not m.deleted)
        ]

    def notices(self, person: Person) -> list[str]:
        answers = self.fake.called("answerCallbackQuery")
        return [
            c.params["text"]
            for c in answers
            if c.params.get("text") and self._presses.get(c.params.get("callback_query_id", "")) == person
        ]

    def code_lines(self, message: Shown) -> list[str]:
        return pre_code_lines(message.markup)

    async def wait_for(self, condition: Callable[[], Any], within: float = 20.0) -> None:
        await self.fake.wait_for(condition, within)


def _shown(m: BotMessage) -> Shown:
    return Shown(
        id=str(m.message_id),
        text=m.text,
        markup=m.markup if m.parse_mode == "HTML" else m.text,
        versions=tuple(m.versions),
        buttons=tuple(b["text"] for b in m.buttons),
        deleted=m.deleted,
        raw=m,
    )
