"""Pinned facts: kept in every request's instructions, never folded by a compaction, evicted only on request.

Through a real :class:`ShipAgent` on a project directory with a scripted ``FunctionModel``: the
pins live in ``.ship/chats/<key>/pins.json``, the model reads them at the end of its instructions,
the budget refuses a pin that does not fit (naming what to unpin), the model pins and unpins with
its tools, a process killed mid-write leaves a whole file, and no chat key reaches outside ``.ship``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent import Pin, ShipAgent, StepEvent
from shipagent.chatkeys import ShipPaths
from shipagent.config import PinsConfig
from shipagent.errors import BadRequestError, ChatKeyError
from shipagent.store.pins import PINS_FILE, PinError, PinsFileError, PinStore, pins_tokens
from tests.support.core import last_user_text, make_project, user_texts

pytestmark = pytest.mark.anyio

KEY = "api:chat:1"
SMALL_MARKS = {"context": {"chatHistory": {"inMemoryMaxMessages": 6, "compactKeepLastMessages": 2}}}
"""A chat that compacts every few turns: 6 messages at most, 2 kept."""


class Recorder:
    """A FunctionModel that keeps the instructions and tool names of every request it gets."""

    def __init__(self, reply: Any = None) -> None:
        self.instructions: list[str] = []
        self.tools: list[list[str]] = []
        self.requests: list[list[ModelMessage]] = []
        self._reply = reply
        self.model = FunctionModel(self._call)

    def _call(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.instructions.append(info.instructions or "")
        self.tools.append([t.name for t in info.function_tools])
        self.requests.append(list(messages))
        if self._reply is not None:
            reply: ModelResponse = self._reply(messages, len(self.requests))
            return reply
        return ModelResponse(parts=[TextPart(f"noted: {last_user_text(messages)}")])


def _agent(root: Path, model: Any) -> ShipAgent:
    agent = ShipAgent.from_project(root, model=model)
    agent.clock = lambda: datetime(2026, 1, 5, 9, 0, tzinfo=UTC)  # one date: the prefix may not move
    return agent


def _pins_section(instructions: str) -> str:
    return instructions[instructions.index("## Pinned facts") :] if "## Pinned facts" in instructions else ""


async def test_pins_survive_ten_compactions_and_leave_only_on_request(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", SMALL_MARKS)
    model = Recorder()
    agent = _agent(root, model.model)
    name = await agent.pin(KEY, "The user's name is Ada Lovelace.")
    tea = await agent.pin(KEY, "  The user drinks   tea,\nnever coffee. ")
    assert (name.id, tea.id, tea.text, tea.by) == ("p1", "p2", "The user drinks tea, never coffee.", "api")
    events: list[StepEvent] = []
    turns = 0
    while sum(e.type == "compaction" for e in events) < 10:
        turns += 1
        assert turns <= 80, "ten compactions never happened"
        result = await agent.run(KEY, f"note {turns}: the weather is {turns} degrees", on_step=events.append)
        assert result.success, result.output
    # the history the model sees was folded ten times: the first notes are gone from the messages…
    assert not any(text.startswith("note 1:") for text in user_texts(model.requests[-1]))
    # …but every request carried the pins, at the end of its instructions, byte for byte the same
    assert all(_pins_section(i) == _pins_section(model.instructions[0]) for i in model.instructions)
    assert len(set(model.instructions)) == 1  # compactions never moved the instructions prefix
    section = _pins_section(model.instructions[-1])
    assert "- [p1] The user's name is Ada Lovelace.\n- [p2] The user drinks tea, never coffee." in section
    assert model.instructions[-1].endswith(section)
    assert [p.id for p in await agent.pins(KEY)] == ["p1", "p2"]  # nothing evicted on its own

    assert await agent.unpin(KEY, "p1") is True
    assert await agent.unpin(KEY, "p1") is False  # gone, and says so
    await agent.run(KEY, "one more")
    assert "Ada" not in model.instructions[-1] and "[p2] The user drinks tea" in model.instructions[-1]
    assert (await agent.pin(KEY, "The user lives in Leeds.")).id == "p3"  # ids are never reused
    assert await agent.unpin(KEY, "2") and await agent.unpin(KEY, "P3")  # as people write ids
    await agent.run(KEY, "and another")
    assert "Pinned facts" not in model.instructions[-1]


async def test_a_pin_over_the_budget_is_refused_naming_the_oldest_pins_to_unpin(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", {"context": {"pins": {"maxTokens": 40}}})
    agent = _agent(root, Recorder().model)
    facts = ["The user's name is Ada.", "Ada prefers short answers.", "The launch is on March 3rd."]
    for fact in facts:
        await agent.pin(KEY, fact)
    before = (root / ".ship" / "chats" / "api%3Achat%3A1" / PINS_FILE).read_bytes()
    extra = "The staging server is called Hopper and runs on port 8443."
    assert pins_tokens([*(await agent.pins(KEY))]) <= 40
    with pytest.raises(PinError) as refused:
        await agent.pin(KEY, extra)
    message = str(refused.value)
    assert "context.pins.maxTokens (40" in message and "unpin p1" in message
    assert '"The user\'s name is Ada."' in message  # the pin to unpin, by id and by its text
    assert refused.value.unpin[0] == "p1"
    assert isinstance(refused.value, BadRequestError)
    assert (root / ".ship" / "chats" / "api%3Achat%3A1" / PINS_FILE).read_bytes() == before  # untouched
    for pin_id in refused.value.unpin:  # the named pins free exactly enough room
        assert await agent.unpin(KEY, pin_id)
    added = await agent.pin(KEY, extra)
    assert added.id == "p4"
    assert pins_tokens(await agent.pins(KEY)) <= 40

    with pytest.raises(PinError, match=r"this pin is \d+ tokens.*shorten it") as alone:
        await agent.pin(KEY, "word " * 60)
    assert alone.value.unpin == ()  # no unpinning would make room
    with pytest.raises(PinError, match="empty"):
        await agent.pin(KEY, " \n\t ")


async def test_the_model_pins_and_unpins_with_its_tools(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", {"context": {"pins": {"maxTokens": 30}}})
    results: list[dict[str, Any]] = []

    def reply(messages: list[ModelMessage], n: int) -> ModelResponse:
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if returns:
            results.append(returns[-1].model_response_object())
            return ModelResponse(parts=[TextPart("done")])
        said = last_user_text(messages)
        if said.startswith("pin "):
            return ModelResponse(
                parts=[ToolCallPart("context_pin", {"text": said[4:]}, tool_call_id=f"c{n}")]
            )
        if said.startswith("unpin "):
            args = {"pin_id": said[6:]}
            return ModelResponse(parts=[ToolCallPart("context_unpin", args, tool_call_id=f"c{n}")])
        return ModelResponse(parts=[TextPart("ok")])

    model = Recorder(reply)
    agent = _agent(root, model.model)
    assert (await agent.run(KEY, "pin The user is called Grace.")).success
    assert {"context_pin", "context_unpin"} <= set(model.tools[0])
    assert results[-1]["success"] is True and results[-1]["pinned"]["id"] == "p1"
    (pin,) = await agent.pins(KEY)
    assert (pin.text, pin.by) == ("The user is called Grace.", "model")
    await agent.run(KEY, "hello")
    assert "- [p1] The user is called Grace." in model.instructions[-1]
    assert "context_unpin" in _pins_section(model.instructions[-1])  # the model is told how to unpin

    more = "Grace likes long walks in the hills, hates rain, and reads science fiction every night."
    assert (await agent.run(KEY, "pin " + more)).success
    refused = results[-1]
    assert refused["success"] is False and refused["unpin"] == ["p1"] and "p1" in refused["error"]
    assert [p.id for p in await agent.pins(KEY)] == ["p1"]  # a refusal evicts nothing

    assert (await agent.run(KEY, "unpin p9")).success
    assert results[-1]["success"] is False and "p1" in results[-1]["error"]  # names the pins there are
    assert (await agent.run(KEY, "unpin p1")).success
    assert results[-1] == {"success": True, "unpinned": "p1", "remaining": []}
    await agent.run(KEY, "hello again")
    assert "Grace" not in model.instructions[-1]


async def test_with_the_tool_off_pins_still_reach_the_model(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", {"context": {"pins": {"enabled": False}}})
    model = Recorder()
    agent = _agent(root, model.model)
    await agent.pin(KEY, "The user's timezone is Europe/Oslo.")
    await agent.run(KEY, "hi")
    assert not {"context_pin", "context_unpin"} & set(model.tools[-1])
    section = _pins_section(model.instructions[-1])
    assert "- [p1] The user's timezone is Europe/Oslo." in section and "context_unpin" not in section


async def test_pins_outlive_the_process_and_a_cleared_context(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    first = _agent(root, Recorder().model)
    await first.pin(KEY, "The user's name is Ada.")
    await first.clear(KEY)  # /new empties the history, not the pins
    model = Recorder()
    second = _agent(root, model.model)  # a new process reads pins.json
    assert [p.text for p in await second.pins(KEY)] == ["The user's name is Ada."]
    await second.run(KEY, "who am I?")
    assert "- [p1] The user's name is Ada." in model.instructions[-1]
    assert (await second.pin(KEY, "Ada likes tea.")).id == "p2"
    assert await second.pins("api:chat:2") == []  # another chat has its own pins


async def test_a_damaged_pins_file_fails_no_turn_and_is_never_overwritten(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = make_project(tmp_path / "p")
    model = Recorder()
    agent = _agent(root, model.model)
    await agent.pin(KEY, "The user's name is Ada.")
    path = agent.pin_store.path(KEY)
    path.write_text('{"pins": [{"id": "p1", "text": "The user', encoding="utf-8")  # cut short by hand
    result = await agent.run(KEY, "hello")
    assert result.success and "Pinned facts" not in model.instructions[-1]
    assert str(path) in caplog.text
    with pytest.raises(PinsFileError, match=rf"{PINS_FILE} is not valid JSON.*fix it or delete it"):
        await agent.pin(KEY, "Ada likes tea.")
    assert path.read_text(encoding="utf-8").endswith('"The user')  # left as the user left it
    path.write_text(json.dumps({"pins": [{"id": "q1", "text": "x", "created": "now", "by": "user"}]}))
    with pytest.raises(PinsFileError, match=r"pins\[0\] needs string fields id \(p<number>\)"):
        await agent.pins(KEY)


async def test_no_chat_key_puts_the_pins_outside_the_ship_folder(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    agent = _agent(root, Recorder().model)
    chats = (root / ".ship" / "chats").resolve()
    keys = ["../../outside", "..", ".", "a/../../../b", "/etc/passwd", "C:\\x", "~root", "x" * 400]
    for key in keys:
        pin = await agent.pin(key, f"fact of {key[:20]}")
        path = agent.pin_store.path(key).resolve()
        assert path.parent.parent == chats and path.name == PINS_FILE, key
        assert [p.id for p in await agent.pins(key)] == [pin.id]
    written = {p.resolve() for p in await anyio.to_thread.run_sync(lambda: list(tmp_path.rglob(PINS_FILE)))}
    assert len(written) == len(keys) and all(p.is_relative_to(chats) for p in written)
    for bad in ("", "a\x00b", "line\nbreak"):
        with pytest.raises(ChatKeyError):
            await agent.pin(bad, "x")


async def test_a_failed_write_leaves_the_previous_pins_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PinStore(ShipPaths(tmp_path), PinsConfig())
    await store.add(KEY, "The user's name is Ada.", by="user")
    path = store.path(KEY)
    before = path.read_bytes()

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)  # the new file is written, never made durable
    with pytest.raises(OSError, match="No space left"):
        await store.add(KEY, "Ada likes tea.", by="user")
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [PINS_FILE]  # no temp file left behind
    assert (await store.add(KEY, "Ada likes tea.", by="user")).id == "p2"


_WRITER = """
import sys
from pathlib import Path
from shipagent.chatkeys import ShipPaths
from shipagent.config import PinsConfig
from shipagent.store.pins import PinStore

