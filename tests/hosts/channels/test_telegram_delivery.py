"""Delivery on Telegram: commands, chat_send, flood control, conflicts, stalls, restarts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, UserPromptPart

from tests.hosts.channels._support import running
from tests.support.core import last_user_text
from tests.support.stream import StreamScript
from tests.support.telegram_server import telegram_server

pytestmark = pytest.mark.anyio


def _user_prompts(messages: list[ModelMessage]) -> int:
    return sum(isinstance(p, UserPromptPart) for m in messages for p in getattr(m, "parts", []))


async def test_new_clears_the_context_and_stop_cancels_the_running_answer(tmp_path: Path) -> None:
    def reply(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
        text = last_user_text(messages)
        if text == "slow":
            return ModelResponse(parts=[TextPart("x" * 400)])
        return ModelResponse(parts=[TextPart(f"echo: {text}")])

    script = StreamScript(reply, chunk=2, delay=0.05)  # "slow" takes 10 s: long enough to stop
    async with telegram_server() as fake, running(tmp_path / "p", fake, script.model) as _:
        fake.user_message("one")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == "echo: one")
        fake.user_message("/new")
        fake.user_message("two")
        await fake.wait_for(lambda: fake.shown()[-1].text == "echo: two")
        assert any("afresh" in m.text for m in fake.shown())
        assert _user_prompts(script.requests[-1]) == 1  # the model saw "two" alone

        fake.user_message("/status")
        await fake.wait_for(lambda: "Model: script" in fake.shown()[-1].text)
        assert "Last request:" in fake.shown()[-1].text and "token budget" in fake.shown()[-1].text

        fake.user_message("slow")
        await fake.wait_for(lambda: fake.shown()[-1].text.startswith("xxxx"))
        fake.user_message("/stop")
        await fake.wait_for(lambda: "Stopped." in fake.shown()[-1].text)
        assert len(fake.shown()[-1].text) < 400 + 20  # cut short
        fake.user_message("three")  # the chat goes on
        await fake.wait_for(lambda: fake.shown()[-1].text == "echo: three")


async def test_chat_send_is_not_sent_twice_and_queued_messages_keep_their_order(tmp_path: Path) -> None:
    def reply(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
        text = last_user_text(messages)
        if text == "tell":
            if n % 2 == 1:
                return ModelResponse(
                    parts=[ToolCallPart("chat_send", {"text": "told you"}, tool_call_id="c1")]
                )
            return ModelResponse(parts=[TextPart("told you")])
        return ModelResponse(parts=[TextPart(f"echo: {text}")])

    script = StreamScript(reply)
    async with telegram_server() as fake, running(tmp_path / "p", fake, script.model) as _:
        fake.user_message("tell")
        fake.user_message("after")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == "echo: after")
    assert [m.text for m in fake.shown()] == ["told you", "echo: after"]


async def test_flood_control_retry_after_is_honoured(tmp_path: Path) -> None:
    script = StreamScript()
    async with telegram_server() as fake, running(tmp_path / "p", fake, script.model, streaming="off") as _:
        fake.fail_next("sendMessage", 429, "Too Many Requests: retry after 1", retry_after=1)
        fake.user_message("hi")
        await fake.wait_for(lambda: fake.shown())
    first, second = fake.called("sendMessage")[:2]
    assert second.at - first.at >= 0.95
    assert [m.text for m in fake.shown()] == ["echo: hi"]


async def test_a_409_conflict_stops_the_channel_with_a_clear_error(tmp_path: Path) -> None:
    script = StreamScript()
    async with telegram_server() as fake:
        fake.fail_next("getUpdates", 409, "Conflict: terminated by other getUpdates request")
        async with running(tmp_path / "p", fake, script.model) as (_, channel):
            await fake.wait_for(lambda: channel.health.stopped)
            polls = len(fake.called("getUpdates"))
            await anyio.sleep(0.3)
            assert len(fake.called("getUpdates")) == polls  # not retried forever
            assert "409" in (channel.health.last_error or "")
            assert not channel.health.connected


async def test_a_stalled_poll_is_restarted_by_the_watchdog(tmp_path: Path) -> None:
    script = StreamScript()
    async with telegram_server() as fake:
        fake.stall_polls = 1
        async with running(tmp_path / "p", fake, script.model, poll=0.5) as (_, channel):
            await fake.wait_for(lambda: channel.health.restarts >= 1)
            fake.user_message("still there?")
            await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == "echo: still there?")
            assert channel.health.connected


async def test_an_update_accepted_before_a_restart_is_not_answered_again(tmp_path: Path) -> None:
    script = StreamScript()
    root = tmp_path / "p"
    async with telegram_server() as fake:
        fake.redeliver_confirmed = True  # the process dies before its next poll confirms the offset
        async with running(root, fake, script.model) as _:
            fake.user_message("only once")
            await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == "echo: only once")
        async with running(root, fake, script.model) as (_, channel):  # the same update comes again
            await fake.wait_for(lambda: len(fake.called("getUpdates")) >= 4)
            await anyio.sleep(0.2)
            assert channel.offset is not None  # it was seen and confirmed…
    assert len(script.requests) == 1  # …but answered once
    assert [m.text for m in fake.shown()] == ["echo: only once"]


async def test_a_burst_in_a_group_is_one_turn_per_speaker_after_the_debounce(tmp_path: Path) -> None:
    script = StreamScript()
    async with (
        telegram_server() as fake,
        running(
            tmp_path / "p",
            fake,
            script.model,
            groups={"policy": "open", "requireMention": False},
            debounceMs=400,
        ) as _,
    ):
        fake.user_message("first line", chat_id=-5, chat_type="group", user_id=1, name="Ann")
        fake.user_message("second line", chat_id=-5, chat_type="group", user_id=1, name="Ann")
        fake.user_message("third line", chat_id=-5, chat_type="group", user_id=2, name="Ben")
        await fake.wait_for(lambda: fake.shown(-5) and fake.shown(-5)[-1].text.endswith("third line"))
    # a turn has one speaker (the transcript's user line says who): Ben's line is the next turn
    assert [last_user_text(r) for r in script.requests] == [
        "Ann (id 1): first line\nsecond line",
        "Ben (id 2): third line",
    ]


async def test_a_sender_over_the_rate_limit_is_told_once_and_ignored(tmp_path: Path) -> None:
    script = StreamScript()
    async with (
        telegram_server() as fake,
        running(tmp_path / "p", fake, script.model, rateLimitPerMinute=2, streaming="off") as _,
    ):
        for n in range(5):
            fake.user_message(f"m{n}")
        await fake.wait_for(lambda: len(fake.shown()) == 3)
        await anyio.sleep(0.3)
    texts = sorted(m.text for m in fake.shown())
    assert texts == sorted(
        ["echo: m0", "echo: m1", "You are writing faster than I can answer; wait a minute."]
    )
    assert len(script.requests) == 2


async def test_an_answer_that_cannot_be_delivered_is_counted_and_status_says_so(tmp_path: Path) -> None:
    script = StreamScript()
    async with (
        telegram_server() as fake,
        running(tmp_path / "p", fake, script.model, streaming="off") as (
            _,
            channel,
        ),
    ):
        fake.fail_next("sendMessage", 403, "Forbidden: bot was blocked by the user")
        fake.user_message("hi")
        await fake.wait_for(lambda: channel.health.undelivered == 1)
        assert "could not deliver" in (channel.health.last_error or "")
        assert len(fake.called("sendMessage")) == 1  # a permanent failure is not retried
        fake.user_message("/status")
        await fake.wait_for(
            lambda: fake.shown() and "1 answer(s) could not be delivered" in fake.shown()[-1].text
        )


async def test_typing_while_waiting_and_tool_steps_when_asked(tmp_path: Path) -> None:
    def reply(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
        if n == 1:
            return ModelResponse(parts=[ToolCallPart("chat_load_history", {}, tool_call_id="h1")])
        return ModelResponse(parts=[TextPart("looked back")])

    script = StreamScript(reply)
    async with (
        telegram_server() as fake,
        running(tmp_path / "p", fake, script.model, showToolSteps=True) as _,
    ):
        fake.user_message("what did we say?")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == "looked back")
    steps, _ = fake.shown()
    assert steps.text.startswith("✓ chat_load_history:")
    assert [c.params["action"] for c in fake.called("sendChatAction")][:1] == ["typing"]
