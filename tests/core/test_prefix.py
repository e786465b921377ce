"""A prompt prefix that stays byte-stable: instructions and tools across turns, processes and hours."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent import ShipAgent
from shipagent.agent.models import build_model_settings
from shipagent.config import LlmConfig
from shipagent.tools.context import Resource
from tests.support.paths import ROOT

pytestmark = pytest.mark.anyio
KEY = "cli:me"


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


async def test_three_turns_across_a_minute_boundary_send_identical_instructions_and_tools(
    tmp_path: Path,
) -> None:
    skill = tmp_path / "skills" / "deploy" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: deploy\ndescription: Ship it.\n---\nSteps.\n", encoding="utf-8")
    (tmp_path / "Agent.md").write_text("You are the release bot.", encoding="utf-8")
    ship = {"name": "rel", "agent": {"archetype": "employee"}, "capabilities": {"deploy": ["deploy_tool"]}}
    (tmp_path / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    seen: list[tuple[str, Any]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        tools = [(t.name, t.description, t.parameters_json_schema) for t in info.function_tools]
        seen.append((info.instructions or "", json.dumps(tools, sort_keys=True)))
        return ModelResponse(parts=[TextPart("ok")])

    agent = ShipAgent.from_project(tmp_path, model=FunctionModel(model))
    agent.context_runtime.pool.add_resource(Resource("runner", "agent", tools=("deploy_tool",)))
    clock = Clock(datetime(2026, 11, 23, 9, 59, 58, tzinfo=UTC))
    agent.clock = clock
    async with agent:
        for moment in ((9, 59, 58), (10, 0, 1), (10, 1, 30)):
            clock.now = datetime(2026, 11, 23, *moment, tzinfo=UTC)
            assert (await agent.run(KEY, f"turn at {moment}")).success
        assert len(seen) == 3
        assert seen[0] == seen[1] == seen[2]  # byte-identical instructions and tool definitions
        instructions = seen[0][0]
        assert "Today's date: 2026-11-23 (Monday, UTC)" in instructions
        assert "09:59" not in instructions and "10:0" not in instructions
        assert "- As of: 2026-11-23T00:00:00Z" in instructions  # the agent's clock, by the day
        assert "- deploy — Ship it." in instructions and "## Capability catalog" in instructions
        records = agent.ledger(KEY)
        assert len({r.prefix_hash for r in records}) == 1

        # Something the model sees changes (a second runner): the prefix changes once, then is
        # stable again.
        agent.context_runtime.pool.add_resource(Resource("runner-2", "agent", tools=("deploy_tool",)))
        for _ in range(2):
            assert (await agent.run(KEY, "after the change")).success
    assert seen[3] != seen[2] and seen[3] == seen[4]
    assert "- Total resources: 2" in seen[3][0]
    hashes = [r.prefix_hash for r in agent.ledger(KEY)]
    assert hashes[:3] == [hashes[0]] * 3 and hashes[3] == hashes[4] != hashes[0]

    # A new day is a real change too, and only then.
    clock.now = datetime(2026, 11, 24, 0, 0, 5, tzinfo=UTC)
    async with agent:
        assert (await agent.run(KEY, "next day")).success
    assert "Today's date: 2026-11-24 (Tuesday, UTC)" in seen[-1][0]


def test_anthropic_gets_cache_breakpoints_on_instructions_and_tools_by_default() -> None:
    settings: dict[str, Any] = dict(build_model_settings(LlmConfig(model="anthropic:claude-sonnet-4-6")))
    assert settings["anthropic_cache_instructions"] is True
    assert settings["anthropic_cache_tool_definitions"] is True
    by_provider = dict(build_model_settings(LlmConfig(model="claude-sonnet-4-6", provider="anthropic")))
    assert by_provider["anthropic_cache_instructions"] is True
    assert "anthropic_cache_instructions" not in dict(
        build_model_settings(LlmConfig(model="openai:gpt-5-mini"))
    )


def _release_project(root: Path) -> None:
    (root / "ship.json").write_text(
        json.dumps({"name": "rel", "agent": {"archetype": "employee"}, "capabilities": {"deploy": ["t"]}}),
        encoding="utf-8",
    )


async def test_two_processes_render_the_same_pool_to_the_same_instructions(tmp_path: Path) -> None:
    """Two workers started hours apart, same pool, same day: the same prompt prefix on both."""
    _release_project(tmp_path)
    seen: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info.instructions or "")
        return ModelResponse(parts=[TextPart("ok")])

    for hour in (3, 17):  # each agent stands for one process of a cluster
        agent = ShipAgent.from_project(tmp_path, model=FunctionModel(model), project_lock=False)
        agent.clock = Clock(datetime(2026, 11, 23, hour, 12, 7, 654321, tzinfo=UTC))
        async with agent:
            assert (await agent.run(f"cli:w{hour}", "hello")).success
    assert len(seen) == 2 and seen[0] == seen[1]
    assert "- As of: 2026-11-23T00:00:00Z" in seen[0]


@pytest.mark.skipif(shutil.which("faketime") is None, reason="faketime (apt: faketime) is not installed")
def test_the_prefix_test_passes_with_the_wall_clock_at_0959() -> None:
    """The minute-boundary test under a wall clock at 09:59:58: nothing in the prefix reads it."""
    here = Path(__file__).resolve()
    name = "test_three_turns_across_a_minute_boundary_send_identical_instructions_and_tools"
    done = subprocess.run(
        [
            "faketime",
            "2026-11-23 09:59:58",
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",  # one test: no worker processes (the pyproject's addopts ask for them)
            f"{here}::{name}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TZ": "UTC"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