store = PinStore(ShipPaths(Path(sys.argv[1])), PinsConfig())
n = 0
while True:
    n += 1
    store.add_sync("api:chat:1", f"fact number {n} " + "x" * 200, by="api")
    for older in store.load_sync("api:chat:1")[:-1]:
        store.remove_sync("api:chat:1", older.id)
"""


def test_a_process_killed_mid_write_leaves_a_whole_pins_file(tmp_path: Path) -> None:
    """SIGKILL at an arbitrary point of a rewrite loop: the file is the old one or the new one."""
    store = PinStore(ShipPaths(tmp_path), PinsConfig())
    path = store.path(KEY)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")])}
    for round_ in range(3):
        writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path)], env=env)
        try:
            deadline = time.monotonic() + 60
            while _next_id(path) < 40 * (round_ + 1) and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            writer.send_signal(signal.SIGKILL)
            writer.wait()
        pins = store.load_sync(KEY)  # parses: never half a file
        assert 1 <= len(pins) <= 2 and all(p.text.startswith("fact number ") for p in pins)
        assert all(isinstance(p, Pin) and len(p.text) > 200 for p in pins)
    issued = _next_id(path)
    assert store.add_sync(KEY, "after the crashes", by="api").id == f"p{issued}"


def _next_id(path: Path) -> int:
    try:
        return int(json.loads(path.read_bytes())["next"])
    except (FileNotFoundError, ValueError, KeyError):
        return 0
