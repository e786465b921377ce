"""The Feishu channel end to end: lark-oapi talks REST and the long connection to a local Feishu server."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from typer.testing import CliRunner

from shipagent import ShipAgent
from shipagent.config import ConfigError, parse_config
from shipagent.hosts.channels import ChannelHost, InboundMessage, channels_from_config
from shipagent.hosts.channels._cli import pair_code
from shipagent.hosts.channels.feishu import FeishuChannel, chat_key_of
from shipagent.hosts.channels.feishu._rest import STREAM_EDITS, FeishuSender
from shipagent.hosts.cli._app import app
from tests.support.core import last_user_text, make_project
from tests.support.feishu_server import (
    APP_ID,
    APP_SECRET,
    BOT_OPEN_ID,
    DM_CHAT,
    GROUP_CHAT,
    USER,
    BotMessage,
    FakeFeishu,
    buttons_of,
    feishu_server,
)
from tests.support.stream import StreamScript

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _secret_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEISHU_APP_SECRET", APP_SECRET)


def ship_json(fake: FakeFeishu, **feishu: Any) -> dict[str, Any]:
    """A ship.json with Feishu on, pointed at ``fake`` (``feishu``: more channel keys)."""
    return {
        "channels": {
            "feishu": {
                "enabled": True,
                "appId": APP_ID,
                "appSecret": "${FEISHU_APP_SECRET}",
                "domain": fake.url,
                "dmPolicy": "open",
                "groups": {"allow": [GROUP_CHAT]},
                **feishu,
            }
        }
    }


@asynccontextmanager
async def running(
    root: Path, fake: FakeFeishu, model: Any, *, edit_interval: float = 0.05, **feishu: Any
) -> AsyncIterator[tuple[ShipAgent, FeishuChannel]]:
    """The agent of a project at ``root`` on Feishu for the block."""
    if not (root / "ship.json").exists():
        make_project(root, ship_json(fake, **feishu))
    agent = ShipAgent.from_project(root, model=model)
    channels = channels_from_config(agent, agent.config.channels, feishu={"edit_interval": edit_interval})
    async with agent, ChannelHost(agent, channels) as host:
        channel = host.channels[0]
        assert isinstance(channel, FeishuChannel)
        yield agent, channel


def _says(text: str) -> Any:
    return lambda _m, _i, _n: ModelResponse(parts=[TextPart(text)])


async def test_dm_round_trip_over_the_long_connection(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    script = StreamScript()
    async with feishu_server() as fake, running(tmp_path / "p", fake, script.model) as (agent, channel):
        event = fake.user_message("hello there")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == "echo: hello there")
        await fake.wait_for(lambda: fake.sent[0] in fake.acked)
        assert fake.acked[fake.sent[0]] == 200  # acknowledged once recorded
        assert channel.health.connected and channel.health.last_inbound_at is not None
        assert fake.endpoint_asked == 1 and fake.called("GET", "/bot/v3/info")
        told = script.requests[-1][-1].instructions or ""  # type: ignore[union-attr]
        assert "This chat is on Feishu" in told
    assert len(fake.messages) == 1  # one message, edited into the answer: never a duplicate
    answer = fake.messages[0]
    assert answer.msg_type == "post" and answer.reply_to is None
    assert len(answer.versions) > 1 and len(set(answer.versions)) == len(answer.versions)  # no idle edit
    final = json.loads(answer.content)["zh_cn"]["content"][0][0]
    assert final == {"tag": "md", "text": "echo: hello there"}  # the answer as Markdown
    assert fake.called("PUT", f"/im/v1/messages/{answer.id}") and not fake.called("PATCH")
    assert agent.paths.transcript(chat_key_of(event["event"]["message"]["chat_id"])).exists()
    assert chat_key_of(DM_CHAT) == f"feishu:chat:{DM_CHAT}"
    out, err = capfd.readouterr()
    assert APP_SECRET not in caplog.text + out + err
    stored = [p for p in (tmp_path / "p" / ".ship").rglob("*") if p.is_file()]
    assert stored and not [p for p in stored if APP_SECRET.encode() in p.read_bytes()]
    assert APP_SECRET not in repr(agent.config.channels.feishu)


async def test_group_messages_need_an_at_mention_and_are_answered_as_replies(tmp_path: Path) -> None:
    script = StreamScript()
    async with feishu_server() as fake, running(tmp_path / "p", fake, script.model) as (agent, _):
        fake.user_message("just chatting", chat_id=GROUP_CHAT, group=True)
        asked = fake.user_message("what time is it", chat_id=GROUP_CHAT, group=True, mention=True, post=True)
        await fake.wait_for(lambda: fake.shown(GROUP_CHAT) and "what time" in fake.shown(GROUP_CHAT)[-1].text)
        fake.user_message("from another bot", chat_id=GROUP_CHAT, group=True, mention=True, sender_type="app")
        fake.user_message("elsewhere", chat_id="oc_not_allowed", group=True, mention=True)
        fake.user_message("/help", chat_id=GROUP_CHAT, group=True, mention=True)  # "@ship /help"
        await fake.wait_for(lambda: len(fake.shown(GROUP_CHAT)) == 2, within=5)
        await fake.wait_for(lambda: len(fake.acked) == 5, within=5)
        seen = [last_user_text(r) for r in script.requests]
    assert len(seen) == 1 and seen[0].endswith("@ship what time is it")  # "who (id …): text"
    answer = fake.shown(GROUP_CHAT)[0]
    assert answer.reply_to == asked["event"]["message"]["message_id"]
    assert fake.called("POST", f"/im/v1/messages/{answer.reply_to}/reply")
    assert "/new" in fake.shown(GROUP_CHAT)[1].text
    assert fake.shown("oc_not_allowed") == []
    assert agent.paths.transcript(chat_key_of(GROUP_CHAT)).exists()


async def test_streaming_stays_within_feishus_twenty_edits_and_ends_with_the_whole_answer(
    tmp_path: Path,
) -> None:
    words = " ".join(f"word{n}" for n in range(120))
    script = StreamScript(_says(words), chunk=6, delay=0.01)
    async with feishu_server() as fake, running(tmp_path / "p", fake, script.model, edit_interval=0.0):
        fake.user_message("talk a lot")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == words, within=30)
    assert len(fake.messages) == 1
    edits = fake.called("PUT", f"/im/v1/messages/{fake.messages[0].id}")
    assert STREAM_EDITS < len(edits) <= 20  # streamed edits capped, the final one still allowed
    final = json.loads(fake.messages[0].content)["zh_cn"]["content"][0][0]
    assert final == {"tag": "md", "text": words}


class _BreaksLate(FunctionModel):
    """Streams many words (more than the edits a message may take), then the provider fails."""

    def __init__(self) -> None:
        super().__init__(stream_function=self._stream, model_name="breaks")

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for n in range(60):
            await anyio.sleep(0.01)
            yield f"word{n} "
        raise RuntimeError("provider went away")


async def test_a_turn_failing_after_many_edits_still_says_so_in_the_same_message(tmp_path: Path) -> None:
    async with feishu_server() as fake, running(tmp_path / "p", fake, _BreaksLate(), edit_interval=0.0):
        fake.user_message("go")
        await fake.wait_for(lambda: fake.shown() and "⚠️" in fake.shown()[-1].text, within=30)
    assert len(fake.messages) == 1
    text = fake.messages[0].text
    assert text.startswith("word0 word1") and "word59" in text and "provider went away" in text
    assert STREAM_EDITS < len(fake.called("PUT")) <= 20


async def test_streaming_off_sends_the_answer_once(tmp_path: Path) -> None:
    script = StreamScript(_says("one piece"))
    async with feishu_server() as fake, running(tmp_path / "p", fake, script.model, streaming="off"):
        fake.user_message("hi")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == "one piece")
    assert len(fake.messages) == 1 and not fake.called("PUT")


async def test_a_long_answer_is_split_into_messages_within_the_limit(tmp_path: Path) -> None:
    paragraphs = [f"Paragraph {n}: " + "lorem ipsum " * 12 for n in range(12)]
    answer = "\n\n".join(p.strip() for p in paragraphs)
    script = StreamScript(_says(answer), chunk=50)
    async with feishu_server() as fake, running(tmp_path / "p", fake, script.model, textChunkLimit=400):
        fake.user_message("a long one")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text.endswith(paragraphs[-1].strip()))
        await fake.wait_for(lambda: all(m.msg_type == "post" and '"md"' in m.content for m in fake.shown()))
    shown = [m.text for m in fake.shown()]
    assert len(shown) >= 3 and all(len(text) <= 400 for text in shown)
    assert " ".join(" ".join(shown).split()) == " ".join(answer.split())  # nothing lost, nothing doubled


async def test_an_event_replayed_after_a_reconnect_is_answered_once(tmp_path: Path) -> None:
    script = StreamScript()
    async with feishu_server() as fake, running(tmp_path / "p", fake, script.model) as (_, channel):
        first = fake.user_message("only once")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == "echo: only once")
        await fake.reconnect(replay=1)  # the long connection drops; Feishu sends the event again
        await fake.wait_for(lambda: fake.connections == 2 and len(fake.acked) == 2)
        assert list(fake.acked.values()) == [200, 200]  # the replay is acknowledged, not answered
        fake.user_message("after the reconnect")
        await fake.wait_for(lambda: fake.shown()[-1].text == "echo: after the reconnect")
        assert channel.health.connected and channel.health.restarts == 1
    replays = [e for e in fake.events if e is first]
    assert len(replays) == 1 and len(fake.sent) == 3  # the first event went out twice
    assert [last_user_text(r) for r in script.requests] == ["only once", "after the reconnect"]
    assert [m.text for m in fake.shown()] == ["echo: only once", "echo: after the reconnect"]


async def test_an_unknown_dm_sender_is_paired_before_anything_reaches_the_model(tmp_path: Path) -> None:
    script = StreamScript()
    root = tmp_path / "p"
    async with feishu_server() as fake, running(root, fake, script.model, dmPolicy="pairing"):
        fake.user_message("let me in", user="ou_eve")
        await fake.wait_for(lambda: fake.shown())
        code = fake.shown()[0].text.split("shipagent channels pair ")[1].split()[0]
        assert script.requests == []
        assert pair_code(root, code).sender_id == "ou_eve"
        fake.user_message("now?", user="ou_eve")
        await fake.wait_for(lambda: fake.shown()[-1].text == "echo: now?")
    assert [last_user_text(r) for r in script.requests] == ["now?"]


async def test_refused_credentials_stop_the_start_without_showing_the_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    wrong = "wrong-secret-0123456789"
    monkeypatch.setenv("FEISHU_APP_SECRET", wrong)
    async with feishu_server() as fake:
        with pytest.raises(RuntimeError) as raised:
            async with running(tmp_path / "p", fake, StreamScript().model):
                pass
    assert str(raised.value).startswith("feishu: could not") and wrong not in str(raised.value)
    out, err = capfd.readouterr()
    assert wrong not in out + err


def test_channels_feishu_is_validated_like_the_other_channels() -> None:
    with pytest.raises(ConfigError, match="domian") as raised:
        parse_config({"channels": {"feishu": {"appId": "cli_x", "domian": "lark"}}})
    assert "did you mean 'domain'" in str(raised.value)
    with pytest.raises(ConfigError, match="appSecret is required"):
        parse_config({"channels": {"feishu": {"enabled": True, "appId": "cli_x"}}})
    with pytest.raises(ConfigError, match="domain"):
        parse_config({"channels": {"feishu": {"domain": "open.feishu.cn"}}})
    config = parse_config(
        {"channels": {"feishu": {"enabled": True, "appId": "cli_x", "appSecret": "${S}", "domain": "lark"}}},
        env={"S": "top-secret-value"},
    ).channels.feishu
    assert config.app_secret == "top-secret-value" and "top-secret-value" not in repr(config)
    assert config.base_url == "https://open.larksuite.com"
    assert config.groups.require_mention and config.streaming == "edit"


async def test_an_approval_by_card_button_is_the_askers_alone(tmp_path: Path) -> None:
    root = tmp_path / "p"

    def shell(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
        returns = [p for p in getattr(messages[-1], "parts", []) if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f"finished: {str(returns[0].content)[:60]}")])
        return ModelResponse(
            parts=[ToolCallPart("exec_shell", {"command": "echo ok > approved.txt"}, tool_call_id="s1")]
        )

    def question(fake: FakeFeishu) -> BotMessage | None:
        found = [m for m in fake.shown(GROUP_CHAT) if m.msg_type == "interactive"]
        return found[-1] if found else None

    async with feishu_server() as fake, running(root, fake, StreamScript(shell).model):
        fake.user_message("clean up", chat_id=GROUP_CHAT, group=True, mention=True)
        await fake.wait_for(lambda: question(fake) is not None and buttons_of(question(fake)))  # type: ignore[arg-type]
        asked = question(fake)
        assert asked is not None and "echo ok > approved.txt" in asked.text
        labels = {b["text"]["content"]: b for b in buttons_of(asked)}
        approve = next(b["value"]["data"] for label, b in labels.items() if "Approve" in label)
        assert [b["type"] for b in buttons_of(asked)] == ["primary", "danger"]

        other = fake.press(asked, approve, user="ou_mallory")
        await fake.wait_for(lambda: fake.answer_to(other) is not None)
        assert "Only" in fake.answer_to(other)["toast"]["content"]  # type: ignore[index]
        assert buttons_of(asked)  # still open

        mine = fake.press(asked, approve)
        await fake.wait_for(lambda: fake.shown(GROUP_CHAT)[-1].text.startswith("finished"))
        assert asked.text.startswith("✅ Approved by") and buttons_of(asked) == []
        assert fake.called("PATCH", f"/im/v1/messages/{asked.id}")
        await fake.wait_for(lambda: fake.answer_to(mine) is not None)
        assert "Approved" in fake.answer_to(mine)["toast"]["content"]  # type: ignore[index]
    assert (root / "approved.txt").read_text() == "ok\n"


async def test_check_names_the_bot_and_fails_on_refused_credentials_without_printing_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def check() -> Any:
        return CliRunner().invoke(app, ["check", "--offline", "-C", str(tmp_path)])

    async with feishu_server() as fake:
        (tmp_path / "ship.json").write_text(json.dumps(ship_json(fake)), encoding="utf-8")
        good = await anyio.to_thread.run_sync(check)
        ship = ship_json(fake, appId="cli_unknown_app")  # lark-oapi caches a token per app id
        (tmp_path / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
        monkeypatch.setenv("FEISHU_APP_SECRET", "wrong-secret-for-check")
        bad = await anyio.to_thread.run_sync(check)
    assert f"feishu: ship ({BOT_OPEN_ID}) via {fake.url}" in good.output
    assert "direct messages: open" in good.output and "@mention needed" in good.output
    assert bad.exit_code == 1 and "did not accept channels.feishu.appId / appSecret" in bad.output
    assert "did not accept" not in good.output  # (good fails only for the model this project lacks)
    assert APP_SECRET not in good.output + bad.output and "wrong-secret-for-check" not in bad.output


async def test_a_sender_without_the_long_connection_sends_and_edits_as_the_channel_does() -> None:
    async with feishu_server() as fake:
        config = parse_config(ship_json(fake), env={"FEISHU_APP_SECRET": APP_SECRET}).channels.feishu
        chat = InboundMessage("feishu", chat_key_of(DM_CHAT), DM_CHAT, "om_user_1", USER, USER, "hi")
        async with FeishuSender(config) as outbound:
            sent = await outbound.send(chat, "**half**", formatted=False)
            await outbound.edit(chat, sent, "**whole**", formatted=True)
        assert fake.connections == 0 and fake.endpoint_asked == 0  # REST only
        shown = fake.shown()
    assert [m.id for m in shown] == [sent.message_id] and shown[0].text == "**whole**"
    assert '"md"' in shown[0].content
