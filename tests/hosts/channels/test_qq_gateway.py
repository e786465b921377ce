"""QQ's intents follow ship.json, a refused guild intent leaves groups and direct chats working, and
INVALID SESSION (op 9) reconnects take the backoff."""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import pytest

from shipagent.hosts.channels.qq._wire import GROUP_AND_C2C_EVENT, INTENTS, intents_for
from tests.hosts.channels.test_qq import _secret, running  # noqa: F401 - the fixture is used by name
from tests.support.qq_server import CHANNEL, GROUP, USER, qq_server
from tests.support.qq_server import GROUP_AND_C2C_EVENT as GRANTED
from tests.support.stream import StreamScript

pytestmark = pytest.mark.anyio


def test_the_guild_intent_is_asked_for_only_when_a_guild_channel_could_be_answered() -> None:
    assert intents_for("allowlist", [GROUP]) == (GROUP_AND_C2C_EVENT, 0)
    assert intents_for("allowlist", [GROUP, CHANNEL]) == (INTENTS, 1 << 30)
    assert intents_for("open", []) == (INTENTS, 1 << 30)
    assert intents_for("disabled", [CHANNEL]) == (GROUP_AND_C2C_EVENT, 0)
    assert intents_for("allowlist", ["1234" * 8]) == (GROUP_AND_C2C_EVENT, 0)  # 32 digits: an openid


async def test_groups_alone_identify_without_the_guild_intent(tmp_path: Path) -> None:
    async with qq_server() as fake:
        fake.granted_intents = GRANTED  # a bot without guild permission is not refused
        async with running(tmp_path / "p", fake, StreamScript().model, groups={"allow": [GROUP]}) as (_, ch):
            fake.c2c_message("hello")
            await fake.wait_for(lambda: fake.to("users", USER))
            assert ch.health.details["guild channels"] == "not asked for"
    assert [f["d"]["intents"] for f in fake.frames if f["op"] == 2] == [GROUP_AND_C2C_EVENT]
    assert fake.connections == 1


async def test_a_refused_guild_intent_keeps_groups_and_direct_chats_and_says_which_key_to_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = StreamScript()
    async with qq_server() as fake:
        fake.granted_intents = GRANTED  # QQ closes an IDENTIFY asking for guild messages with 4014
        async with running(tmp_path / "p", fake, script.model) as (_, channel):  # allow lists CHANNEL
            fake.c2c_message("still here?")
            fake.group_message("and here?")
            await fake.wait_for(lambda: fake.to("users", USER) and fake.to("groups", GROUP))
            assert channel.health.connected and not channel.health.stopped
            assert channel.health.details["guild channels"] == "refused by QQ (close code 4014)"
    assert [f["d"]["intents"] for f in fake.frames if f["op"] == 2] == [INTENTS, GROUP_AND_C2C_EVENT]
    assert fake.identified == 1 and fake.connections == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "PUBLIC_GUILD_MESSAGES" in errors[0]
    assert "channels.qq.groups.allow" in errors[0] and "channels.qq.groups.policy" in errors[0]


async def test_invalid_sessions_reconnect_with_a_growing_backoff(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with qq_server() as fake, running(tmp_path / "p", fake, StreamScript().model) as (_, channel):
        assert channel.gateway is not None
        channel.gateway.min_backoff, channel.gateway.max_backoff = 0.02, 1.0
        fake.invalid_identifies = 3  # the next three IDENTIFYs are answered with op 9 too
        await fake.invalidate_session()
        await fake.wait_for(lambda: fake.identified == 2)
        fake.c2c_message("back?")
        await fake.wait_for(lambda: fake.to("users", USER))
    pauses = [
        r.getMessage().rsplit("again in ", 1)[1]
        for r in caplog.records
        if "the session is invalid (op 9)" in r.getMessage()
    ]
    assert pauses == ["0.02 s", "0.04 s", "0.08 s", "0.16 s"]


async def test_an_invalid_session_after_a_long_one_starts_from_the_shortest_pause(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with qq_server() as fake, running(tmp_path / "p", fake, StreamScript().model) as (_, channel):
        assert channel.gateway is not None
        channel.gateway.min_backoff, channel.gateway.max_backoff = 0.02, 0.3
        fake.invalid_identifies = 2  # a bad stretch: the pause grows
        await fake.invalidate_session()
        await fake.wait_for(lambda: fake.identified == 2)
        await anyio.sleep(0.5)  # then a session that lived longer than the longest pause
        await fake.invalidate_session()
        await fake.wait_for(lambda: fake.identified == 3)
    pauses = [
        r.getMessage().rsplit("again in ", 1)[1]
        for r in caplog.records
        if "the session is invalid (op 9)" in r.getMessage()
    ]
    assert pauses == ["0.02 s", "0.04 s", "0.08 s", "0.02 s"]
