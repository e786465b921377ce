"""The same scenarios on every channel: each platform's real client library against its local server.

One project per driver (see :mod:`tests.support.channels`) runs for the whole module; each scenario
writes in its own direct chat or counts only what came after it wrote, so they do not depend on
their order. A scenario a platform cannot do is skipped with the reason its driver declares.
"""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator
from itertools import pairwise

import pytest

from shipagent.hosts.channels._cli import pair_code
from tests.support.channels import DRIVERS
from tests.support.channels.base import (
    ADA,
    BEN,
    CAT,
    DAN,
    EVE,
    FAY,
    GROUP,
    GUS,
    MALLORY,
    THREAD,
    Feature,
    Place,
    Shown,
)
from tests.support.channels.harness import Bot, conformance_bot
from tests.support.channels.model import APPROVED_FILE, CODE_LINES, STREAM_ANSWER, user_prompts
from tests.support.core import last_user_text

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # module-wide, so one project per driver serves every scenario


@pytest.fixture(scope="module", params=sorted(DRIVERS))
async def bot(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Bot]:
    driver = DRIVERS[request.param]()
    if importlib.util.find_spec(driver.requires) is None:
        pytest.skip(f"{driver.name}: {driver.requires} is not installed (shipagent[{driver.name}])")
    async with conformance_bot(driver, tmp_path_factory.mktemp(driver.name) / "project") as running:
        yield running


KNOWN_BUGS: dict[tuple[str, str], str] = {}
"""Scenarios an adapter fails today, by (channel, scenario): strict xfail with the reason (a fix
makes the case pass, which fails it until the entry goes)."""


@pytest.fixture(autouse=True)
async def _known_bug(request: pytest.FixtureRequest, bot: Bot) -> AsyncIterator[None]:
    reason = KNOWN_BUGS.get((bot.driver.name, request.function.__name__))
    if reason is not None:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))
    yield
    if reason is not None:  # a question the failed scenario left open would hold the shared
        for message in bot.driver.shown(GROUP):  # project's backlog: its asker denies it
            if message.buttons:
                bot.driver.press(GROUP, message, "Deny", ADA)
        await bot.until(lambda: bot.channel.health.backlog == 0)


def needs(bot: Bot, *features: Feature) -> None:
    """Skip with the driver's reason if its platform lacks one of ``features``."""
    for feature in features:
        if feature in bot.driver.lacks:
            pytest.skip(f"{bot.driver.name} has no {feature}: {bot.driver.lacks[feature]}")


async def test_a_direct_message_is_answered_in_its_chat(bot: Bot) -> None:
    where = Place.dm(BEN)
    bot.driver.say(where, BEN, "hello round trip")
    await bot.answered("hello round trip")
    assert [m.text for m in bot.driver.shown(where)] == ["echo: hello round trip"]
    assert [last_user_text(r) for r in bot.model.saw("round trip")] == ["hello round trip"]
    assert "hello round trip" in bot.transcript(where)


async def test_an_unknown_sender_is_paired_before_anything_reaches_the_model(bot: Bot) -> None:
    needs(bot, "pairing")
    where = Place.dm(EVE)
    bot.driver.say(where, EVE, "let me in pairing-1")
    await bot.until(lambda: bot.driver.shown(where))
    code = bot.driver.shown(where)[0].text.split("shipagent channels pair ")[1].split()[0]
    bot.driver.say(where, EVE, "again pairing-2")
    await bot.until(lambda: len(bot.driver.shown(where)) == 2)
    assert code in bot.driver.shown(where)[1].text  # the same code, not a new one per message
    assert bot.model.saw("pairing-") == []

    assert pair_code(bot.root, code).sender_id  # what `shipagent channels pair CODE` runs
    bot.driver.say(where, EVE, "now pairing-3")
    await bot.answered("pairing-3")
    assert bot.driver.shown(where)[-1].text == "echo: now pairing-3"
    assert [last_user_text(r) for r in bot.model.saw("pairing-")] == ["now pairing-3"]


async def test_a_group_message_is_answered_only_when_it_mentions_the_bot(bot: Bot) -> None:
    needs(bot, "groups")
    before = len(bot.driver.shown(GROUP))
    bot.driver.say(GROUP, MALLORY, "quiet gating chatter")
    bot.driver.say(GROUP, ADA, "loud gating question", mention=True)
    await bot.answered("loud gating question")
    answers = bot.after(GROUP, before)
    assert len(answers) == 1 and "loud gating question" in answers[0].text
    assert bot.model.saw("gating chatter") == []
    assert len(bot.model.saw("loud gating question")) == 1


async def test_a_thread_is_its_own_chat_and_the_reply_goes_into_it(bot: Bot) -> None:
    needs(bot, "groups", "threads")
    before = len(bot.driver.shown(GROUP))
    bot.driver.say(THREAD, ADA, "inside the thread", mention=True)
    await bot.answered("inside the thread")
    await bot.until(
        lambda: bot.driver.shown(THREAD) and "inside the thread" in bot.driver.shown(THREAD)[-1].text
    )
    assert bot.after(GROUP, before) == []  # nothing in the channel itself
    assert bot.driver.chat_key(THREAD) != bot.driver.chat_key(GROUP)
    assert "inside the thread" in bot.transcript(THREAD)
    assert "inside the thread" not in bot.transcript(GROUP)


