"""The QQ channel end to end: the token, the gateway and passive replies against a local QQ server."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from typer.testing import CliRunner

from shipagent import ShipAgent
from shipagent.config import ConfigError, parse_config
from shipagent.hosts.channels import ChannelHost, InboundMessage, channels_from_config
from shipagent.hosts.channels._cli import pair_code
from shipagent.hosts.channels.qq import INTENTS, QQChannel, plain_text
from shipagent.hosts.channels.qq._wire import FILE, IMAGE, VIDEO, VOICE, media_type
from shipagent.hosts.cli._app import app
from tests.support.core import last_user_text, make_project
from tests.support.qq_server import (
    APP_ID,
    BOT_NAME,
    CHANNEL,
    GROUP,
    MEMBER,
    OTHER_GROUP,
    SECRET,
    USER,
    FakeQQ,
    qq_server,
)
from tests.support.stream import StreamScript

pytestmark = pytest.mark.anyio


def ship_json(fake: FakeQQ, **qq: Any) -> dict[str, Any]:
    """A ship.json with QQ on, pointed at ``fake`` (``qq``: more channel keys)."""
    return {
        "channels": {
            "qq": {
                "enabled": True,
                "appId": APP_ID,
                "clientSecret": "${QQ_BOT_SECRET}",
                "apiRoot": fake.url,
                "tokenUrl": fake.token_url,
                "dmPolicy": "open",
                "groups": {"allow": [GROUP, CHANNEL]},
                **qq,
            }
        }
    }


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QQ_BOT_SECRET", SECRET)


@asynccontextmanager
async def running(
    root: Path, fake: FakeQQ, model: Any, **qq: Any
) -> AsyncIterator[tuple[ShipAgent, QQChannel]]:
    """The agent of a project at ``root`` on QQ for the block (built from ship.json alone)."""
    if not (root / "ship.json").exists():
        make_project(root, ship_json(fake, **qq))
    agent = ShipAgent.from_project(root, model=model)
    channels = channels_from_config(agent, agent.config.channels)
    async with agent, ChannelHost(agent, channels) as host:
        channel = host.channels[0]
        assert isinstance(channel, QQChannel)
        channel.max_backoff = 0.2
        assert channel.gateway is not None
        channel.gateway.min_backoff, channel.gateway.max_backoff = 0.05, 0.2
        yield agent, channel


def _says(text: str) -> Any:
    return lambda _m, _i, _n: ModelResponse(parts=[TextPart(text)])


async def test_a_direct_message_round_trip_identifies_with_the_token_and_heartbeats(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    script = StreamScript()
    async with qq_server() as fake:
        fake.heartbeat_ms = 100
        async with running(tmp_path / "p", fake, script.model) as (agent, channel):
            inbound = fake.c2c_message("hello there")
            await fake.wait_for(lambda: fake.to("users", USER))
            await fake.wait_for(lambda: sum(f["op"] == 1 for f in fake.frames) >= 2)
            assert channel.health.connected and channel.health.last_inbound_at is not None
            told = script.requests[-1][-1].instructions or ""  # type: ignore[union-attr]
            assert "This chat is on QQ" in told and "2,000 characters" in told
    [reply] = fake.to("users", USER)
    assert (reply.content, reply.msg_id, reply.msg_seq) == ("echo: hello there", inbound["id"], 1)
    identify = next(f for f in fake.frames if f["op"] == 2)
    assert identify["d"]["token"] == f"QQBot {fake.tokens[0]}"
    assert identify["d"]["intents"] == INTENTS == (1 << 25) | (1 << 30)
    assert fake.called("GET", "/gateway") and fake.called("POST", "/app/getAppAccessToken")
    assert agent.paths.transcript(f"qq:c2c:{USER}").exists()
    assert SECRET not in caplog.text and fake.tokens[0] not in caplog.text
    stored = [p for p in (tmp_path / "p" / ".ship").rglob("*") if p.is_file()]
    assert stored and not [p for p in stored if SECRET.encode() in p.read_bytes()]


async def test_a_group_at_message_is_answered_in_the_group_and_other_groups_are_ignored(
    tmp_path: Path,
) -> None:
    script = StreamScript()
    async with qq_server() as fake, running(tmp_path / "p", fake, script.model) as (agent, _):
        fake.group_message("not for us", group=OTHER_GROUP)
        asked = fake.group_message("what time is it?")
        await fake.wait_for(lambda: fake.to("groups", GROUP))
        fake.group_message("/help")  # a command is answered at once, outside the model
        await fake.wait_for(lambda: len(fake.to("groups", GROUP)) == 2)
    first, second = fake.to("groups", GROUP)
    assert (first.msg_id, first.msg_seq) == (asked["id"], 1)
    assert first.content.endswith("what time is it?") and "/new" in second.content
    assert fake.to("groups", OTHER_GROUP) == []
    assert [last_user_text(r) for r in script.requests] == [
        f"QQ user {MEMBER[-6:]} (id {MEMBER}): what time is it?"
    ]
    assert agent.paths.transcript(f"qq:group:{GROUP}").exists()


async def test_a_guild_channel_at_message_is_answered_with_its_msg_id(tmp_path: Path) -> None:
    script = StreamScript()
    async with qq_server() as fake, running(tmp_path / "p", fake, script.model) as (agent, _):
        asked = fake.channel_message("hi")
        await fake.wait_for(lambda: fake.to("channels", CHANNEL))
    [reply] = fake.to("channels", CHANNEL)
    assert reply.msg_id == asked["id"] and reply.content == f"echo: Ada (id 9001): @{BOT_NAME} hi"
    assert agent.paths.transcript(f"qq:channel:{CHANNEL}").exists()


def _tells_then_answers(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
    if any(isinstance(p, ToolReturnPart) for p in getattr(messages[-1], "parts", [])):
        return ModelResponse(parts=[TextPart("and **this** is the answer")])
    return ModelResponse(parts=[ToolCallPart("chat_send", {"text": "one moment"}, tool_call_id="c1")])


async def test_chat_send_and_the_answer_are_two_passive_replies_to_the_same_message(tmp_path: Path) -> None:
    script = StreamScript(_tells_then_answers)
    async with qq_server() as fake, running(tmp_path / "p", fake, script.model) as _:
        asked = fake.c2c_message("go")
        await fake.wait_for(lambda: len(fake.to("users", USER)) == 2)
    replies = fake.to("users", USER)
    assert [(r.content, r.msg_id, r.msg_seq) for r in replies] == [
        ("one moment", asked["id"], 1),
        ("and this is the answer", asked["id"], 2),  # Markdown markers out: QQ shows plain text
    ]
    assert fake.called("PATCH") == [] and fake.called("DELETE") == []  # no edits on QQ


async def test_a_long_answer_is_split_into_several_numbered_replies(tmp_path: Path) -> None:
    answer = " ".join(f"word{i:04d}" for i in range(900))  # 8,099 characters
    script = StreamScript(_says(answer), chunk=300)
    async with qq_server() as fake, running(tmp_path / "p", fake, script.model, textChunkLimit=2000) as _:
        asked = fake.c2c_message("go")
        await fake.wait_for(
            lambda: " ".join(r.content for r in fake.to("users", USER)).split() == answer.split()
        )
    replies = fake.to("users", USER)
    assert len(replies) >= 5 and all(len(r.content) <= 2000 for r in replies)
    assert [r.msg_seq for r in replies] == list(range(1, len(replies) + 1))
    assert {r.msg_id for r in replies} == {asked["id"]}


async def test_an_event_replayed_after_a_resume_is_answered_once(tmp_path: Path) -> None:
    script = StreamScript()
    async with qq_server() as fake, running(tmp_path / "p", fake, script.model) as (_, channel):
        first = fake.c2c_message("only once")
        await fake.wait_for(lambda: fake.to("users", USER))
        await fake.reconnect(replay=1)  # op 7; after the RESUME QQ sends the last event again
        await fake.wait_for(lambda: fake.resumed == 1)
        fake.c2c_message("after the resume")
        await fake.wait_for(lambda: len(fake.to("users", USER)) == 2)
        await anyio.sleep(0.3)  # room for a wrong second answer to the replay
        assert channel.health.connected
    assert fake.identified == 1 and fake.connections == 2  # resumed on a new connection
    resume = next(f for f in fake.frames if f["op"] == 6)
    assert resume["d"]["session_id"] == "session-1" and resume["d"]["seq"] == 2  # READY, the message
    assert [f["d"]["id"] for f in fake.sent if f["t"] == "C2C_MESSAGE_CREATE"].count(first["id"]) == 2
    assert [last_user_text(r) for r in script.requests] == ["only once", "after the resume"]
    assert [r.content for r in fake.to("users", USER)] == ["echo: only once", "echo: after the resume"]


async def test_a_dropped_connection_resumes_and_an_invalid_session_identifies_again(tmp_path: Path) -> None:
    script = StreamScript()
    async with qq_server() as fake, running(tmp_path / "p", fake, script.model) as (_, channel):
        await fake.drop()  # closed with 4009: reconnect (after a backoff) and resume
        await fake.wait_for(lambda: fake.resumed == 1)
        fake.c2c_message("still there?")
        await fake.wait_for(lambda: len(fake.to("users", USER)) == 1)
        await fake.invalidate_session()  # op 9: the session is gone, identify again
        await fake.wait_for(lambda: fake.identified == 2)
        fake.c2c_message("and now?")
        await fake.wait_for(lambda: len(fake.to("users", USER)) == 2)
        assert channel.health.connected and channel.health.restarts >= 1
    assert [r.content for r in fake.to("users", USER)] == ["echo: still there?", "echo: and now?"]


async def test_unanswered_heartbeats_end_the_connection_and_the_session_is_resumed(tmp_path: Path) -> None:
    script = StreamScript()
    async with qq_server() as fake:
        fake.heartbeat_ms = 100
        async with running(tmp_path / "p", fake, script.model) as (_, channel):
            fake.ack_heartbeats = False  # the connection looks open but nothing comes back
            await fake.wait_for(lambda: fake.connections == 2)
            fake.ack_heartbeats = True
            await fake.wait_for(lambda: fake.resumed == 1)
            fake.c2c_message("still there?")
            await fake.wait_for(lambda: fake.to("users", USER))
            assert channel.health.connected and channel.health.restarts >= 1
    assert fake.identified == 1
    assert fake.to("users", USER)[0].content == "echo: still there?"


async def test_the_token_is_fetched_again_before_it_expires(tmp_path: Path) -> None:
    script = StreamScript()
    async with qq_server() as fake:
        fake.expires_in = 4  # asked again with a quarter of its life (1 s) left
        async with running(tmp_path / "p", fake, script.model) as _:
            fake.c2c_message("first")
            await fake.wait_for(lambda: len(fake.to("users", USER)) == 1)
            await anyio.sleep(3.1)  # the first token is in its last second now
            fake.c2c_message("second")
            await fake.wait_for(lambda: len(fake.to("users", USER)) == 2)
    first, second = fake.called("POST", "/v2/users/")
    assert len(fake.tokens) >= 2 and second.token == fake.tokens[-1] != first.token
    assert all(c.token for c in fake.calls if c.path != "/app/getAppAccessToken")  # none refused as expired


async def test_an_unknown_sender_is_paired_before_anything_reaches_the_model(tmp_path: Path) -> None:
    script = StreamScript()
    root = tmp_path / "p"
    async with qq_server() as fake, running(root, fake, script.model, dmPolicy="pairing") as _:
        fake.c2c_message("let me in")
        await fake.wait_for(lambda: fake.to("users", USER))
        code = fake.to("users", USER)[0].content.split("shipagent channels pair ")[1].split()[0]
        assert script.requests == []
        assert pair_code(root, code).sender_id == USER
        fake.c2c_message("now?")
        await fake.wait_for(lambda: len(fake.to("users", USER)) == 2)
    assert [last_user_text(r) for r in script.requests] == ["now?"]
    assert fake.to("users", USER)[-1].content == "echo: now?"


async def test_a_reply_whose_answer_was_lost_is_retried_with_its_number_and_not_duplicated(
    tmp_path: Path,
) -> None:
    script = StreamScript(_tells_then_answers)
    async with qq_server() as fake, running(tmp_path / "p", fake, script.model) as _:
        fake.lose_answers = 1  # QQ takes "one moment", the bot sees a 502 and sends it again
        fake.c2c_message("go")
        await fake.wait_for(lambda: len(fake.to("users", USER)) == 2)
        await anyio.sleep(0.2)
    assert [(r.content, r.msg_seq) for r in fake.to("users", USER)] == [
        ("one moment", 1),
        ("and this is the answer", 2),
    ]
    assert [c.body["msg_seq"] for c in fake.called("POST", "/v2/users/")] == [1, 1, 2]


async def test_a_message_answered_again_after_a_restart_skips_the_numbers_qq_already_has(
    tmp_path: Path,
) -> None:
    root = make_project(tmp_path / "p")
    message = InboundMessage(
        channel="qq",
        chat_key=f"qq:c2c:{USER}",
        chat_id=USER,
        message_id="ROBOT1.0_before_the_crash",
        sender_id=USER,
        sender_name="QQ user",
        text="are you there?",
    )
    state = root / ".ship" / "channels"
    state.mkdir(parents=True)
    row = {"chat": USER, "message": message.message_id, "payload": message.to_json()}
    (state / "qq-seen.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    script = StreamScript(_tells_then_answers)
    async with qq_server() as fake:
        fake.replied_before(message.message_id, 1)  # "one moment" went out, then the process died
        (root / "ship.json").write_text(json.dumps(ship_json(fake)), encoding="utf-8")
        async with running(root, fake, script.model) as _:
            await fake.wait_for(lambda: len(fake.to("users", USER)) == 2)
    assert [(r.content, r.msg_seq) for r in fake.to("users", USER)] == [
        ("one moment", 2),
        ("and this is the answer", 3),
    ]


def _shell(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
    returns = [p for p in getattr(messages[-1], "parts", []) if isinstance(p, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart(f"finished: {str(returns[0].content)[:80]}")])
    return ModelResponse(
        parts=[ToolCallPart("exec_shell", {"command": "echo ok > ran.txt"}, tool_call_id="s1")]
    )


async def test_a_command_needing_approval_is_refused_with_a_reply_saying_why(tmp_path: Path) -> None:
    script = StreamScript(_shell)
    root = tmp_path / "p"
    async with qq_server() as fake, running(root, fake, script.model) as _:
        fake.c2c_message("run it")
        await fake.wait_for(lambda: any(r.content.startswith("finished") for r in fake.to("users", USER)))
    said = [r.content for r in fake.to("users", USER)]
    assert "this chat cannot show approval buttons" in said[0] and "echo ok > ran.txt" in said[0]
    assert not (root / "ran.txt").exists()


async def test_an_attachment_is_downloaded_into_the_chats_context_files(tmp_path: Path) -> None:
    script = StreamScript()
    async with qq_server() as fake, running(tmp_path / "p", fake, script.model) as (agent, _):
        fake.group_message("read this", attachment=("notes.txt", b"launch at noon\n"))
        await fake.wait_for(lambda: fake.to("groups", GROUP))
    said = last_user_text(script.requests[0])
    assert "read this" in said and "notes.txt (15 bytes)" in said
    refs = agent.context_files.list(f"qq:group:{GROUP}")
    assert [r.name for r in refs if r.kind == "artifact"] == ["notes.txt"]


async def test_a_refused_secret_fails_the_start_without_saying_it(tmp_path: Path) -> None:
    async with qq_server() as fake:
        root = make_project(tmp_path / "p", ship_json(fake, clientSecret="wrong-secret-987"))
        agent = ShipAgent.from_project(root, model=StreamScript().model)
        async with agent:
            [channel] = channels_from_config(agent, agent.config.channels)
            with pytest.raises(RuntimeError) as failed:
                await channel.start()
    assert "refused channels.qq.appId / clientSecret" in str(failed.value)
    assert "wrong-secret-987" not in str(failed.value)
    assert channel.health.last_error is not None and "wrong-secret-987" not in channel.health.last_error


async def test_intents_not_granted_stop_the_start_with_what_to_turn_on(tmp_path: Path) -> None:
    async with qq_server() as fake:
        fake.granted_intents = 0  # not even group and direct messages
        root = make_project(tmp_path / "p", ship_json(fake))
        agent = ShipAgent.from_project(root, model=StreamScript().model)
        async with agent:
            [channel] = channels_from_config(agent, agent.config.channels)
            with pytest.raises(RuntimeError, match="event subscriptions"):
                await ChannelHost(agent, [channel]).__aenter__()
    assert channel.health.stopped and not channel.health.connected
    assert fake.identified == 0 and fake.connections == 2  # without the guild intent once; then stopped
    assert [f["d"]["intents"] for f in fake.frames if f["op"] == 2] == [INTENTS, 1 << 25]


async def test_check_names_the_app_and_fails_on_a_refused_secret_without_printing_it(tmp_path: Path) -> None:
    async with qq_server() as fake:
        good = make_project(tmp_path / "good", ship_json(fake))
        bad = make_project(tmp_path / "bad", ship_json(fake, clientSecret="wrong-secret-987"))
        runner = CliRunner()
        ok = await anyio.to_thread.run_sync(
            lambda: runner.invoke(app, ["check", "--offline", "-C", str(good)])
        )
        refused = await anyio.to_thread.run_sync(
            lambda: runner.invoke(app, ["check", "--offline", "-C", str(bad)])
        )
    assert "2 allowed group(s), @-messages only" in ok.output
    assert f"qq: app {APP_ID} via {fake.url}" in ok.output and SECRET not in ok.output
    assert refused.exit_code == 1 and "wrong-secret-987" not in refused.output
    assert "did not accept channels.qq.appId / clientSecret" in re.sub(r"\s+", " ", refused.output)


def test_ship_json_names_what_is_wrong_and_never_shows_the_secret() -> None:
    with pytest.raises(ConfigError, match="clientSecret is required"):
        parse_config({"channels": {"qq": {"enabled": True, "appId": APP_ID}}})
    with pytest.raises(ConfigError, match="did you mean 'sandbox'"):
        parse_config({"channels": {"qq": {"sandbx": True}}})
    with pytest.raises(ConfigError, match=r"channels\.qq\.apiRoot"):
        parse_config({"channels": {"qq": {"apiRoot": "api.sgroup.qq.com"}}})
    config = parse_config(
        {"channels": {"qq": {"enabled": True, "appId": APP_ID, "clientSecret": "${S}", "sandbox": True}}},
        env={"S": SECRET},
    ).channels.qq
    assert config.client_secret == SECRET and SECRET not in repr(config)
    assert config.api_base == "https://sandbox.api.sgroup.qq.com"
    assert parse_config({"channels": {"qq": {}}}).channels.qq.api_base == "https://api.sgroup.qq.com"


def test_the_keys_other_platforms_have_are_accepted_with_what_qq_can_do() -> None:
    moved = {"streaming": "off", "showToolSteps": False, "groups": {"requireMention": True, "allow": [GROUP]}}
    config = parse_config({"channels": {"qq": moved}}).channels.qq
    assert (config.streaming, config.show_tool_steps, config.groups.require_mention) == ("off", False, True)
    assert parse_config({"channels": {"qq": {"streaming": "edit"}}}).channels.qq.streaming == "edit"
    with pytest.raises(ConfigError, match=r"channels\.qq\.showToolSteps.*cannot be true on QQ.*QQ cannot do"):
        parse_config({"channels": {"qq": {"showToolSteps": True}}})
    with pytest.raises(ConfigError, match=r"channels\.qq\.groups\.requireMention.*only the group messages"):
        parse_config({"channels": {"qq": {"groups": {"requireMention": False}}}})
    with pytest.raises(ConfigError, match="did you mean 'streaming'"):
        parse_config({"channels": {"qq": {"streamin": "off"}}})
    with pytest.raises(ConfigError, match=r"channels\.qq\.groups\.historyLimit"):
        parse_config({"channels": {"qq": {"groups": {"historyLimit": 5}}}})


def test_plain_text_takes_the_markdown_out_and_never_makes_a_text_longer() -> None:
    text = "# Title\n\n**bold** and `code` and [docs](https://example.com)\n```python\nx = **y**\n```"
    shown = plain_text(text)
    assert shown == "Title\n\nbold and code and docs https://example.com\nx = **y**"
    assert len(shown) <= len(text)


def _sends_file(path: str, caption: str | None = None, **paths: str) -> Any:
    """A model that calls ``chat_send_file`` once (``path``, or ``paths[word]`` when the user's
    message has that word), then answers with what the tool returned."""

    def reply(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
        returns = [p for p in getattr(messages[-1], "parts", []) if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f"done: {json.dumps(returns[0].content)[:300]}")])
        asked = last_user_text(messages)
        chosen = next((p for word, p in paths.items() if word in asked), path)
        args = {"path": chosen, **({"caption": caption} if caption else {})}
        return ModelResponse(parts=[ToolCallPart("chat_send_file", args, tool_call_id="f1")])

    return reply


async def test_chat_send_file_uploads_the_bytes_then_replies_with_the_file_info(tmp_path: Path) -> None:
    pdf = b"%PDF-1.7\n" + bytes(range(256)) * 8
    root = tmp_path / "p"
    async with qq_server() as fake:
        make_project(root, ship_json(fake))
        (root / "reports").mkdir()
        (root / "reports" / "q3.pdf").write_bytes(pdf)
        script = StreamScript(_sends_file("reports/q3.pdf", "**The** Q3 report"))
        async with running(root, fake, script.model) as _:
            asked = fake.c2c_message("send me the report")
            await fake.wait_for(lambda: len(fake.to("users", USER)) == 2)
        told = script.requests[0][-1].instructions or ""  # type: ignore[union-attr]
    assert "`chat_send_file`" in told
    [upload] = fake.uploads
    assert (upload.where, upload.target, upload.file_type, upload.file_name) == ("users", USER, 4, "q3.pdf")
    assert upload.data == pdf
    assert fake.called("POST", f"/v2/users/{USER}/files")[0].body["srv_send_msg"] is False
    sent, answer = fake.to("users", USER)
    assert sent.media == upload and sent.content == "The Q3 report"  # the caption, as plain text
    assert [(r.msg_id, r.msg_seq) for r in (sent, answer)] == [(asked["id"], 1), (asked["id"], 2)]
    assert answer.content.startswith("done:") and '"success": true' in answer.content


async def test_in_a_group_an_image_is_sent_and_a_plain_file_is_refused_with_the_reason(
    tmp_path: Path,
) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(64)
    root = tmp_path / "p"
    async with qq_server() as fake:
        make_project(root, ship_json(fake))
        (root / "chart.png").write_bytes(png)
        (root / "notes.pdf").write_bytes(b"%PDF-1.7\n")
        script = StreamScript(_sends_file("chart.png", notes="notes.pdf"))
        async with running(root, fake, script.model) as _:
            fake.group_message("the chart please")
            await fake.wait_for(lambda: len(fake.to("groups", GROUP)) == 2)
            fake.group_message("and the notes")
            await fake.wait_for(lambda: len(fake.to("groups", GROUP)) == 3)
    image, answer, refused = fake.to("groups", GROUP)
    assert image.media is not None and (image.media.file_type, image.media.data) == (1, png)
    assert image.content == "" and answer.content.startswith("done:")
    assert len(fake.uploads) == 1  # the pdf never went to QQ
    assert "only images (png, jpg)" in refused.content and "notes.pdf" in refused.content
    assert refused.media is None and '"success": false' in refused.content


async def test_a_guild_channel_is_told_it_takes_no_files_and_nothing_is_uploaded(tmp_path: Path) -> None:
    root = tmp_path / "p"
    async with qq_server() as fake:
        make_project(root, ship_json(fake))
        (root / "chart.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
        script = StreamScript(_sends_file("chart.png"))
        async with running(root, fake, script.model) as _:
            fake.channel_message("the chart please")
            await fake.wait_for(lambda: fake.to("channels", CHANNEL))
    [answer] = fake.to("channels", CHANNEL)
    assert "guild channels do not take files" in answer.content and '"success": false' in answer.content
    assert fake.uploads == [] and fake.called("POST", "/v2/") == []


def test_the_file_type_follows_the_extension_as_qq_documents_it() -> None:
    assert [media_type(n) for n in ("a.PNG", "b.jpeg", "c.mp4", "d.silk", "e.mp3", "f.pdf", "noext")] == [
        IMAGE,
        IMAGE,
        VIDEO,
        VOICE,
        VOICE,
        FILE,
        FILE,
    ]
    assert (IMAGE, VIDEO, VOICE, FILE) == (1, 2, 3, 4)
