"""``/pin`` and ``/unpin`` in a chat, and the pins in ``/status``, against the local Bot API server.

The user pins a fact with a command; the model reads it at the end of its instructions on the
next turn; ``/status`` counts the pins against ``context.pins.maxTokens`` and lists them; a pin
that does not fit is refused naming the pin to unpin; ``/unpin`` removes one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo

from tests.hosts.channels._support import running, ship_json
from tests.support.core import make_project
from tests.support.stream import StreamScript
from tests.support.telegram_server import telegram_server

pytestmark = pytest.mark.anyio

KEY = "telegram:chat:42"


async def test_pin_and_unpin_commands_reach_the_model_and_status(tmp_path: Path) -> None:
    seen: list[str] = []

    def reply(messages: list[ModelMessage], info: AgentInfo, n: int) -> ModelResponse:
        seen.append(info.instructions or "")
        return ModelResponse(parts=[TextPart(f"answer {n}")])

    script = StreamScript(reply)
    root = tmp_path / "p"

    async def said(text: str, expect: str) -> str:
        before = len(fake.shown())
        fake.user_message(text)
        await fake.wait_for(lambda: len(fake.shown()) > before and expect in fake.shown()[-1].text)
        return fake.shown()[-1].text

    async with telegram_server() as fake:
        ship = ship_json(fake, streaming="off")
        ship["context"] = {"pins": {"maxTokens": 40}}
        make_project(root, ship)
        async with running(root, fake, script.model) as (agent, _):
            assert "/pin" in await said("/help", "/unpin")
            assert await said("/pin My name is Ada;\n I take tea, not coffee.", "Pinned") == (
                "Pinned p1: My name is Ada; I take tea, not coffee."
            )
            assert [p.by for p in await agent.pins(KEY)] == ["user"]
            await said("hello", "answer 1")
            assert "- [p1] My name is Ada; I take tea, not coffee." in seen[-1]
            status = await said("/status", "Pins:")
            refused = await said(
                "/pin The staging server is Hopper, on port 8443, behind the VPN; deploys need a ticket "
                "from Grace first.",
                "Not pinned",
            )
            assert "Nothing is pinned" not in await said("/pin", "Pinned now")
            assert await said("/unpin p7", "no pin") == "This chat has no pin 'p7' (its pins: p1)."
            assert await said("/unpin p1", "Unpinned") == "Unpinned p1."
            await said("and now?", "answer 2")
            assert "Pinned facts" not in seen[-1]
            emptied = await said("/status", "Pins:")
            pins_file = agent.pin_store.path(KEY)
    assert "Pins: 1 (" in status and " of 40 tokens)" in status
    assert "- [p1] My name is Ada; I take tea, not coffee." in status
    assert "context.pins.maxTokens (40" in refused and "unpin p1" in refused
    assert "Pins: none" in emptied
    assert json.loads(pins_file.read_text(encoding="utf-8")) == {"version": 1, "next": 2, "pins": []}
    assert len(script.requests) == 2  # commands never reached the model
