"""Who reaches the model through Telegram: pairing, groups and mentions, topics, bots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shipagent.hosts.channels._cli import pair_code
from shipagent.hosts.cli._app import app
from tests.hosts.channels._support import running
from tests.support.core import last_user_text
from tests.support.stream import StreamScript
from tests.support.telegram_server import BOT_USERNAME, telegram_server

pytestmark = pytest.mark.anyio


async def test_pairing_unknown_sender_gets_a_code_nothing_reaches_the_model_until_paired(
    tmp_path: Path,
) -> None:
    script = StreamScript()
    root = tmp_path / "p"
    async with telegram_server() as fake, running(root, fake, script.model, dmPolicy="pairing") as _:
        fake.user_message("let me in", user_id=99, name="Eve")
        await fake.wait_for(lambda: fake.shown())
        reply = fake.shown()[0].text
        code = reply.split("shipagent channels pair ")[1].split()[0]
        fake.user_message("again?", user_id=99, name="Eve")
        await fake.wait_for(lambda: len(fake.shown()) == 2)
        assert code in fake.shown()[1].text  # the same code, not a new one per message
        assert script.requests == []

        listed = CliRunner().invoke(app, ["channels", "pending", "-C", str(root)])
        assert listed.exit_code == 0 and code in listed.output and "Eve" in listed.output
        assert (
            "telegram"
            in json.loads((root / ".ship/channels/pairing.json").read_text())["pending"][code]["channel"]
        )

        assert pair_code(root, code).sender_id == "99"  # what `shipagent channels pair CODE` runs
        fake.user_message("now?", user_id=99, name="Eve")
        await fake.wait_for(lambda: fake.shown()[-1].text == "echo: now?")
        assert [last_user_text(r) for r in script.requests] == ["now?"]

    again = CliRunner().invoke(app, ["channels", "pair", code, "-C", str(root)])
    assert again.exit_code == 2 and "already used" in again.output  # single use


async def test_allowlist_ignores_strangers_and_answers_allow_from(tmp_path: Path) -> None:
    script = StreamScript()
    async with (
        telegram_server() as fake,
        running(tmp_path / "p", fake, script.model, dmPolicy="allowlist", allowFrom=[5]) as _,
    ):
        fake.user_message("stranger", user_id=6, chat_id=6)
        fake.user_message("friend", user_id=5, chat_id=5)
        await fake.wait_for(lambda: fake.shown(5) and fake.shown(5)[-1].text == "echo: friend")
        assert fake.shown(6) == []
        assert [last_user_text(r) for r in script.requests] == ["friend"]


async def test_group_needs_a_mention_or_a_reply_to_the_bot_and_ignores_bots(tmp_path: Path) -> None:
    script = StreamScript()
    group = -1001
    async with (
        telegram_server() as fake,
        running(tmp_path / "p", fake, script.model, groups={"allow": [group]}) as _,
    ):
        fake.user_message("just chatting", chat_id=group, chat_type="supergroup")
        fake.user_message(f"@{BOT_USERNAME} hi", chat_id=group, chat_type="supergroup", user_id=8, name="Bob")
        await fake.wait_for(lambda: fake.shown(group) and fake.shown(group)[-1].text.startswith("echo:"))
        answer = fake.shown(group)[-1]
        fake.user_message("and a reply", chat_id=group, chat_type="supergroup", reply_to=answer)
        await fake.wait_for(
            lambda: len(fake.shown(group)) == 2 and "and a reply" in fake.shown(group)[-1].text
        )
        fake.user_message(f"@{BOT_USERNAME} from a bot", chat_id=group, chat_type="supergroup", is_bot=True)
        fake.user_message(f"@{BOT_USERNAME} elsewhere", chat_id=-2002, chat_type="supergroup")  # not allowed
        fake.user_message("/help", chat_id=group, chat_type="supergroup")  # a command counts
        await fake.wait_for(lambda: len(fake.shown(group)) == 3)
        seen = [last_user_text(r) for r in script.requests]
    assert seen == [f"Bob (id 8): @{BOT_USERNAME} hi", "Ada (id 7): and a reply"]  # who said it
    assert "/new" in fake.shown(group)[-1].text
    assert fake.shown(-2002) == []


async def test_open_groups_without_require_mention_answer_everything(tmp_path: Path) -> None:
    script = StreamScript()
    async with (
        telegram_server() as fake,
        running(tmp_path / "p", fake, script.model, groups={"policy": "open", "requireMention": False}) as _,
    ):
        fake.user_message("no mention", chat_id=-77, chat_type="group")
        await fake.wait_for(lambda: fake.shown(-77) and fake.shown(-77)[-1].text.endswith("no mention"))


async def test_a_forum_topic_is_its_own_chat_and_replies_go_into_it(tmp_path: Path) -> None:
    script = StreamScript()
    group = -1009
    async with (
        telegram_server() as fake,
        running(tmp_path / "p", fake, script.model, groups={"policy": "open", "requireMention": False}) as (
            agent,
            _,
        ),
    ):
        fake.user_message("in topic 7", chat_id=group, chat_type="supergroup", thread_id=7)
        fake.user_message("in topic 9", chat_id=group, chat_type="supergroup", thread_id=9)
        await fake.wait_for(
            lambda: len([m for m in fake.shown(group) if m.text.endswith(("topic 7", "topic 9"))]) == 2
        )
        by_thread = {m.thread_id: m.text for m in fake.shown(group)}
        assert by_thread == {7: "echo: Ada (id 7): in topic 7", 9: "echo: Ada (id 7): in topic 9"}
        assert all(c.params.get("message_thread_id") in (7, 9) for c in fake.called("sendMessage"))
        for key in ("telegram:chat:-1009:topic:7", "telegram:chat:-1009:topic:9"):
            assert agent.paths.transcript(key).exists()
        assert not agent.paths.transcript("telegram:chat:-1009").exists()


async def test_a_broken_pairing_file_is_reported_and_the_channel_keeps_running(tmp_path: Path) -> None:
    script = StreamScript()
    root = tmp_path / "p"
    async with (
        telegram_server() as fake,
        running(root, fake, script.model, dmPolicy="pairing") as (_, channel),
    ):
        state = root / ".ship" / "channels" / "pairing.json"
        state.parent.mkdir(parents=True, exist_ok=True)
        state.write_text("{not json", encoding="utf-8")
        fake.user_message("hello", user_id=99)
        await fake.wait_for(lambda: "pairing.json" in (channel.health.last_error or ""))
        state.unlink()
        fake.user_message("hello again", user_id=99)
        await fake.wait_for(lambda: fake.shown() and "shipagent channels pair" in fake.shown()[-1].text)
    assert script.requests == []
