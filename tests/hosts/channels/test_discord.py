"""The Discord channel end to end: discord.py talks REST and the gateway to a local Discord server."""

from __future__ import annotations

import json
import logging
import re
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from itertools import pairwise
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from typer.testing import CliRunner

from shipagent import ShipAgent
from shipagent.chatkeys import ShipPaths
from shipagent.config import ConfigError, parse_config
from shipagent.hosts.channels import ChannelHost, channels_from_config
from shipagent.hosts.channels._cli import pair_code
from shipagent.hosts.channels.discord import DiscordChannel, discord_markdown, intents
from shipagent.hosts.cli._app import app
from tests.support.channel_process import (
    held_project,
    kill_while_streaming,
    start_channels,
    stop,
)
from tests.support.core import last_user_text, make_project
from tests.support.discord_server import (
    APP_ID,
    DM_CHANNEL,
    GUILD,
    GUILD_CHANNEL,
    OTHER_CHANNEL,
    OTHER_GUILD,
    THREAD,
    TOKEN,
    BotMessage,
    FakeDiscord,
    discord_server,
)
from tests.support.stream import StreamScript

pytestmark = pytest.mark.anyio


def ship_json(fake: FakeDiscord, **discord: Any) -> dict[str, Any]:
    """A ship.json with Discord on, pointed at ``fake`` (``discord``: more channel keys)."""
    return {
        "channels": {
            "discord": {
                "enabled": True,
                "botToken": TOKEN,
                "apiRoot": fake.api_root,
                "dmPolicy": "open",
                "guilds": {"allow": [GUILD]},
                **discord,
            }
        }
    }


@asynccontextmanager
async def running(
    root: Path, fake: FakeDiscord, model: Any, *, edit_interval: float = 0.05, **discord: Any
) -> AsyncIterator[tuple[ShipAgent, DiscordChannel]]:
    """The agent of a project at ``root`` on Discord for the block."""
    if not (root / "ship.json").exists():
        make_project(root, ship_json(fake, **discord))
    agent = ShipAgent.from_project(root, model=model)
    options = {"edit_interval": edit_interval, "guild_ready_timeout": 0.1}
    channels = channels_from_config(agent, agent.config.channels, discord=options)
    async with agent, ChannelHost(agent, channels) as host:
        channel = host.channels[0]
        assert isinstance(channel, DiscordChannel)
        yield agent, channel


def _says(text: str) -> Any:
    return lambda _m, _i, _n: ModelResponse(parts=[TextPart(text)])


async def test_dm_round_trip_over_the_gateway_with_only_the_intents_it_needs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    script = StreamScript()
    async with discord_server() as fake, running(tmp_path / "p", fake, script.model) as (agent, channel):
        fake.user_message("hello there")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].content == "echo: hello there")
        assert channel.health.connected and channel.health.last_inbound_at is not None
        assert fake.called("GET", "/gateway/bot") and fake.called("GET", "/users/@me")
        identify = next(f for f in fake.frames if f["op"] == 2)
        assert identify["d"]["intents"] == intents().value == (1 << 0) | (1 << 9) | (1 << 12) | (1 << 15)
        assert any(f["op"] == 1 for f in fake.frames)  # heartbeats (each answered with an ACK)
        told = script.requests[-1][-1].instructions or ""  # type: ignore[union-attr]
        assert "This chat is on Discord" in told and "2,000 characters" in told
    assert len(fake.messages) == 1  # one message, edited into the answer: never a duplicate
    versions = fake.messages[0].versions
    assert len(versions) > 1 and len(set(versions)) == len(versions)  # no edit that changed nothing
    sent = fake.called("POST", f"/channels/{DM_CHANNEL}/messages")[0].body
    assert sent["allowed_mentions"]["parse"] == [] and sent["flags"] & 4  # no pings, no embeds
    assert agent.paths.transcript(f"discord:dm:{DM_CHANNEL}").exists()
    assert TOKEN not in caplog.text
    stored = [p for p in (tmp_path / "p" / ".ship").rglob("*") if p.is_file()]
    assert stored and not [p for p in stored if TOKEN.encode() in p.read_bytes()]


