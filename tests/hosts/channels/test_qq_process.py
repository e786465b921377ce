"""The QQ channel in its own process (``shipagent channels run``), killed with an answer in flight."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from shipagent.chatkeys import ShipPaths
from tests.hosts.channels.test_qq import ship_json
from tests.support.channel_process import start_channels, stop
from tests.support.qq_server import SECRET, USER, qq_server

pytestmark = pytest.mark.anyio

MODEL_MODULE = """
import asyncio
from pathlib import Path
from pydantic_ai.messages import ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import FunctionModel

def _said(messages):
    for part in reversed(messages[-1].parts):
        if isinstance(part, UserPromptPart):
            return str(part.content)
    return ""

def respond(messages, info):
    return ModelResponse(parts=[TextPart("done: " + _said(messages))])

async def stream(messages, info):
    Path(__file__).with_name("started-" + _said(messages)).touch()
    for word in ("done: " + _said(messages) + " " + "and more " * 6).split(" "):
        await asyncio.sleep(0.2)
        yield word + " "

def build():
    return FunctionModel(respond, stream_function=stream, model_name="scripted")
"""


async def test_killed_mid_answer_the_message_is_answered_exactly_once_after_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QQ_BOT_SECRET", SECRET)
    root = tmp_path / "p"
    root.mkdir()
    (root / "scripted_model.py").write_text(MODEL_MODULE, encoding="utf-8")
    log = tmp_path / "channels.log"

    def answers(text: str) -> list[str]:
        return [r.content for r in fake.to("users", USER) if r.content.startswith(f"done: {text}")]

    async with qq_server() as fake:
        (root / "ship.json").write_text(json.dumps(ship_json(fake)), encoding="utf-8")
        process = start_channels(root, log)
        try:
            await fake.wait_for(lambda: fake.identified == 1, within=60)
            sent = fake.c2c_message("please")
            await fake.wait_for(lambda: (root / "started-please").exists(), within=60)  # the model is writing
            await stop(process, signal.SIGKILL)
            assert fake.replies == []

            process = start_channels(root, log)  # a new session: QQ does not send the message again
            await fake.wait_for(lambda: answers("please"), within=60)
            fake.c2c_message("please", message_id=sent["id"])  # and if it did, once is enough
            fake.c2c_message("next")
            await fake.wait_for(lambda: answers("next"), within=60)
        finally:
            if process.poll() is None:
                await stop(process, signal.SIGTERM)
    assert len(answers("please")) == 1 and fake.identified == 2, log.read_text()
    assert [r.msg_seq for r in fake.to("users", USER)] == [1, 1]  # each the first reply to its message
    transcript = ShipPaths(root).transcript(f"qq:c2c:{USER}").read_text(encoding="utf-8")
    users = [json.loads(line) for line in transcript.splitlines() if json.loads(line).get("role") == "user"]
    assert len(users) == 2  # the killed turn left nothing; the replayed one and "next"
    assert SECRET not in log.read_text() and not [t for t in fake.tokens if t in log.read_text()]
