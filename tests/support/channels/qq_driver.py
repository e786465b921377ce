"""The QQ driver: the QQ channel's token, gateway and passive replies against :mod:`tests.support.qq_server`.

QQ cannot edit a message, shows no buttons and has no threads: the streaming scenario then checks
the one final message, the approval scenario the refused command and the reply saying so. A QQ
group bot is sent only the group messages that @-mention it, so a message without a mention is
never delivered (:meth:`QQDriver.say` sends nothing for one).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from tests.support.channels.base import Delivery, Feature, Person, Place, Shown
from tests.support.channels.model import CODE_LINES
from tests.support.qq_server import APP_ID, GROUP, SECRET, FakeQQ, Reply, qq_server

if TYPE_CHECKING:
    from shipagent import ShipAgent
    from shipagent.hosts.channels import Channel

__all__ = ["QQDriver"]

_EVENTS = ("C2C_MESSAGE_CREATE", "GROUP_AT_MESSAGE_CREATE")


class QQDriver:
    """QQ: a direct chat is the user's openid; the group is a QQ group (its @-messages only)."""

    name = "qq"
    requires = "websockets"
    limit = 2000
    new_command = "/new"
    lacks: Mapping[Feature, str] = {
        "edits": "QQ cannot edit a message: the answer is sent once, when it is done",
        "buttons": "QQ shows a bot's messages without buttons: a command that needs approval is refused",
        "threads": "QQ groups have no threads",
    }

    def __init__(self) -> None:
        self._fake: FakeQQ | None = None

    @property
    def fake(self) -> FakeQQ:
        assert self._fake is not None, "the QQ server is not running"
        return self._fake

    @asynccontextmanager
    async def serve(self) -> AsyncIterator[None]:
        async with qq_server() as fake:
            self._fake = fake
            yield

    def ship_json(self, known: Sequence[Person]) -> dict[str, Any]:
        config = {
            "enabled": True,
            "appId": APP_ID,
            "clientSecret": SECRET,
            "apiRoot": self.fake.url,
            "tokenUrl": self.fake.token_url,
            "dmPolicy": "pairing",
            "allowFrom": [self.user_id(p) for p in known],
            "groups": {"policy": "allowlist", "allow": [GROUP]},  # only @-messages, always
            "debounceMs": 0,
            "rateLimitPerMinute": 0,
        }
        return {"channels": {"qq": config}}

    def channels(self, agent: ShipAgent) -> list[Channel]:
        from shipagent.hosts.channels.qq import QQChannel

        state = agent.paths.ship_dir / "channels"
        config = agent.config.channels.qq
        channel = QQChannel(
            agent, config, state_dir=state, ready_timeout=10.0, max_backoff=0.2, edit_interval=0.05
        )
        return [channel]

    @staticmethod
    def user_id(person: Person) -> str:
        """The person's openid (QQ gives each bot its own: one per person here, DM and group alike)."""
        return f"{person.key.upper()}{person.number:030X}"

    def _where(self, place: Place) -> tuple[str, str]:
        if place.kind == "dm":
            assert place.person is not None
            return "users", self.user_id(place.person)
        assert place.kind == "group", "QQ has no threads"
        return "groups", GROUP

    def chat_key(self, place: Place) -> str:
        where, target = self._where(place)
        return f"qq:{'c2c' if where == 'users' else 'group'}:{target}"

    def say(self, place: Place, person: Person, text: str, *, mention: bool = False) -> Delivery:
        where, target = self._where(place)
        if where == "users":
            data: dict[str, Any] | None = self.fake.c2c_message(text, user=self.user_id(person))
        elif mention:
            data = self.fake.group_message(text, group=target, member=self.user_id(person))
        else:
            data = None  # QQ sends a group bot nothing that does not @ it
        return Delivery(place, person, text, data)

    def say_file(self, place: Place, person: Person, name: str, data: bytes) -> Delivery:
        """``person`` sends the file ``name`` (a message with it in ``attachments``; the bot downloads
        it from the attachment's ``url``). In the group it is an @-message, the only kind QQ delivers."""
        where, target = self._where(place)
        attachment = (name, data)
        if where == "users":
            message = self.fake.c2c_message("", user=self.user_id(person), attachment=attachment)
        else:
            message = self.fake.group_message(
                "", group=target, member=self.user_id(person), attachment=attachment
            )
        return Delivery(place, person, name, message)

    async def replay(self, delivery: Delivery) -> None:
        """A reconnect (op 7) and RESUME, after which the server sends the message again."""
        assert delivery.raw is not None, "a group message without a mention never reached the bot"
        message_id = delivery.raw["id"]

        def frames() -> list[dict[str, Any]]:
            return [f for f in self.fake.sent if f["t"] in _EVENTS and f["d"]["id"] == message_id]

        await self.fake.wait_for(lambda: frames())
        since = self.fake.sent[-1]["s"] - frames()[-1]["s"] + 1  # from it to the last dispatch
        resumed = self.fake.resumed
        await self.fake.reconnect(replay=since)
        await self.fake.wait_for(lambda: self.fake.resumed > resumed and len(frames()) == 2)

    def press(self, place: Place, message: Shown, label: str, person: Person) -> None:
        raise AssertionError("QQ shows no buttons (the scenario needs 'buttons')")

    def shown(self, place: Place, *, with_deleted: bool = False) -> list[Shown]:
        where, target = self._where(place)
        return [
            _shown(n, r) for n, r in enumerate(self.fake.replies) if (r.where, r.target) == (where, target)
        ]

    def notices(self, person: Person) -> list[str]:
        return []  # QQ has no message for one person alone (and no buttons to refuse)

    def code_lines(self, message: Shown) -> list[str]:
        """The code lines of ``message``: QQ shows plain text, so the channel takes the fences out
        and keeps the code line for line; these are the lines of the scenarios' code found whole
        (a line cut between two pieces, or a fence left in the text, fails the scenario)."""
        assert "```" not in message.text, f"a code fence is left in QQ's plain text: {message.text[-200:]!r}"
        code = set(CODE_LINES)
        return [line.strip() for line in message.text.splitlines() if line.strip() in code]

    async def wait_for(self, condition: Callable[[], Any], within: float = 20.0) -> None:
        await self.fake.wait_for(condition, within)


def _shown(n: int, reply: Reply) -> Shown:
    return Shown(
        id=f"{reply.msg_id}#{reply.msg_seq}#{n}",
        text=reply.content,
        markup=reply.content,
        versions=(reply.content,),
        buttons=(),
        deleted=False,
        raw=reply,
    )