async def test_guild_messages_need_a_mention_or_a_reply_and_other_guilds_and_bots_are_ignored(
    tmp_path: Path,
) -> None:
    script = StreamScript()
    async with discord_server() as fake, running(tmp_path / "p", fake, script.model) as (agent, _):
        where = {"channel_id": GUILD_CHANNEL, "guild_id": GUILD}
        fake.user_message("just chatting", **where)
        fake.user_message("hi", mention=True, user_id=8, name="Bob", **where)
        await fake.wait_for(
            lambda: fake.shown(GUILD_CHANNEL) and "hi" in fake.shown(GUILD_CHANNEL)[-1].content
        )
        answer = fake.shown(GUILD_CHANNEL)[-1]
        fake.user_message("and a reply", reply_to=answer, **where)
        await fake.wait_for(lambda: len(fake.shown(GUILD_CHANNEL)) == 2)
        fake.user_message("from a bot", mention=True, bot=True, **where)
        fake.user_message("elsewhere", mention=True, channel_id=OTHER_CHANNEL, guild_id=OTHER_GUILD)
        fake.user_message("/help", **where)  # a command counts as addressed
        await fake.wait_for(lambda: len(fake.shown(GUILD_CHANNEL)) == 3)
        seen = [last_user_text(r) for r in script.requests]
    assert seen == ["Bob (id 8): @ship hi", "Ada (id 800000000000000007): and a reply"]
    assert "/new" in fake.shown(GUILD_CHANNEL)[-1].content
    assert fake.shown(OTHER_CHANNEL) == []
    assert agent.paths.transcript(f"discord:{GUILD}:{GUILD_CHANNEL}").exists()


async def test_a_thread_is_its_own_chat_and_its_replies_go_into_it(tmp_path: Path) -> None:
    script = StreamScript()
    async with (
        discord_server() as fake,
        running(tmp_path / "p", fake, script.model, guilds={"policy": "open", "requireMention": False}) as (
            agent,
            _,
        ),
    ):
        fake.user_message("in the thread", channel_id=THREAD, guild_id=GUILD)
        fake.user_message("in the channel", channel_id=GUILD_CHANNEL, guild_id=GUILD)
        await fake.wait_for(lambda: fake.shown(THREAD) and fake.shown(GUILD_CHANNEL))
        await fake.wait_for(lambda: fake.shown(THREAD)[-1].content.endswith("in the thread"))
        await fake.wait_for(lambda: fake.shown(GUILD_CHANNEL)[-1].content.endswith("in the channel"))
    assert len(fake.shown(THREAD)) == len(fake.shown(GUILD_CHANNEL)) == 1  # each answer where it was asked
    assert agent.paths.transcript(f"discord:{GUILD}:{GUILD_CHANNEL}:thread:{THREAD}").exists()
    assert agent.paths.transcript(f"discord:{GUILD}:{GUILD_CHANNEL}").exists()


async def test_streaming_edits_end_on_the_answer_and_roll_over_before_2000_characters(tmp_path: Path) -> None:
    answer = " ".join(f"token{i:04d}" for i in range(500))  # 4,999 characters
    script = StreamScript(_says(answer), chunk=200, delay=0.01)
    async with discord_server() as fake, running(tmp_path / "p", fake, script.model) as _:
        fake.user_message("go")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].content.endswith("token0499"))
        await fake.wait_for(lambda: " ".join(m.content for m in fake.shown()).split() == answer.split())
    shown = fake.shown()
    assert len(shown) == 3 and all(len(m.content) <= 2000 for m in shown)
    assert any(len(m.versions) > 1 for m in shown)  # it grew by edits while the model wrote
    assert fake.called("PATCH", f"/channels/{DM_CHANNEL}/messages/")


