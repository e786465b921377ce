"""Files sent to the bot land in the chat's context files, and the model reads them with context_read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart

from tests.hosts.channels._support import running
from tests.support.core import last_user_text
from tests.support.stream import StreamScript
from tests.support.telegram_server import telegram_server

pytestmark = pytest.mark.anyio


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
    async with telegram_server() as fake, running(tmp_path / "p", fake, script.model) as (agent, _):
        fake.user_message("what is in it?", document=("notes.txt", b"launch at noon\n"))
        # the answer is streamed: wait for the whole of it, not its first edit
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == "the file says: launch at noon")
        assert fake.shown()[-1].text == "the file says: launch at noon"
        said = last_user_text(script.requests[0])
        assert said.startswith("what is in it?\n[Ada attached document notes.txt (15 bytes): context file")
        refs = agent.context_files.list("telegram:chat:42")
        assert [r.name for r in refs if r.kind == "artifact"] == ["notes.txt"]
    assert fake.called("getFile") and fake.called("download")


async def test_an_attachment_over_the_limit_is_refused_with_a_reply(tmp_path: Path) -> None:
    script = StreamScript()
    async with (
        telegram_server() as fake,
        running(tmp_path / "p", fake, script.model, maxAttachmentBytes=10) as _,
    ):
        fake.user_message("take this", document=("big.txt", b"x" * 100))
        await fake.wait_for(lambda: len(fake.shown()) == 2)
        assert "over the 10-byte limit" in fake.shown()[0].text
        assert "big.txt was refused" in last_user_text(script.requests[0])
    assert fake.called("download") == []
    assert json.dumps([c.method for c in fake.calls]).count("getFile") == 0
