"""The Feishu channel end to end: lark-oapi talks REST and the long connection to a local Feishu server."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelResponse, TextPart

from shipagent import ShipAgent
from shipagent.hosts.channels import ChannelHost, channels_from_config
from shipagent.hosts.channels.feishu import FeishuChannel, chat_key_of
from tests.support.core import make_project
from tests.support.feishu_server import (
    APP_ID,
    APP_SECRET,
    DM_CHAT,
    GROUP_CHAT,
    FakeFeishu,
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