async def test_streaming_edits_at_most_once_a_second_never_duplicate_and_end_formatted(
    tmp_path: Path,
) -> None:
    answer = "The **answer** is " + " ".join(f"word{i}" for i in range(30)) + ".\n\n#### Done"
    script = StreamScript(_says(answer), chunk=8, delay=0.12)  # about 3 s of streaming
    async with discord_server() as fake, running(tmp_path / "p", fake, script.model, edit_interval=1.0) as _:
        fake.user_message("go")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].content == discord_markdown(answer))
    assert len(fake.messages) == 1 and len(fake.messages[0].versions) >= 3  # one message that grew
    assert fake.messages[0].content.endswith("**Done**")  # the final edit is the formatted answer
    writes = [c.at for c in fake.calls if c.method in ("POST", "PATCH") and "/messages" in c.path]
    assert all(later - earlier >= 0.9 for earlier, later in pairwise(writes))
    assert all(a != b for a, b in pairwise(fake.messages[0].versions))  # no edit that changed nothing


async def test_a_long_answer_with_code_blocks_is_split_into_valid_messages(tmp_path: Path) -> None:
    code = "\n".join(f"    total += {i}  # line {i}" for i in range(120))
    answer = "Intro **text**.\n\n" + "\n\n".join(
        f"Part {n}: " + "lorem ipsum " * 40 + f"\n\n```python\n{code}\n```" for n in range(2)
    )
    assert len(answer) > 6000
    script = StreamScript(_says(answer))
    async with discord_server() as fake, running(tmp_path / "p", fake, script.model, streaming="off") as _:
        fake.user_message("go")
        await fake.wait_for(lambda: " ".join(m.content for m in fake.shown()).count("# line 119") == 2)
    shown = fake.shown()
    assert len(shown) >= 4 and all(len(m.content) <= 2000 for m in shown)
    assert fake.called("PATCH", "/channels/") == []  # streaming off: each piece sent once
    assert all(m.content.count("```") % 2 == 0 for m in shown)  # every piece closes its code block
    lines = re.findall(r"# line (\d+)", "\n".join(m.content for m in shown))
    assert lines == [str(i) for i in range(120)] * 2  # every code line, once, in order


async def test_an_approval_by_button_is_the_askers_alone(tmp_path: Path) -> None:
    root = tmp_path / "p"

    def shell(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
        returns = [p for p in getattr(messages[-1], "parts", []) if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f"finished: {str(returns[0].content)[:60]}")])
        return ModelResponse(
            parts=[ToolCallPart("exec_shell", {"command": "echo ok > approved.txt"}, tool_call_id="s1")]
        )

    def question(fake: FakeDiscord) -> BotMessage | None:
        found = [m for m in fake.shown(GUILD_CHANNEL) if m.buttons]
        return found[-1] if found else None

    async with discord_server() as fake, running(root, fake, StreamScript(shell).model) as _:
        fake.user_message("clean up", mention=True, channel_id=GUILD_CHANNEL, guild_id=GUILD, name="Ada")
        await fake.wait_for(lambda: question(fake) is not None)
        asked = question(fake)
        assert asked is not None and "echo ok > approved.txt" in asked.content
        approve = next(b["custom_id"] for b in asked.buttons if "Approve" in b["label"])
        assert [b["style"] for b in asked.buttons] == [3, 4]  # green, red

        other = fake.press(asked, approve, user_id=9, name="Mallory", guild_id=GUILD)
        await fake.wait_for(lambda: fake.called("POST", "/webhooks/"))
        deferred = fake.called("POST", f"/interactions/{other}/itoken-{other}/callback")
        assert [c.body["type"] for c in deferred] == [6]  # answered on arrival: no "interaction failed"
        refusal = fake.called("POST", f"/webhooks/{APP_ID}/itoken-{other}")[0].body
        assert refusal["flags"] == 64 and "Only Ada" in refusal["content"]  # a notice only Mallory sees
        assert asked.buttons  # still open

        fake.press(asked, approve, guild_id=GUILD)
        await fake.wait_for(lambda: fake.shown(GUILD_CHANNEL)[-1].content.startswith("finished"))
        assert asked.content.startswith("✅ Approved by Ada") and asked.buttons == []
    assert (root / "approved.txt").read_text() == "ok\n"


