"""Approving a shell command with Telegram's inline buttons: the asker (or an admin) decides."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart

from tests.hosts.channels._support import running
from tests.support.stream import StreamScript
from tests.support.telegram_server import BotMessage, FakeTelegram, telegram_server

pytestmark = pytest.mark.anyio

GROUP = -1005


def _shell(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
    last = messages[-1]
    returns = [p for p in getattr(last, "parts", []) if isinstance(p, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart(f"finished: {str(returns[0].content)[:60]}")])
    return ModelResponse(
        parts=[ToolCallPart("exec_shell", {"command": "echo ok > approved.txt"}, tool_call_id="s1")]
    )


def _question(fake: FakeTelegram) -> BotMessage | None:
    found = [m for m in fake.shown(GROUP) if m.buttons]
    return found[-1] if found else None


async def test_the_asker_approves_or_denies_and_nobody_else_can(tmp_path: Path) -> None:
    root = tmp_path / "p"
    script = StreamScript(_shell)
    async with (
        telegram_server() as fake,
        running(
            root, fake, script.model, groups={"policy": "open", "requireMention": False}, admins=[99]
        ) as _,
    ):
        fake.user_message("clean up", chat_id=GROUP, chat_type="supergroup", user_id=7, name="Ada")
        await fake.wait_for(lambda: _question(fake) is not None)
        question = _question(fake)
        assert question is not None and "echo ok > approved.txt" in question.text
        deny = next(b["callback_data"] for b in question.buttons if "Deny" in b["text"])
        approve = next(b["callback_data"] for b in question.buttons if "Approve" in b["text"])

        fake.press(question, approve, user_id=8, name="Mallory")  # not the asker, not an admin
        await fake.wait_for(lambda: fake.called("answerCallbackQuery"))
        assert "Only Ada" in fake.called("answerCallbackQuery")[0].params["text"]
        assert question.buttons  # still open

        fake.press(question, deny, user_id=7, name="Ada")
        await fake.wait_for(lambda: fake.shown(GROUP)[-1].text.startswith("finished"))
        assert question.text.startswith("❌ Denied by Ada") and question.buttons == []
        assert not (root / "approved.txt").exists()

        fake.user_message("again", chat_id=GROUP, chat_type="supergroup", user_id=7, name="Ada")
        await fake.wait_for(lambda: _question(fake) is not None)
        second = _question(fake)
        assert second is not None
        approve = next(b["callback_data"] for b in second.buttons if "Approve" in b["text"])
        fake.press(second, approve, user_id=99, name="Admin")  # an admin may answer
        await fake.wait_for(lambda: second.text.startswith("✅ Approved by Admin"))
        await fake.wait_for(lambda: fake.shown(GROUP)[-1].text.startswith("finished"))
    assert (root / "approved.txt").read_text() == "ok\n"


async def test_an_unanswered_question_is_a_refusal_and_loses_its_buttons(tmp_path: Path) -> None:
    root = tmp_path / "p"
    async with (
        telegram_server() as fake,
        running(
            root, fake, StreamScript(_shell).model, groups={"policy": "open", "requireMention": False}
        ) as (_, channel),
    ):
        channel.pipeline.options = replace(channel.pipeline.options, approval_timeout=0.3)
        fake.user_message("clean up", chat_id=GROUP, chat_type="supergroup")
        await fake.wait_for(lambda: any(m.text.startswith("⌛") for m in fake.messages))
        question = next(m for m in fake.messages if "echo ok" in m.text)
        await fake.wait_for(lambda: "Tool errors" in fake.shown(GROUP)[-1].text)  # the turn went on, refused
        assert question.text.startswith("⌛ No answer: refused.") and question.buttons == []
    assert not (root / "approved.txt").exists()
