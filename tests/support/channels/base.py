"""What every channel driver offers the conformance scenarios: one typed protocol, neutral data.

A driver is one platform's test double in neutral terms: it starts the platform's local server,
writes ship.json for the channel, builds the channel with short test timings, injects what users
do (a message in a DM, a group or a thread, with or without a mention; a button press; an event
the platform sends again) and reads what the bot did (the messages it shows, their versions and
buttons, the notices it gave one person). The scenarios in ``tests/hosts/channels/test_conformance.py``
are written once against :class:`ChannelDriver`; a new platform is one more driver.

A platform that cannot do something a scenario needs declares it in :attr:`ChannelDriver.lacks`
with the reason; the scenario is then skipped with that reason, never passed silently.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from shipagent import ShipAgent
    from shipagent.hosts.channels import Channel

__all__ = [
    "ADA",
    "BEN",
    "CAT",
    "DAN",
    "EVE",
    "FAY",
    "GROUP",
    "GUS",
    "KNOWN",
    "MALLORY",
    "THREAD",
    "ChannelDriver",
    "Delivery",
    "Feature",
    "Person",
    "Place",
    "Shown",
    "fenced_code_lines",
    "pre_code_lines",
]

Feature = Literal["edits", "buttons", "groups", "threads", "replay", "pairing"]
"""What a scenario may need of a platform (a driver lists what its platform lacks, and why)."""


@dataclass(frozen=True, slots=True)
class Person:
    """Someone who writes to the bot; each driver maps ``number`` to the platform's user id."""

    key: str
    name: str
    number: int


ADA = Person("ada", "Ada", 1)
"""Asks in the group (and approves her own commands)."""
MALLORY = Person("mallory", "Mallory", 2)
"""Another member of the group: may talk, may not answer Ada's approvals."""
EVE = Person("eve", "Eve", 3)
"""A stranger: her direct messages need pairing first."""
BEN = Person("ben", "Ben", 4)
CAT = Person("cat", "Cat", 5)
DAN = Person("dan", "Dan", 6)
FAY = Person("fay", "Fay", 7)
GUS = Person("gus", "Gus", 8)
KNOWN = (ADA, MALLORY, BEN, CAT, DAN, FAY, GUS)
"""Everyone in ship.json ``allowFrom`` (all but Eve): one direct chat each, so scenarios sharing a
project never share a conversation."""


@dataclass(frozen=True, slots=True)
class Place:
    """Where a message is written: a direct chat with ``person``, the group, or the group's thread."""

    kind: Literal["dm", "group", "thread"]
    person: Person | None = None

    @staticmethod
    def dm(person: Person) -> Place:
        return Place("dm", person)


GROUP = Place("group")
THREAD = Place("thread")


@dataclass(frozen=True, slots=True)
class Shown:
    """A message of the bot as the platform shows it now.

    Attributes:
        id: the platform's message id.
        text: what a user reads.
        markup: the body as the bot last sent it (HTML on Telegram; the same as ``text`` where the
            platform shows the markup characters' source, like Slack's mrkdwn and Discord's Markdown).
        versions: every text it had, oldest first (more than one: it was edited).
        buttons: the labels of the buttons under it now.
        deleted: the bot deleted it.
        raw: the server's own record (what the driver needs to press its buttons).
    """

    id: str
    text: str
    markup: str
    versions: tuple[str, ...]
    buttons: tuple[str, ...]
    deleted: bool
    raw: Any


@dataclass(frozen=True, slots=True)
class Delivery:
    """Something a user did that the server sent to the bot (kept to send it again)."""

    place: Place
    person: Person
    text: str
    raw: Any


class ChannelDriver(Protocol):
    """One platform behind its local server, in the scenarios' terms."""

    name: str
    """The channel's name (``telegram``): the ship.json key and the chat keys' prefix."""
    requires: str
    """The platform library's import name: without it (its extra not installed) the driver is skipped."""
    limit: int
    """The channel's default ``textChunkLimit``: no message of an answer is longer."""
    new_command: str
    """How a user writes ``/new`` on this platform (Slack's client keeps ``/`` for itself: ``!new``)."""
    lacks: Mapping[Feature, str]
    """What this platform cannot do, each with the reason a scenario needing it is skipped."""

    def serve(self) -> AbstractAsyncContextManager[None]:
        """Run the local server for the block (the driver's other methods talk to it)."""
        ...

    def ship_json(self, known: Sequence[Person]) -> dict[str, Any]:
        """ship.json for the conformance project: this channel on, pointed at the server; direct
        messages need pairing except from ``known``; the group allowed, answering mentions only;
        no debounce and no rate limit (scenarios write fast); streaming by edits where it can."""
        ...

    def channels(self, agent: ShipAgent) -> list[Channel]:
        """The channel for ``agent``, built from its ship.json with short test timings."""
        ...

    def chat_key(self, place: Place) -> str:
        """The chat key the channel gives a conversation at ``place``."""
        ...

    def say(self, place: Place, person: Person, text: str, *, mention: bool = False) -> Delivery:
        """``person`` writes ``text`` at ``place`` (``mention``: addressed to the bot as the platform does).

        A platform that never delivers a group message without a mention (QQ's group bots get
        @-messages only) sends nothing for one: the scenario's other half still checks the answer.
        """
        ...

    def say_file(self, place: Place, person: Person, name: str, data: bytes) -> Delivery:
        """``person`` sends the file ``name`` holding ``data`` at ``place``, without text, as the
        platform carries a file to a bot (the bot downloads it from the platform's server)."""
        ...

    async def replay(self, delivery: Delivery) -> None:
        """The platform sends ``delivery`` again (as after a reconnect); returns once it went out."""
        ...

    def press(self, place: Place, message: Shown, label: str, person: Person) -> None:
        """``person`` presses the button of ``message`` whose label contains ``label``."""
        ...

    def shown(self, place: Place, *, with_deleted: bool = False) -> list[Shown]:
        """The bot's messages at ``place``, oldest first (deleted ones too with ``with_deleted``)."""
        ...

    def notices(self, person: Person) -> list[str]:
        """The notices the bot gave ``person`` alone (a refused button press), oldest first."""
        ...

    def code_lines(self, message: Shown) -> list[str]:
        """The lines inside ``message``'s code blocks, stripped; fails if a block is left open."""
        ...

    async def wait_for(self, condition: Callable[[], Any], within: float = 20.0) -> None:
        """Wait until ``condition()`` holds (checked at every change on the server, and often)."""
        ...


def fenced_code_lines(text: str) -> list[str]:
    """The lines between ```` ``` ```` fences (Markdown, mrkdwn); an unclosed fence fails."""
    inside, found = False, []
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif inside:
            found.append(line.strip())
    assert not inside, f"a code block is left open in: {text[-200:]!r}"
    return found


_PRE = re.compile(r"<pre>(.*?)</pre>", re.S)


def pre_code_lines(markup: str) -> list[str]:
    """The lines inside ``<pre>`` blocks of HTML; a ``<pre>`` left open fails."""
    assert markup.count("<pre>") == markup.count("</pre>"), f"a <pre> is left open in: {markup[-200:]!r}"
    found = []
    for block in _PRE.findall(markup):
        inner = html.unescape(re.sub(r"<[^>]+>", "", block))
        found += [line.strip() for line in inner.splitlines() if line.strip()]
    return found