async def test_a_message_replayed_after_a_resume_is_answered_once(tmp_path: Path) -> None:
    script = StreamScript()
    async with discord_server() as fake, running(tmp_path / "p", fake, script.model) as (_, channel):
        first = fake.user_message("only once")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].content == "echo: only once")
        await fake.reconnect(replay=1)  # Discord sends the last MESSAGE_CREATE again after RESUME
        await fake.wait_for(lambda: fake.resumed == 1)
        fake.user_message("after the resume")
        await fake.wait_for(lambda: fake.shown()[-1].content == "echo: after the resume")
        assert channel.health.connected
    assert fake.identified == 1  # resumed, not identified again
    assert [f["d"]["id"] for f in fake.sent if f["t"] == "MESSAGE_CREATE"].count(first["id"]) == 2
    assert [last_user_text(r) for r in script.requests] == ["only once", "after the resume"]
    assert [m.content for m in fake.shown()] == ["echo: only once", "echo: after the resume"]


async def test_an_unknown_dm_sender_is_paired_before_anything_reaches_the_model(tmp_path: Path) -> None:
    script = StreamScript()
    root = tmp_path / "p"
    async with discord_server() as fake, running(root, fake, script.model, dmPolicy="pairing") as _:
        fake.user_message("let me in", name="Eve")
        await fake.wait_for(lambda: fake.shown())
        code = fake.shown()[0].content.split("shipagent channels pair ")[1].split()[0]
        assert script.requests == []
        assert pair_code(root, code).sender_id == str(800_000_000_000_000_007)
        fake.user_message("now?", name="Eve")
        await fake.wait_for(lambda: fake.shown()[-1].content == "echo: now?")
    assert [last_user_text(r) for r in script.requests] == ["now?"]