async def test_streaming_ends_on_exactly_the_answer_in_one_message(bot: Bot) -> None:
    where = Place.dm(CAT)
    bot.driver.say(where, CAT, "#stream please")
    await bot.answered("#stream please")
    (message,) = bot.driver.shown(where, with_deleted=True)  # never a second message, even for a while
    assert message.text == STREAM_ANSWER and not message.deleted
    if "edits" in bot.driver.lacks:  # the one final message instead of a growing one
        assert message.versions == (STREAM_ANSWER,)
    else:
        assert len(message.versions) >= 3  # it grew while the model wrote
        streamed = message.versions[:-1]  # (the last edit may only turn on the formatting)
        assert all(a != b for a, b in pairwise(streamed))  # no streamed edit that changed nothing
        assert all(STREAM_ANSWER.startswith(v.strip()) for v in message.versions)


async def test_a_long_answer_is_split_into_pieces_that_keep_their_code_blocks_whole(bot: Bot) -> None:
    where = Place.dm(DAN)
    bot.driver.say(where, DAN, "#long answer please")
    await bot.answered("#long answer please")
    pieces = bot.driver.shown(where)
    assert len(pieces) >= 3 and all(len(p.text) <= bot.driver.limit for p in pieces)
    code = [line for p in pieces for line in bot.driver.code_lines(p)]  # each piece's blocks closed
    assert code == CODE_LINES * 2  # every code line inside a block, once, in order
    assert "Intro" in pieces[0].text and "Part 1" in " ".join(p.text for p in pieces)


def _question(bot: Bot, before: int) -> Shown | None:
    found = [m for m in bot.after(GROUP, before) if m.buttons]
    return found[-1] if found else None


async def test_an_approval_by_button_is_the_askers_and_refused_to_anyone_else(bot: Bot) -> None:
    needs(bot, "groups")
    approved = bot.root / APPROVED_FILE
    before = len(bot.driver.shown(GROUP))
    bot.driver.say(GROUP, ADA, "#shell clean up", mention=True)
    if "buttons" in bot.driver.lacks:  # no buttons: the command is refused, and the chat is told
        await bot.until(lambda: any(m.text.startswith("finished") for m in bot.after(GROUP, before)))
        assert any("echo ok" in m.text and "Refused" in m.text for m in bot.after(GROUP, before))
        assert not approved.exists()
        return
    await bot.until(lambda: _question(bot, before) is not None)
    question = _question(bot, before)
    assert question is not None and any("Approve" in b for b in question.buttons)

    bot.driver.press(GROUP, question, "Approve", MALLORY)  # not the asker
    await bot.until(lambda: bot.driver.notices(MALLORY))
    assert "Ada" in bot.driver.notices(MALLORY)[-1]  # told whose question it is, and only Mallory
    refreshed = _question(bot, before)
    assert refreshed is not None and refreshed.id == question.id  # still open
    assert not approved.exists()

    bot.driver.press(GROUP, question, "Approve", ADA)
    await bot.until(lambda: any(m.text.startswith("finished") for m in bot.after(GROUP, before)))
    assert approved.read_text() == "ok\n"
    settled = next(m for m in bot.after(GROUP, before) if m.id == question.id)
    assert settled.buttons == () and "Ada" in settled.text


MALLORY_SHOWN_AS = {"qq": "QQ user 000002"}
"""Who the model is told sent Mallory's file, where it is not her name: QQ's message events carry
openids, never names (the channel names a sender by the openid's last six characters)."""


async def test_an_attachment_in_reaches_the_model_as_a_context_file(bot: Bot) -> None:
    where = Place.dm(MALLORY)
    bot.driver.say_file(where, MALLORY, "attached-notes.txt", b"launch at noon\n")
    await bot.answered("attached-notes.txt")
    [said] = [last_user_text(r) for r in bot.model.saw("attached-notes.txt")]
    sender = MALLORY_SHOWN_AS.get(bot.driver.name, MALLORY.name)
    assert f"[{sender} attached " in said and "attached-notes.txt (15 bytes)" in said
    assert 'context_read(id="' in said
    refs = bot.agent.context_files.list(bot.driver.chat_key(where))
    assert [r.name for r in refs if r.kind == "artifact"] == ["attached-notes.txt"]


async def test_an_event_sent_again_is_answered_once(bot: Bot) -> None:
    needs(bot, "replay")
    where = Place.dm(FAY)
    first = bot.driver.say(where, FAY, "replayed once")
    await bot.answered("replayed once")
    await bot.driver.replay(first)
    bot.driver.say(where, FAY, "after the replay")
    await bot.answered("after the replay")
    assert [m.text for m in bot.driver.shown(where)] == ["echo: replayed once", "echo: after the replay"]
    assert len(bot.model.saw("replayed once")) == 1


async def test_new_empties_the_context(bot: Bot) -> None:
    where = Place.dm(GUS)
    bot.driver.say(where, GUS, "context one")
    await bot.answered("context one")
    bot.driver.say(where, GUS, "context two")
    await bot.answered("context two")
    assert user_prompts(bot.model.saw("context two")[0]) == 2  # the chat has a context…
    bot.driver.say(where, GUS, bot.driver.new_command)
    bot.driver.say(where, GUS, "context three")
    await bot.answered("context three")
    assert user_prompts(bot.model.saw("context three")[0]) == 1  # …and /new emptied it
    assert bot.driver.shown(where)[-1].text == "echo: context three"
