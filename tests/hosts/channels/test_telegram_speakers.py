"""Many speakers in one chat: who said each line, what the group said unaddressed, /status, losses.

Against the local Bot API server: a group where two people talk to the bot records each user line
with its sender (and the model reads who said it, in the turn and through ``chat_load_history``);
``groups.historyLimit`` gives the model what the group said since its last reply; ``/status``
counts the chat's compactions and its undelivered answers; an answer that cannot be delivered is
a transcript line that a restarted process still reports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)

from shipagent import Sender, ShipAgent
from shipagent.config import parse_config
from shipagent.errors import ConfigError, ShipAgentError
from tests.hosts.channels._support import running, ship_json
from tests.support.core import last_user_text, make_project, read_jsonl
from tests.support.stream import StreamScript
from tests.support.telegram_server import BOT_USERNAME, telegram_server

pytestmark = pytest.mark.anyio

GROUP = -1001


def _transcript(agent: Any, chat_key: str) -> list[dict[str, Any]]:
    return read_jsonl(agent.paths.transcript(chat_key))


async def test_a_group_with_two_speakers_records_who_said_each_line(tmp_path: Path) -> None:
    def reply(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
        if n == 3:  # "what did Bob say?": look back through the transcript
            return ModelResponse(parts=[ToolCallPart("chat_load_history", {"count": 10}, tool_call_id="h1")])
        return ModelResponse(parts=[TextPart(f"answer {n}")])

    script = StreamScript(reply)
    key = f"telegram:chat:{GROUP}"
    async with (
        telegram_server() as fake,
        running(tmp_path / "p", fake, script.model, groups={"allow": [GROUP]}, debounceMs=0) as (agent, _),
    ):
        fake.user_message(f"@{BOT_USERNAME} hi", chat_id=GROUP, chat_type="supergroup", user_id=7, name="Ada")
        await fake.wait_for(lambda: any(m.text == "answer 1" for m in fake.shown(GROUP)))
        fake.user_message(
            f"@{BOT_USERNAME} lunch at noon", chat_id=GROUP, chat_type="supergroup", user_id=8, name="Bob"
        )
        await fake.wait_for(lambda: any(m.text == "answer 2" for m in fake.shown(GROUP)))
        fake.user_message(
            f"@{BOT_USERNAME} what did Bob say?", chat_id=GROUP, chat_type="supergroup", user_id=7, name="Ada"
        )
        await fake.wait_for(lambda: any(m.text == "answer 4" for m in fake.shown(GROUP)))
        await fake.wait_for(lambda: len(_transcript(agent, key)) == 6)
        fake.user_message("hello in private", chat_id=42, user_id=42, name="Cy")
        await fake.wait_for(lambda: agent.paths.transcript("telegram:chat:42").exists())
        lines = _transcript(agent, key)
        private = _transcript(agent, "telegram:chat:42")
    users = [(line["text"], line.get("sender")) for line in lines if line["role"] == "user"]
    assert users == [
        (f"@{BOT_USERNAME} hi", {"id": "7", "name": "Ada"}),
        (f"@{BOT_USERNAME} lunch at noon", {"id": "8", "name": "Bob"}),
        (f"@{BOT_USERNAME} what did Bob say?", {"id": "7", "name": "Ada"}),
    ]
    # the model read who said each message
    assert [last_user_text(r) for r in script.requests][:3] == [
        f"Ada (id 7): @{BOT_USERNAME} hi",
        f"Bob (id 8): @{BOT_USERNAME} lunch at noon",
        f"Ada (id 7): @{BOT_USERNAME} what did Bob say?",
    ]
    # and chat_load_history shows the speakers of the earlier lines
    assert any(
        isinstance(part, ToolReturnPart) and part.tool_name == "chat_load_history"
        for part in script.requests[3][-1].parts
    )
    loaded = ModelMessagesTypeAdapter.dump_json(script.requests[3]).decode()  # the block is in context
    assert f"user [Bob (id 8)]: @{BOT_USERNAME} lunch at noon" in loaded
    assert f"user [Ada (id 7)]: @{BOT_USERNAME} hi" in loaded
    assert "assistant: answer 1" in loaded
    # a direct message names no sender (the chat key is the person): the line is as it always was
    assert sorted(private[0]) == ["chatKey", "requestId", "role", "text", "ts", "v"]
    assert script.requests[-1] and last_user_text(script.requests[-1]) == "hello in private"


async def test_history_limit_gives_the_next_addressed_turn_what_the_group_said(tmp_path: Path) -> None:
    script = StreamScript()
    key = f"telegram:chat:{GROUP}"
    groups = {"allow": [GROUP], "historyLimit": 2}
    async with (
        telegram_server() as fake,
        running(tmp_path / "p", fake, script.model, groups=groups, debounceMs=0) as (agent, _),
    ):
        for text, user, name in [("lunch at noon?", 8, "Bob"), ("pizza!", 1, "Ann"), ("or sushi", 8, "Bob")]:
            fake.user_message(text, chat_id=GROUP, chat_type="supergroup", user_id=user, name=name)
        fake.user_message(f"@{BOT_USERNAME} what do you think?", chat_id=GROUP, chat_type="supergroup")
        await fake.wait_for(lambda: len(script.requests) == 1 and fake.shown(GROUP))
        fake.user_message(f"@{BOT_USERNAME} and now?", chat_id=GROUP, chat_type="supergroup")
        await fake.wait_for(lambda: len(script.requests) == 2)
        await fake.wait_for(lambda: len(_transcript(agent, key)) == 4)
        lines = _transcript(agent, key)
    first, second = (last_user_text(r) for r in script.requests)
    assert first == (
        "Messages in this group since your last reply (not addressed to you):\n"
        "Ann (id 1): pizza!\n"
        "Bob (id 8): or sushi\n"
        "\n"
        f"Ada (id 7): @{BOT_USERNAME} what do you think?"
    )  # the last two only (historyLimit 2), oldest first, then who asked
    assert second == f"Ada (id 7): @{BOT_USERNAME} and now?"  # given once, then dropped
    # the transcript records what Ada said, not the context the model was given
    assert [line["text"] for line in lines if line["role"] == "user"] == [
        f"@{BOT_USERNAME} what do you think?",
        f"@{BOT_USERNAME} and now?",
    ]


async def test_without_history_limit_unaddressed_messages_reach_nothing(tmp_path: Path) -> None:
    script = StreamScript()
    async with (
        telegram_server() as fake,
        running(tmp_path / "p", fake, script.model, groups={"allow": [GROUP]}) as _,
    ):
        fake.user_message("secret plans", chat_id=GROUP, chat_type="supergroup", user_id=8, name="Bob")
        fake.user_message(f"@{BOT_USERNAME} hi", chat_id=GROUP, chat_type="supergroup")
        await fake.wait_for(lambda: len(script.requests) == 1 and fake.shown(GROUP))
    assert "secret plans" not in json.dumps([last_user_text(r) for r in script.requests])


def test_history_limit_is_validated_like_the_other_keys() -> None:
    def telegram(groups: dict[str, Any]) -> dict[str, Any]:
        return {"channels": {"telegram": {"groups": groups}}}

    assert parse_config(telegram({})).channels.telegram.groups.history_limit == 0
    assert parse_config(telegram({"historyLimit": 20})).channels.telegram.groups.history_limit == 20
    with pytest.raises(ConfigError, match=r"channels\.telegram\.groups\.historyLimit"):
        parse_config(telegram({"historyLimit": -1}))
    with pytest.raises(ConfigError, match=r"channels\.telegram\.groups\.historyLimit"):
        parse_config(telegram({"historyLimit": 1000}))
    with pytest.raises(ConfigError, match=r"historyLimt.*historyLimit"):
        parse_config(telegram({"historyLimt": 5}))


async def test_status_counts_compactions_and_undelivered_answers_across_a_restart(tmp_path: Path) -> None:
    script = StreamScript()
    root = tmp_path / "p"
    async with telegram_server() as fake:
        ship = ship_json(fake, streaming="off")
        ship["context"] = {"chatHistory": {"inMemoryMaxMessages": 4, "compactKeepLastMessages": 2}}
        make_project(root, ship)
        async with running(root, fake, script.model) as (agent, channel):
            for n in range(5):
                fake.user_message(f"message {n}")
                await fake.wait_for(  # answered, and the compaction notice after it sent too
                    lambda n=n: (
                        channel.health.backlog == 0
                        and any(m.text == f"echo: message {n}" for m in fake.shown())
                    )
                )
            fake.fail_next("sendMessage", 403, "Forbidden: bot was blocked by the user")
            fake.user_message("lost one")
            await fake.wait_for(lambda: channel.health.undelivered == 1)
            await fake.wait_for(
                lambda: any(
                    line.get("event") == "undelivered" for line in _transcript(agent, "telegram:chat:42")
                )
            )
            log = read_jsonl(agent.paths.message_log("telegram:chat:42"))
            lines = _transcript(agent, "telegram:chat:42")
        compactions = sum(1 for r in log if r.get("t") == "compaction" and r.get("history"))
        assert compactions >= 2  # the count is a chain, not "there is a summary"
        (lost,) = [line for line in lines if line.get("event") == "undelivered"]
        turn = [line for line in lines if line["role"] == "user" and line["text"] == "lost one"]
        assert lost["role"] == "system" and lost["requestId"] == turn[0]["requestId"]
        assert "Forbidden" in lost["text"]
        # answers kept, history tools skip the loss line: the chat goes on
        async with running(root, fake, script.model) as (_, channel):  # a new process: nothing in memory
            assert channel.health.undelivered == 0
            fake.user_message("/status")
            await fake.wait_for(lambda: fake.shown() and "Compactions" in fake.shown()[-1].text)
            status = fake.shown()[-1].text
    assert f"Compactions since the context was last emptied: {compactions}" in status
    assert "Undelivered: 1 answer(s)" in status
    assert "Last request:" in status and "token" in status


async def test_the_agent_api_takes_a_sender_and_a_preface(tmp_path: Path) -> None:
    script = StreamScript()
    agent = ShipAgent.from_project(make_project(tmp_path / "p"), model=script.model)
    async with agent:
        result = await agent.run(
            "api:room:1", "ship it?", sender=Sender("u-9", "Dee"), preface="Earlier: Eve said no."
        )
        assert result.success
        with pytest.raises(ShipAgentError, match=r"sender must be a shipagent\.Sender"):
            await agent.run("api:room:1", "hi", sender={"id": "1"})  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"Sender\.id"):
            Sender("")
    assert last_user_text(script.requests[0]) == "Earlier: Eve said no.\n\nDee (id u-9): ship it?"
    (user,) = [line for line in _transcript(agent, "api:room:1") if line["role"] == "user"]
    assert (user["text"], user["sender"]) == ("ship it?", {"id": "u-9", "name": "Dee"})
