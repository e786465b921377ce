"""A turn whose commit fails (disk full): failed only if the message log did not take it.

The message-log append is the commit point. If it fails, the run is a failure and the chat goes
on from what is on disk. If a later write (transcript, agent-context log) fails, the turn *is*
saved: reporting it as failed would make the caller retry it and say it twice. The log error is
logged and the missing entries are rebuilt from the message log before the chat's next turn.
"""

from __future__ import annotations

import errno
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent import ShipAgent
from shipagent.store.logs import AgentContextLog, MessageLog, Transcript

pytestmark = pytest.mark.anyio
KEY = "api:chat:disk"


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart(f"answer {len(messages)}")])


def full(*args: Any, **kwargs: Any) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


async def test_message_log_full_is_a_failed_run_and_the_chat_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = ShipAgent.from_project(tmp_path, model=FunctionModel(answer))
    first = await agent.run(KEY, "one")
    assert first.success

    monkeypatch.setattr(MessageLog, "append_turn", full)
    failed = await agent.run(KEY, "two")
    assert not failed.success
    assert failed.output.startswith("The turn ran but could not be saved (OSError: [Errno 28] No space left")

    monkeypatch.undo()
    third = await agent.run(KEY, "three")
    assert third.success
    fresh = ShipAgent.from_project(tmp_path, model=FunctionModel(answer))
    assert agent.history(KEY) == fresh.history(KEY)
    said = [e["text"] for e in lines(agent.transcript.path(KEY)) if e["role"] == "user"]
    assert said == ["one", "three"]


@pytest.mark.parametrize("store", [Transcript, AgentContextLog])
async def test_a_log_write_failing_after_the_commit_is_not_a_failed_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, store: type
) -> None:
    agent = ShipAgent.from_project(tmp_path, model=FunctionModel(answer))
    assert (await agent.run(KEY, "one")).success

    name = "append_turn" if store is Transcript else "append"
    monkeypatch.setattr(store, name, full)
    with caplog.at_level(logging.ERROR, logger="shipagent.window"):
        second = await agent.run(KEY, "two")
    assert second.success, second.output  # saved in the message log: a retry would say it twice
    assert second.output == "answer 3"
    assert any("is saved, but writing its transcript/logs failed" in r.message for r in caplog.records)

    monkeypatch.undo()
    assert (await agent.run(KEY, "three")).success
    # Before the third turn ran, the second turn's missing entries were rebuilt, in order.
    transcript = lines(agent.transcript.path(KEY))
    assert [(e["role"], e["text"], e.get("recovered", False)) for e in transcript] == [
        ("user", "one", False),
        ("assistant", "answer 1", False),
        ("user", "two", store is Transcript),
        ("assistant", "answer 3", store is Transcript),
        ("user", "three", False),
        ("assistant", "answer 5", False),
    ]
    context = lines(agent.agent_context.path(KEY))
    assert [(e["userPreview"], e.get("recovered", False)) for e in context] == [
        ("one", False),
        ("two", True),  # the transcript failing first means this write never ran either
        ("three", False),
    ]
    assert [e["requestId"] for e in context] == [e["requestId"] for e in transcript[::2]]