def _reader(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
    returns = [p for p in getattr(messages[-1], "parts", []) if isinstance(p, ToolReturnPart)]
    if returns:
        content = returns[0].content
        text = content.get("content", "") if isinstance(content, dict) else str(content)
        return ModelResponse(parts=[TextPart(f"the file says: {text.strip()}")])
    said = last_user_text(messages)
    if 'context_read(id="' in said:
        ref = said.split('context_read(id="')[1].split('"')[0]
        return ModelResponse(parts=[ToolCallPart("context_read", {"id": ref}, tool_call_id="r1")])
    return ModelResponse(parts=[TextPart(f"echo: {said}")])


async def test_an_attachment_is_downloaded_and_read_through_context_read(tmp_path: Path) -> None:
    script = StreamScript(_reader)
    async with discord_server() as fake, running(tmp_path / "p", fake, script.model) as (agent, _):
        fake.user_message("what is in it?", attachment=("notes.txt", b"launch at noon\n"))
        # the answer is streamed: wait for the whole of it, not its first edit
        await fake.wait_for(
            lambda: fake.shown() and fake.shown()[-1].content == "the file says: launch at noon"
        )
        assert fake.shown()[-1].content == "the file says: launch at noon"
        said = last_user_text(script.requests[0])
        assert said.startswith("what is in it?\n[Ada attached document notes.txt (15 bytes): context file")
        refs = agent.context_files.list(f"discord:dm:{DM_CHANNEL}")
        assert [r.name for r in refs if r.kind == "artifact"] == ["notes.txt"]
    assert fake.called("GET", "/attachments/")


async def test_an_attachment_over_the_limit_is_refused_without_a_download(tmp_path: Path) -> None:
    script = StreamScript()
    async with (
        discord_server() as fake,
        running(tmp_path / "p", fake, script.model, maxAttachmentBytes=10) as _,
    ):
        fake.user_message("read this", attachment=("big.txt", b"x" * 11))
        await fake.wait_for(lambda: any("over the 10-byte limit" in m.content for m in fake.shown()))
        await fake.wait_for(lambda: fake.shown()[-1].content.startswith("echo:"))
    assert not fake.called("GET", "/attachments/")


def test_ship_json_keys_are_checked_and_the_token_never_shown() -> None:
    with pytest.raises(ConfigError, match=r"channels\.discord\.botTokn.*did you mean 'botToken'"):
        parse_config({"channels": {"discord": {"botTokn": "x"}}})
    with pytest.raises(ConfigError, match="textChunkLimit"):
        parse_config({"channels": {"discord": {"textChunkLimit": 2001}}})
    with pytest.raises(ConfigError, match="DISCORD_BOT_TOKEN"):
        parse_config({"channels": {"discord": {"enabled": True}}})
    with pytest.raises(ConfigError, match="requireMention"):
        parse_config({"channels": {"discord": {"guilds": {"requireMentoin": True}}}})
    config = parse_config(
        {"channels": {"discord": {"enabled": True, "botToken": "${DISCORD_BOT_TOKEN}"}}},
        env={"DISCORD_BOT_TOKEN": "s3cret-value"},
    )
    assert config.channels.discord.bot_token == "s3cret-value"
    assert "s3cret-value" not in repr(config)


def test_discord_markdown_rewrites_only_what_discord_does_not_render() -> None:
    text = "# Title\n#### Deep\n![a cat](https://x/cat.png)\n---\n**bold** `code`\n```\n#### kept\n---\n```"
    assert discord_markdown(text) == (
        "# Title\n**Deep**\n[a cat](https://x/cat.png)\n\n**bold** `code`\n```\n#### kept\n---\n```"
    )
    assert all(len(discord_markdown(t)) <= len(t) for t in (text, "###### x", "- - -", "![](u)"))


async def test_the_host_starts_discord_from_ship_json_alone(tmp_path: Path) -> None:
    async with discord_server() as fake:
        root = make_project(tmp_path / "on", ship_json(fake))
        agent = ShipAgent.from_project(root, model=StreamScript().model)
        async with agent, ChannelHost(agent) as host:
            assert host.health["discord"].connected and host.health["discord"].details["bot"].startswith(
                "ship"
            )
        assert not host.health["discord"].connected


async def test_check_names_the_bot_and_fails_on_a_refused_token_without_printing_it(tmp_path: Path) -> None:
    async with discord_server() as fake:
        (tmp_path / "ship.json").write_text(json.dumps(ship_json(fake)), encoding="utf-8")
        good = await anyio.to_thread.run_sync(
            lambda: CliRunner().invoke(app, ["check", "--offline", "-C", str(tmp_path)])
        )
        ship = ship_json(fake)
        ship["channels"]["discord"]["botToken"] = "wrong-discord-token"
        (tmp_path / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
        bad = await anyio.to_thread.run_sync(
            lambda: CliRunner().invoke(app, ["check", "--offline", "-C", str(tmp_path)])
        )
    assert "discord: ship (id 900000000000000001)" in good.output
    assert "1 allowed guild(s), mention needed" in good.output and TOKEN not in good.output
    assert bad.exit_code == 1 and "did not accept channels.discord.botToken" in bad.output
    assert "wrong-discord-token" not in bad.output


async def test_a_missing_message_content_intent_stops_the_start_with_what_to_turn_on(tmp_path: Path) -> None:
    async with discord_server() as fake:
        fake.refuse_intents = True
        root = make_project(tmp_path / "p", ship_json(fake))
        agent = ShipAgent.from_project(root, model=StreamScript().model)
        (channel,) = channels_from_config(agent, agent.config.channels, discord={"guild_ready_timeout": 0.1})
        assert isinstance(channel, DiscordChannel)
        async with agent:
            with pytest.raises(RuntimeError, match="Message Content Intent"):
                await ChannelHost(agent, [channel]).__aenter__()
    assert channel.health.stopped and not channel.health.connected


async def test_killed_mid_answer_the_message_is_answered_exactly_once_after_a_restart(tmp_path: Path) -> None:
    root, log = held_project(tmp_path)  # the answer stops after its first word until the restart

    def finished() -> list[str]:
        return [m.content for m in fake.shown() if m.content.strip().endswith("and more")]

    async with discord_server() as fake:
        (root / "ship.json").write_text(json.dumps(ship_json(fake)), encoding="utf-8")
        process = start_channels(root, log)
        try:
            await fake.wait_for(lambda: fake.identified == 1, within=60)
            sent = fake.user_message("please")
            partial = await kill_while_streaming(process, root, "discord", fake, lambda m: m.content)
            assert finished() == []

            process = start_channels(root, log)  # a new session: Discord does not send the message again
            await fake.wait_for(lambda: finished(), within=60)
            fake.user_message("please", message_id=int(sent["id"]))  # and if it did, once is enough
            fake.user_message("next")
            await fake.wait_for(lambda: fake.shown() and "done: next" in fake.shown()[-1].content, within=60)
        finally:
            if process.poll() is None:
                await stop(process, signal.SIGTERM)
    assert len(finished()) == 2 and fake.identified == 2, log.read_text()  # "please" once, "next" once
    answer, _ = fake.shown()  # the half-written message became the answer: nothing else is left
    assert answer.id == partial.id and answer.content.startswith("done: please")
    transcript = ShipPaths(root).transcript(f"discord:dm:{DM_CHANNEL}").read_text(encoding="utf-8")
    users = [json.loads(line) for line in transcript.splitlines() if json.loads(line).get("role") == "user"]
    assert len(users) == 2  # the killed turn left nothing; the replayed one and "next"
    assert TOKEN not in log.read_text()


async def test_a_refused_token_fails_the_start_and_leaves_discord_py_as_it_was(tmp_path: Path) -> None:
    import discord
    from discord.gateway import DiscordWebSocket

    before = (discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)
    async with discord_server() as fake:
        ship = ship_json(fake)
        ship["channels"]["discord"]["botToken"] = "wrong-discord-token"
        agent = ShipAgent.from_project(make_project(tmp_path / "p", ship), model=StreamScript().model)
        (channel,) = channels_from_config(agent, agent.config.channels)
        async with agent:
            with pytest.raises(discord.LoginFailure):
                await ChannelHost(agent, [channel]).__aenter__()
    assert "wrong-discord-token" not in (channel.health.last_error or "x wrong-discord-token")
    assert before == (discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)
    assert fake.identified == 0


async def test_chat_send_file_uploads_the_file_with_its_formatted_caption_then_the_answer(
    tmp_path: Path,
) -> None:
    pdf = b"%PDF-1.7\n" + bytes(range(256)) * 8

    def reply(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
        if any(isinstance(p, ToolReturnPart) for p in getattr(messages[-1], "parts", [])):
            return ModelResponse(parts=[TextPart("Here it is.")])
        args = {"path": "reports/q3.pdf", "caption": "#### The Q3 report"}
        return ModelResponse(parts=[ToolCallPart("chat_send_file", args, tool_call_id="f1")])

    async with discord_server() as fake:
        root = make_project(tmp_path / "p", ship_json(fake))
        (root / "reports").mkdir()
        (root / "reports" / "q3.pdf").write_bytes(pdf)
        script = StreamScript(reply)
        async with running(root, fake, script.model):
            fake.user_message("send me the report")
            await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].content == "Here it is.")
        told = script.requests[0][-1].instructions or ""  # type: ignore[union-attr]
    assert "`chat_send_file`" in told
    upload, answer = fake.shown()
    assert upload.files == [("q3.pdf", pdf)] and upload.content == "**The Q3 report**"
    assert upload.flags & 4 and answer.files == []
