"""Budgets in durable mode: a turn resumed after kill -9 counts each model response once.

A durable worker that resumes a turn gets its recorded model responses back from the database
instead of asking the model again; the chat's usage must not count them a second time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shipagent.chatkeys import ShipPaths
from tests.hosts.durable.test_durable import killed_mid_turn
from tests.support.durable import durable_project, read_jsonl

pytestmark = pytest.mark.anyio


async def test_a_resumed_turn_counts_each_model_response_once(tmp_path: Path) -> None:
    project = durable_project(tmp_path / "p", "sqlite")
    # killed inside the 2nd model request; the new worker replays the 1st from its record
    async with killed_mid_turn(project, "worker-u", "chat:usage", "inject:t8", "turn-usage", "t8") as crash:
        pass
    assert crash.result.success
    phases = [(q["phase"], q["pid"]) for q in read_jsonl(project / "signals" / "requests.jsonl")]
    assert phases == [
        ("first", crash.first_pid),
        ("after-tool", crash.first_pid),  # killed before it answered: no usage reported
        ("after-tool", crash.second_pid),
    ]
    usage = json.loads((ShipPaths(project).chat_dir("chat:usage") / "usage.json").read_text())
    (day,) = usage["days"]
    assert day["requests"] == 2 and day["inputTokens"] > 0  # the 1st once, then the one that answered
    assert usage["turns"] == {"turn-usage": 2}
