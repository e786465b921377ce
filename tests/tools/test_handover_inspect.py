"""Inspecting what was handed over, and the bounds a long-lived agent keeps on its task records."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent import ShipAgent
from shipagent.errors import NotFoundError
from shipagent.tools.handover import Box, Card, JsonContent, TextContent
from shipagent.tools.handover import _runtime as runtime
from shipagent.tools.handover._inspect import format_box

pytestmark = pytest.mark.anyio


def _answer(_m: list[ModelMessage], _i: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("answer")])


def test_format_box_shows_every_card_and_shortens_long_content() -> None:
    when = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    box = Box("b1", "demo", ["c1", "c2"], when)
    cards = [
        Card(
            "c1",
            "demo",
            "task.instruction",
            TextContent("line one\nline two" + "x" * 30),
            "fork_join",
            {"role": "user"},
            when,
        ),
        Card(
            "c2",
            "demo",
            "meta.parent_pointer",
            JsonContent({"parent_agent_id": "boss"}),
            "fork_join",
            {"role": "system"},
            when,
        ),
    ]
    assert format_box(box, cards, max_chars=40).splitlines() == [
        "box b1 · project demo · 2 card(s) · created 2026-03-04 05:06:07 UTC",
        "[1] task.instruction · role user · by fork_join · 05:06:07 · c1",
        "    line one",
        "    line two" + "x" * 23 + "… (+7 chars)",
        "[2] meta.parent_pointer · role system · by fork_join · 05:06:07 · c2",
        "    {",
        '      "parent_agent_id": "boss"',
        "    }",
    ]


async def test_describe_box_reads_from_the_store(tmp_path: Path) -> None:
    (tmp_path / "ship.json").write_text(
        json.dumps({"name": "demo", "profiles": {"w": {"instructions": "w"}}})
    )
    agent = ShipAgent.from_project(tmp_path)
    task = await agent.handover.prepare("api:chat:me", profile_name="w", instruction="Draft the memo.")
    text = await agent.handover.describe_box(task.context_box_id)
    assert "2 card(s)" in text
    assert "[1] task.instruction · role user · by delegate_async" in text
    assert "    Draft the memo." in text
    assert "[2] meta.parent_pointer · role system" in text
    with pytest.raises(NotFoundError, match="nope"):
        await agent.handover.describe_box("nope")
    await agent.handover.aclose()


async def test_finished_tasks_are_forgotten_beyond_the_bound_but_their_boxes_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "MAX_REMEMBERED_TASKS", 2)
    (tmp_path / "ship.json").write_text(json.dumps({"profiles": {"w": {"instructions": "w"}}}))
    agent = ShipAgent.from_project(
        tmp_path, model=FunctionModel(_answer), profile_models={"w": FunctionModel(_answer)}
    )
    handover = agent.handover
    pending = await handover.prepare("api:chat:me", profile_name="w", instruction="never started")
    done = []
    for i in range(3):
        task = await handover.prepare("api:chat:me", profile_name="w", instruction=f"task {i}")
        done.append(await handover.run(task))
    assert [t.status for t in done] == ["done"] * 3
    # the oldest finished task was forgotten; the one still pending never is
    with pytest.raises(NotFoundError, match=done[0].task_id):
        await handover.wait(done[0].task_id, 0)
    assert (await handover.wait(pending.task_id, 0)).status == "running"
    assert (await handover.wait(done[2].task_id, 0)).output == "answer"
    # what it was given and what it answered are still in the store
    assert [c.content for c in await handover.read_box(done[0].output_box_id or "")] == [
        TextContent("task 0"),
        TextContent("answer"),
    ]
    await handover.aclose()
