"""The Slack channel end to end: slack-sdk talks HTTP and Socket Mode to a local Slack server.

The Web API client and the Socket Mode client are slack-sdk's own, pointed at the server with
``apiRoot``; the server hands out its own ``ws://`` URL, sends envelopes and records the acks.
The model is scripted.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from typer.testing import CliRunner

from shipagent import ShipAgent
from shipagent.config import parse_config
from shipagent.errors import ConfigError
from shipagent.hosts.channels import ChannelHost, split_markdown
from shipagent.hosts.channels._cli import pair_code
from shipagent.hosts.channels.slack import SlackChannel, chat_key_of, markdown_to_mrkdwn
from shipagent.hosts.channels.slack._wire import clean_text, is_conversation, to_inbound
from shipagent.hosts.cli._app import app
from tests.support.core import last_user_text, make_project
from tests.support.slack_server import (
    APP_TOKEN,
    BOT_TOKEN,
    BOT_USER,
    TEAM,
    BotMessage,
    FakeSlack,
    slack_server,
)
from tests.support.stream import StreamScript

pytestmark = pytest.mark.anyio


def ship_json(fake: FakeSlack, **slack: Any) -> dict[str, Any]:
    """A ship.json with Slack on, pointed at ``fake`` (``slack``: more channel keys)."""
    return {
        "channels": {
            "slack": {
                "enabled": True,
                "botToken": BOT_TOKEN,
                "appToken": APP_TOKEN,
                "apiRoot": f"{fake.url}/api",
                "dmPolicy": "open",
                **slack,
            }
        }
    }


@asynccontextmanager
async def running(
    root: Path, fake: FakeSlack, model: Any, *, edit_interval: float = 0.05, **slack: Any
) -> AsyncIterator[tuple[ShipAgent, SlackChannel]]:
    """The agent of a project at ``root`` on Slack for the block."""
    make_project(root, ship_json(fake, **slack))
    agent = ShipAgent.from_project(root, model=model)
    channel = SlackChannel(
        agent,
        agent.config.channels.slack,
        state_dir=agent.paths.ship_dir / "channels",
        edit_interval=edit_interval,
        ping_interval=1.0,
    )
    async with agent, ChannelHost(agent, [channel]):
        yield agent, channel


async def test_dm_round_trip_acks_the_envelope_and_never_logs_a_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    script = StreamScript()
    async with slack_server() as fake, running(tmp_path / "p", fake, script.model) as (agent, channel):
        envelope = fake.user_message("hello there")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == "echo: hello there")
        assert envelope.acked
        assert channel.health.connected and channel.health.details["bot"] == "@ship"
    assert len(fake.shown()) == 1  # one message, updated into the answer: never a duplicate
    assert agent.paths.transcript(f"slack:{TEAM}:D0DM").exists()
    assert [last_user_text(r) for r in script.requests] == ["hello there"]
    told = script.requests[-1][-1].instructions or ""  # type: ignore[union-attr]
    assert "This chat is on Slack" in told and "3,000 characters" in told
    assert fake.called("auth.test") and fake.called("apps.connections.open")
    assert BOT_TOKEN not in caplog.text and APP_TOKEN not in caplog.text


def _says(text: str) -> Any:
    return lambda _m, _i, _n: ModelResponse(parts=[TextPart(text)])


def test_the_slack_config_validates_like_the_rest_of_ship_json() -> None:
    with pytest.raises(ConfigError, match=r"channels\.slack\.apToken.*appToken"):
        parse_config({"channels": {"slack": {"apToken": "x"}}})
    with pytest.raises(ConfigError, match=r"channels\.slack\.channels\.requireMentoin.*requireMention"):
        parse_config({"channels": {"slack": {"channels": {"requireMentoin": False}}}})
    with pytest.raises(ConfigError, match="appToken is required"):
        parse_config({"channels": {"slack": {"enabled": True, "botToken": "xoxb-1"}}})
    with pytest.raises(ConfigError, match=r"channels\.slack\.botToken") as refused:
        parse_config({"channels": {"slack": {"botToken": "xapp-secret-in-the-wrong-key"}}})
    assert "secret-in-the-wrong-key" not in str(refused.value)
    config = parse_config(
        {"channels": {"slack": {"enabled": True, "botToken": "${B}", "appToken": "${A}"}}},
        env={"B": "xoxb-bot-secret", "A": "xapp-app-secret"},
    )
    slack = config.channels.slack
    assert slack.bot_token == "xoxb-bot-secret" and slack.app_token == "xapp-app-secret"
    assert slack.dm_policy == "pairing" and slack.channels.policy == "allowlist"
    assert slack.channels.require_mention and slack.text_chunk_limit == 3000
    assert "secret" not in repr(config)


def test_markdown_becomes_mrkdwn_and_code_is_kept() -> None:
    source = (
        "# Plan\n"
        "Some **bold**, *italics*, ~~gone~~ and a [link](https://example.com/?a=1&b=2).\n"
        "- first <item>\n"
        "> quoted\n"
        "Inline `a < b **not bold**` stays.\n"
        "```python\nif a < b and x**2:\n    print('*no*')\n```\n"
        "after"
    )
    assert markdown_to_mrkdwn(source) == (
        "*Plan*\n"
        "Some *bold*, _italics_, ~gone~ and a <https://example.com/?a=1&amp;b=2|link>.\n"
        "• first &lt;item&gt;\n"
        "> quoted\n"
        "Inline `a &lt; b **not bold**` stays.\n"
        "```\nif a &lt; b and x**2:\n    print('*no*')\n```\n"
        "after"
    )


def test_slack_markup_in_a_user_message_is_undone_and_edits_are_not_messages() -> None:
    text = "<@U0SHIPBOT> look at <https://example.com|this> &amp; ask <@U8|mallory> about <@U0SHIPBOT>"
    assert clean_text(text, "U0SHIPBOT", "ship") == (
        "look at this (https://example.com) & ask @mallory about @ship"
    )
    assert clean_text("<@U0SHIPBOT> !new", "U0SHIPBOT", "ship") == "/new"
    assert clean_text("!nonsense", "U0SHIPBOT", "ship") == "!nonsense"
    base = {"type": "message", "channel": "C1", "user": "U7", "ts": "1.2", "text": "hi"}
    assert is_conversation(base, "U0SHIPBOT")
    assert not is_conversation({**base, "subtype": "message_changed"}, "U0SHIPBOT")
    assert not is_conversation({**base, "user": "U0SHIPBOT"}, "U0SHIPBOT")  # its own message
    assert not is_conversation({**base, "subtype": "bot_message"}, "U0SHIPBOT")


async def test_a_channel_message_needs_a_mention_and_is_answered_once(tmp_path: Path) -> None:
    script = StreamScript()
    async with (
        slack_server() as fake,
        running(tmp_path / "p", fake, script.model, channels={"allow": ["C0GEN"]}) as _,
    ):
        quiet = fake.user_message("just chatting", channel="C0GEN", channel_type="channel")
        fake.user_message("from a bot", channel="C0GEN", channel_type="channel", mention=True, bot_id="B9")
        fake.user_message("hi", channel="C0GEN", channel_type="channel", mention=True, user="U8")
        fake.user_message("hi there", channel="C0OTHER", channel_type="channel", mention=True)
        await fake.wait_for(lambda: fake.shown("C0GEN") and fake.shown("C0GEN")[-1].text.startswith("echo:"))
        await fake.wait_for(lambda: all(e.acked for e in fake.envelopes))
        assert quiet.acked  # an ignored message is acknowledged too: Slack must not resend it
    assert [m.text for m in fake.shown("C0GEN")] == ["echo: Mallory (id U8): hi"]
    assert fake.shown("C0OTHER") == []  # not in channels.allow
    assert [last_user_text(r) for r in script.requests] == ["Mallory (id U8): hi"]  # once, not per event
    assert len(fake.envelopes) == 7  # the mentions came twice each: message + app_mention


async def test_a_thread_is_its_own_conversation_and_the_reply_stays_in_it(tmp_path: Path) -> None:
    script = StreamScript()
    root = tmp_path / "p"
    async with (
        slack_server() as fake,
        running(root, fake, script.model, channels={"policy": "open"}) as (agent, _),
    ):
        fake.user_message("top level", channel="C0GEN", channel_type="channel", mention=True)
        await fake.wait_for(lambda: fake.shown("C0GEN"))
        parent = "1700000000.000100"
        fake.user_message(
            "in the thread", channel="C0GEN", channel_type="channel", mention=True, thread_ts=parent
        )
        await fake.wait_for(lambda: fake.shown("C0GEN", parent))
        await fake.wait_for(lambda: fake.shown("C0GEN", parent)[-1].text.endswith("in the thread"))
        fake.user_message("not to the bot", channel="C0GEN", channel_type="channel", thread_ts=parent)
        answer = fake.shown("C0GEN")[0]  # a reply in a thread under the bot's message needs no mention
        fake.user_message(
            "more", channel="C0GEN", channel_type="channel", thread_ts=answer.ts, parent_user=BOT_USER
        )
        await fake.wait_for(lambda: fake.shown("C0GEN", answer.ts))
        await fake.wait_for(lambda: fake.shown("C0GEN", answer.ts)[-1].text == "echo: Ada (id U7): more")
    assert [m.text for m in fake.shown("C0GEN")] == ["echo: Ada (id U7): top level"]
    assert agent.paths.transcript(f"slack:{TEAM}:C0GEN").exists()
    assert agent.paths.transcript(f"slack:{TEAM}:C0GEN:thread:{parent}").exists()
    assert chat_key_of(TEAM, "C0GEN", parent) == f"slack:{TEAM}:C0GEN:thread:{parent}"
    posts = fake.called("chat.postMessage")
    assert [p.params.get("thread_ts") for p in posts] == [None, parent, answer.ts]
    assert [m.text for m in fake.shown("C0GEN", parent)] == ["echo: Ada (id U7): in the thread"]


async def test_the_answer_streams_by_chat_update_and_ends_on_the_full_answer(tmp_path: Path) -> None:
    answer = "The **answer** is " + " ".join(f"word{i}" for i in range(30)) + "."
    script = StreamScript(_says(answer), chunk=8, delay=0.12)  # about 3 s of streaming
    async with slack_server() as fake, running(tmp_path / "p", fake, script.model, edit_interval=0.5) as _:
        fake.user_message("go")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == markdown_to_mrkdwn(answer))
    assert len(fake.messages) == 1  # one message for the whole answer: never a duplicate
    message = fake.messages[0]
    assert len(message.versions) >= 3  # it grew while the model wrote
    ops = [c.at for c in fake.calls if c.method in ("chat.postMessage", "chat.update")]
    assert all(later - earlier >= 0.45 for earlier, later in pairwise(ops))
    assert len(fake.called("chat.update")) == len(message.versions) - 1
    assert all(a != b for a, b in pairwise(message.versions))
    assert any("The **answer** is" in v for v in message.versions[:-1])  # the stream: the text as written…
    assert message.text.startswith("The *answer*")  # …the final message is mrkdwn


async def test_a_long_answer_is_split_into_pieces_with_whole_code_blocks(tmp_path: Path) -> None:
    block = "```python\n" + "\n".join(f"print({i})  # line {i}" for i in range(40)) + "\n```"
    answer = "\n\n".join(f"Part {n}: " + "text " * 170 + "\n" + block for n in range(6))
    assert len(answer) > 10_000
    script = StreamScript(_says(answer), chunk=500)
    async with slack_server() as fake, running(tmp_path / "p", fake, script.model, streaming="off") as _:
        fake.user_message("long please")
        pieces = split_markdown(answer, 3000)
        await fake.wait_for(lambda: len(fake.shown()) == len(pieces))
    shown = [m.text for m in fake.shown()]
    assert shown == [markdown_to_mrkdwn(p) for p in pieces] and len(shown) >= 4
    assert all(len(p) <= 3000 for p in pieces)
    assert all(text.count("```") % 2 == 0 for text in shown)  # every code block opens and closes
    assert len(fake.called("chat.update")) == 0  # streaming off: sent once, when done


def _shell(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
    returns = [p for p in getattr(messages[-1], "parts", []) if isinstance(p, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart(f"finished: {str(returns[0].content)[:60]}")])
    return ModelResponse(
        parts=[ToolCallPart("exec_shell", {"command": "echo ok > approved.txt"}, tool_call_id="s1")]
    )


def _question(fake: FakeSlack) -> BotMessage | None:
    found = [m for m in fake.shown("C0GEN") if m.buttons]
    return found[-1] if found else None


async def test_an_approval_by_button_from_the_asker_or_an_admin_and_nobody_else(tmp_path: Path) -> None:
    root = tmp_path / "p"
    async with (
        slack_server() as fake,
        running(
            root,
            fake,
            StreamScript(_shell).model,
            channels={"policy": "open", "requireMention": False},
            admins=["U9"],
        ) as _,
    ):
        fake.user_message("clean up", channel="C0GEN", channel_type="channel", user="U7")
        await fake.wait_for(lambda: _question(fake) is not None)
        question = _question(fake)
        assert question is not None and "echo ok &gt; approved.txt" in question.text
        values = {b["text"]["text"]: b["value"] for b in question.buttons}
        approve = next(v for k, v in values.items() if "Approve" in k)
        deny = next(v for k, v in values.items() if "Deny" in k)

        fake.click(question, approve, user="U8")  # not the asker, not an admin
        await fake.wait_for(lambda: fake.ephemeral)
        assert fake.ephemeral[0]["user"] == "U8" and "Only Ada" in fake.ephemeral[0]["text"]
        assert question.buttons  # still open

        fake.click(question, deny, user="U7")
        await fake.wait_for(lambda: fake.shown("C0GEN")[-1].text.startswith("finished"))
        assert question.text.startswith("❌ Denied by Ada") and question.buttons == []
        assert not (root / "approved.txt").exists()

        fake.user_message("again", channel="C0GEN", channel_type="channel", user="U7")
        await fake.wait_for(lambda: _question(fake) is not None)
        second = _question(fake)
        assert second is not None
        approve = next(b["value"] for b in second.buttons if "Approve" in b["text"]["text"])
        fake.click(second, approve, user="U9")  # an admin may answer
        await fake.wait_for(lambda: second.text.startswith("✅ Approved by Admin"))
        await fake.wait_for(lambda: fake.shown("C0GEN")[-1].text.startswith("finished"))
        await fake.wait_for(lambda: all(e.acked for e in fake.envelopes))
    assert (root / "approved.txt").read_text() == "ok\n"


async def test_an_event_replayed_after_a_reconnect_is_answered_once(tmp_path: Path) -> None:
    script = StreamScript()
    async with slack_server() as fake, running(tmp_path / "p", fake, script.model) as (_, channel):
        first = fake.user_message("only once")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == "echo: only once")
        await fake.disconnect()  # Slack asks for a reconnect: a new URL, a new socket
        await fake.wait_for(lambda: fake.connections == 2 and channel.hellos == 2)
        again = fake.replay(first)  # …and sends the event again after it
        await fake.wait_for(lambda: again.acked)
        fake.user_message("then this")
        await fake.wait_for(lambda: fake.shown()[-1].text == "echo: then this")
        assert channel.health.restarts == 1 and channel.health.connected
    assert again.retry_attempt == 1 and first.acked
    assert len(fake.called("apps.connections.open")) == 2
    assert [m.text for m in fake.shown()] == ["echo: only once", "echo: then this"]
    assert [last_user_text(r) for r in script.requests] == ["only once", "then this"]


async def test_a_dropped_connection_is_reopened_and_what_came_meanwhile_is_answered(tmp_path: Path) -> None:
    script = StreamScript()
    async with slack_server() as fake, running(tmp_path / "p", fake, script.model) as (_, channel):
        await fake.wait_for(lambda: channel.hellos == 1)
        await fake.drop()  # no disconnect notice: the socket just closes
        waiting = fake.user_message("sent while it was away")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == "echo: sent while it was away")
        assert waiting.acked and fake.connections == 2 and channel.health.restarts == 1
    assert len(fake.called("apps.connections.open")) == 2  # a fresh URL for the new socket


async def test_an_unknown_dm_sender_gets_a_pairing_code_and_nothing_reaches_the_model(tmp_path: Path) -> None:
    script = StreamScript()
    root = tmp_path / "p"
    async with slack_server() as fake, running(root, fake, script.model, dmPolicy="pairing") as _:
        fake.user_message("let me in", user="U99", channel="D0EVE")
        await fake.wait_for(lambda: fake.shown("D0EVE"))
        code = fake.shown("D0EVE")[0].text.split("shipagent channels pair ")[1].split()[0]
        assert script.requests == []
        assert pair_code(root, code).sender_id == "U99"  # what `shipagent channels pair CODE` runs
        fake.user_message("now?", user="U99", channel="D0EVE")
        await fake.wait_for(lambda: fake.shown("D0EVE")[-1].text == "echo: now?")
    assert [last_user_text(r) for r in script.requests] == ["now?"]


def _reader(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
    returns = [p for p in getattr(messages[-1], "parts", []) if isinstance(p, ToolReturnPart)]
    if returns:
        content = returns[0].content
        text = content.get("content", "") if isinstance(content, dict) else str(content)
        return ModelResponse(parts=[TextPart(f"the file says: {text.strip()}")])
    said = last_user_text(messages)
    ref = said.split('context_read(id="')[1].split('"')[0]
    return ModelResponse(parts=[ToolCallPart("context_read", {"id": ref}, tool_call_id="r1")])


async def test_a_shared_file_is_downloaded_with_the_bot_token_and_read(tmp_path: Path) -> None:
    script = StreamScript(_reader)
    async with slack_server() as fake, running(tmp_path / "p", fake, script.model) as (agent, _):
        fake.user_message("what is in it?", file=("notes.txt", b"launch at noon\n"))
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == "the file says: launch at noon")
        said = last_user_text(script.requests[0])
        assert said.startswith("what is in it?\n[Ada attached document notes.txt (15 bytes): context file")
        refs = agent.context_files.list(f"slack:{TEAM}:D0DM")
        assert [r.name for r in refs if r.kind == "artifact"] == ["notes.txt"]
    assert fake.called("files.info") and fake.called("download")


async def test_a_refused_token_stops_the_start_with_the_key_named(tmp_path: Path) -> None:
    async with slack_server() as fake:
        root = make_project(tmp_path / "p", ship_json(fake, appToken="xapp-1-wrong"))
        agent = ShipAgent.from_project(root, model=StreamScript().model)
        async with agent:
            host = ChannelHost(agent)  # built from ship.json
            assert [c.name for c in host.channels] == ["slack"]
            with pytest.raises(RuntimeError, match=r"channels\.slack\.appToken.*invalid_auth"):
                await host.__aenter__()
            assert not host.health["slack"].connected
            assert "xapp-1-wrong" not in (host.health["slack"].last_error or "")


async def test_check_names_the_bot_and_fails_on_a_refused_token_without_printing_it(tmp_path: Path) -> None:
    async with slack_server() as fake:
        good = make_project(tmp_path / "good", ship_json(fake, channels={"allow": ["C0GEN"]}))
        result = await anyio.to_thread.run_sync(
            lambda: CliRunner().invoke(app, ["check", "--offline", "-C", str(good)])
        )
        bad = make_project(tmp_path / "bad", ship_json(fake, appToken="xapp-1-wrong-token"))
        refused = await anyio.to_thread.run_sync(
            lambda: CliRunner().invoke(app, ["check", "--offline", "-C", str(bad)])
        )
    assert "did not accept" not in result.output  # (the check fails only for want of a model here)
    assert f"slack: @ship (user U0SHIPBOT, team {TEAM})" in result.output
    assert "1 allowed channel(s), mention needed" in result.output
    assert refused.exit_code == 1 and "did not accept channels.slack.appToken" in refused.output
    assert "wrong-token" not in refused.output and BOT_TOKEN not in result.output + refused.output


@dataclass(frozen=True)
class _File:  # what chat_send_file hands a channel: name, bytes, caption
    name: str
    data: bytes
    caption: str | None = None


async def test_a_file_goes_out_by_the_external_upload_into_the_thread(tmp_path: Path) -> None:
    async with slack_server() as fake, running(tmp_path / "p", fake, StreamScript().model) as (_, channel):
        parent = "1700000000.000100"
        fake.user_message("hi", channel="C0GEN", channel_type="channel", thread_ts=parent)
        chat = to_inbound(
            fake.envelopes[0].payload["event"],
            team=TEAM,
            bot_user="U0SHIPBOT",
            bot_name="ship",
            sender_name="Ada",
        )
        await channel.outbound.send_file(
            chat, _File("report.txt", b"all good\n", "The **report**"), formatted=True
        )
    (shared,) = [m for m in fake.messages if m.files]
    assert shared.files == ["report.txt"] and shared.thread_ts == parent and shared.text == "The *report*"
    assert [data for name, data in fake.uploads.values()] == [b"all good\n"]
    assert fake.called("files.getUploadURLExternal")[0].params["length"] in (9, "9")


async def test_bang_and_slash_commands_and_a_rate_limited_send_that_waits_retry_after(tmp_path: Path) -> None:
    script = StreamScript()
    async with (
        slack_server() as fake,
        running(tmp_path / "p", fake, script.model, channels={"allow": ["C0GEN"]}) as _,
    ):
        fake.user_message("!status")  # Slack's client keeps a leading "/" for its own commands
        await fake.wait_for(lambda: fake.shown() and "Idle." in fake.shown()[-1].text)
        fake.user_message("!status", channel="C0GEN", channel_type="channel", mention=True)  # @ship !status
        await fake.wait_for(lambda: fake.shown("C0GEN") and "Idle." in fake.shown("C0GEN")[-1].text)
        fake.fail_next("chat.postMessage", 429, "ratelimited", retry_after=1)
        fake.user_message("hello")
        await fake.wait_for(lambda: fake.shown()[-1].text == "echo: hello")
        refused, retried = fake.called("chat.postMessage")[-2:]
        fake.slash("new")  # the app's own slash command: /ship new
        await fake.wait_for(lambda: "Started afresh" in fake.shown()[-1].text)
        fake.slash("what now?")
        await fake.wait_for(lambda: fake.shown()[-1].text == "echo: what now?")
    assert [last_user_text(r) for r in script.requests] == ["hello", "what now?"]  # commands: no turn
    assert retried.at - refused.at >= 0.95  # Retry-After was honoured
