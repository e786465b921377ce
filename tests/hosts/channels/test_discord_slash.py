"""The Discord channel's slash commands: registered on start, answered through the text commands'
pipeline (same access rules, same answers), against a local Discord server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from shipagent import ShipAgent
from shipagent.hosts.channels import ChannelHost, channels_from_config
from shipagent.hosts.channels.discord import DiscordChannel
from tests.support.core import make_project
from tests.support.discord_server import (
    APP_ID,
    DM_CHANNEL,
    GUILD,
    GUILD_CHANNEL,
    OTHER_CHANNEL,
    OTHER_GUILD,
    TOKEN,
    FakeDiscord,
    discord_server,
)
from tests.support.stream import StreamScript

pytestmark = pytest.mark.anyio

NAMES = ["new", "status", "stop", "pin", "unpin", "help"]


def ship_json(fake: FakeDiscord, **discord: Any) -> dict[str, Any]:
    return {
        "channels": {
            "discord": {
                "enabled": True,
                "botToken": TOKEN,
                "apiRoot": fake.api_root,
                "dmPolicy": "open",
                "guilds": {"allow": [GUILD]},
                "debounceMs": 0,
                **discord,
            }
        }
    }


@asynccontextmanager
async def running(root: Path, fake: FakeDiscord, model: Any, **discord: Any) -> AsyncIterator[DiscordChannel]:
    make_project(root, ship_json(fake, **discord))
    agent = ShipAgent.from_project(root, model=model)
    options = {"edit_interval": 0.05, "guild_ready_timeout": 0.1}
    channels = channels_from_config(agent, agent.config.channels, discord=options)
    async with agent, ChannelHost(agent, channels) as host:
        channel = host.channels[0]
        assert isinstance(channel, DiscordChannel)
        yield channel


def _texts(fake: FakeDiscord, interaction: str) -> list[str]:
    return [m.content for m in fake.followups.get(interaction, [])]


async def test_the_chat_commands_are_registered_globally_on_start(tmp_path: Path) -> None:
    async with discord_server() as fake, running(tmp_path / "p", fake, StreamScript().model) as channel:
        assert [c["name"] for c in fake.commands] == NAMES
        assert channel.health.details["slash commands"] == " ".join(f"/{n}" for n in NAMES)
    [put] = fake.called("PUT", f"/applications/{APP_ID}/commands")
    sent = {c["name"]: c for c in put.body["items"]}
    assert sent["status"]["description"] == "Model and context use of this chat"
    [fact] = sent["pin"]["options"]
    assert (fact["name"], fact["type"], fact["required"]) == ("fact", 3, True)  # a string, required
    assert [o["name"] for o in sent["unpin"]["options"]] == ["id"] and sent["new"]["options"] == []
    assert all(sorted(c["contexts"]) == [0, 1] for c in sent.values())  # servers and direct messages
    assert fake.guild_commands == {}  # global only: no per-server registration


async def test_with_servers_disabled_the_commands_are_offered_in_direct_messages_only(tmp_path: Path) -> None:
    async with (
        discord_server() as fake,
        running(tmp_path / "p", fake, StreamScript().model, guilds={"policy": "disabled"}),
    ):
        pass
    assert {tuple(c["contexts"]) for c in fake.called("PUT", "/applications/")[0].body["items"]} == {(1,)}


async def test_a_refused_registration_is_reported_and_text_commands_still_work(tmp_path: Path) -> None:
    async with discord_server() as fake:
        fake.refuse_commands = True
        async with running(tmp_path / "p", fake, StreamScript().model) as channel:
            problem = channel.health.details["slash commands"]
            assert problem.startswith("not registered:") and "50001" in problem  # Discord's code
            assert "50001" in (channel.health.last_error or "")
            fake.user_message("/help")
            await fake.wait_for(lambda: fake.shown() and "/status" in fake.shown()[-1].content)
    assert TOKEN not in channel.health.details["slash commands"]


async def test_slash_commands_off_registers_nothing(tmp_path: Path) -> None:
    async with (
        discord_server() as fake,
        running(tmp_path / "p", fake, StreamScript().model, slashCommands=False) as channel,
    ):
        assert "slash commands" not in channel.health.details
    assert fake.called("PUT") == []


async def test_a_status_interaction_is_deferred_then_answered_by_a_followup(tmp_path: Path) -> None:
    script = StreamScript()
    async with discord_server() as fake, running(tmp_path / "p", fake, script.model):
        asked = fake.slash("status", channel_id=GUILD_CHANNEL, guild_id=GUILD)  # no mention needed
        await fake.wait_for(lambda: _texts(fake, asked))
    assert [r["type"] for r in fake.responses[asked]] == [5]  # deferred: "ship is thinking…"
    [answer] = _texts(fake, asked)
    assert answer.startswith("Model: script") and "Idle." in answer
    assert fake.followups[asked][0].flags & 64 == 0  # the whole channel sees it, as a text /status
    assert fake.shown(GUILD_CHANNEL) == [] and script.requests == []  # no channel message, no model


async def test_pin_takes_its_argument_from_the_option(tmp_path: Path) -> None:
    async with discord_server() as fake, running(tmp_path / "p", fake, StreamScript().model):
        pinned = fake.slash("pin", options={"fact": "the deploy is on Fridays"})
        await fake.wait_for(lambda: _texts(fake, pinned))
        status = fake.slash("status")
        await fake.wait_for(lambda: _texts(fake, status))
    assert (
        _texts(fake, pinned)[0].startswith("Pinned ")
        and "the deploy is on Fridays" in _texts(fake, pinned)[0]
    )
    assert "the deploy is on Fridays" in _texts(fake, status)[0]


async def test_a_refused_user_gets_the_refusal_only_they_see_and_nothing_runs(tmp_path: Path) -> None:
    script = StreamScript()
    async with (
        discord_server() as fake,
        running(tmp_path / "p", fake, script.model, dmPolicy="allowlist", allowFrom=[42]),
    ):
        stranger = fake.slash("new", user_id=9, user_name="Mallory")
        elsewhere = fake.slash("status", user_id=42, channel_id=OTHER_CHANNEL, guild_id=OTHER_GUILD)
        await fake.wait_for(lambda: len(fake.responses) == 2)
    for interaction, said in ((stranger, "may not use"), (elsewhere, "does not answer in this server")):
        [response] = fake.responses[interaction]
        assert response["type"] == 4 and response["data"]["flags"] == 64  # a message only they see
        assert said in response["data"]["content"]
        assert interaction not in fake.followups
    assert script.requests == []


async def test_an_unknown_user_is_paired_by_a_slash_command_as_by_a_text_one(tmp_path: Path) -> None:
    async with (
        discord_server() as fake,
        running(tmp_path / "p", fake, StreamScript().model, dmPolicy="pairing"),
    ):
        asked = fake.slash("status", user_id=9, user_name="Mallory")
        await fake.wait_for(lambda: _texts(fake, asked))
    [said] = _texts(fake, asked)
    assert [r["type"] for r in fake.responses[asked]] == [5] and "pair" in said.lower()
    assert "Model:" not in said


async def test_a_new_interaction_starts_a_new_context(tmp_path: Path) -> None:
    script = StreamScript()
    async with discord_server() as fake, running(tmp_path / "p", fake, script.model):
        fake.user_message("remember the word tangerine")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].content.endswith("tangerine"))
        fresh = fake.slash("new", channel_id=DM_CHANNEL)
        await fake.wait_for(lambda: _texts(fake, fresh))
        fake.user_message("what was the word?")
        await fake.wait_for(lambda: len(script.requests) == 2 and fake.shown()[-1].content.endswith("word?"))
    assert _texts(fake, fresh) == ["Started afresh: the model's context is empty."]
    prompts = [
        part.content
        for message in script.requests[-1]
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]
    assert not any("tangerine" in str(p) for p in prompts) and any(
        "what was the word?" in str(p) for p in prompts
    )


async def test_stop_stops_the_answer_being_written_and_says_so_and_says_when_nothing_runs(
    tmp_path: Path,
) -> None:
    long = " ".join(f"word{i}" for i in range(400))
    script = StreamScript(lambda _m, _i, _n: ModelResponse(parts=[TextPart(long)]), delay=0.05)
    async with discord_server() as fake, running(tmp_path / "p", fake, script.model):
        idle = fake.slash("stop")
        await fake.wait_for(lambda: _texts(fake, idle))
        fake.user_message("write a lot")
        await script.started.wait()
        await fake.wait_for(lambda: fake.shown())  # the answer is being streamed
        stop = fake.slash("stop")
        await fake.wait_for(lambda: _texts(fake, stop))
        await fake.wait_for(lambda: "Stopped." in fake.shown()[-1].content)  # the turn was cancelled
    assert _texts(fake, idle) == ["Nothing is running."]
    assert _texts(fake, stop) == ["Stopping the answer being written."]
    assert long not in fake.shown()[-1].content  # cut short
