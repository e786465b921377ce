"""A turn whose commit fails (disk full) is a failed run, and the chat recovers from what is on disk."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent import ShipAgent
from shipagent.history.stores import Transcript

pytestmark = pytest.mark.anyio
KEY = "api:chat:disk"


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart(f"answer {len(messages)}")])


async def test_disk_full_during_commit_is_a_failed_run_and_the_chat_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = ShipAgent.from_project(tmp_path, model=FunctionModel(answer))
    first = await agent.run(KEY, "one")
    assert first.success

    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    # The message log is written, then the transcript append fails: half a turn is on disk.
    monkeypatch.setattr(Transcript, "append_turn", full)
    failed = await agent.run(KEY, "two")
    assert not failed.success
    assert failed.output.startswith("The turn ran but could not be saved (OSError: [Errno 28] No space left")

    monkeypatch.undo()
    third = await agent.run(KEY, "three")
    assert third.success
    # The in-memory history was dropped and rebuilt from the message log, which holds what did land.
    fresh = ShipAgent.from_project(tmp_path, model=FunctionModel(answer))
    assert agent.history(KEY) == fresh.history(KEY)
