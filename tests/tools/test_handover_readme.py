"""The documentation's handover example, run as written: profiles in ship.json, fork_join, inspecting a box."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import ROOT

README = ROOT / "docs" / "guides/handover.md"
SECTION = "# Hand work to other agents"

SHIP_JSON = """\
{
  "profiles": {
    "researcher": { "instructions": "You find risks. Answer in one line.", "tools": ["context_read"] },
    "writer": { "instructions": "You write short, punchy copy.", "model": "openai:gpt-5-mini" }
  },
  "handover": { "maxDepth": 2, "maxSubagentsPerRun": 4 }
}
"""

EXAMPLE = '''\
import asyncio
import json

from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from shipagent import ShipAgent


def orchestrator(messages, info):
    """A scripted stand-in for a real model: fork two tasks, then join their answers."""
    last = messages[-1].parts[-1]
    if last.part_kind == "tool-return":
        return ModelResponse(parts=[TextPart(" / ".join(r["output"] for r in last.content["results"]))])
    tasks = [
        {"profile_name": "researcher", "instruction": "List two risks of a Friday launch."},
        {"profile_name": "writer", "instruction": "Write a launch slogan."},
    ]
    return ModelResponse(parts=[ToolCallPart("fork_join", {"tasks": tasks})])


def says(text):
    return FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart(text)]))


async def main():
    agent = ShipAgent.from_project(
        ".",
        model=FunctionModel(orchestrator),
        profile_models={  # tests script sub-agents; omit it to use each profile's model
            "researcher": says("Weekend on-call; no rollback window."),
            "writer": says("Ship it Friday, sleep on Saturday."),
        },
    )
    async with agent:
        result = await agent.run("api:chat:lead", "Plan the launch.")
        print(result.output)
        # every delegation left its boxes behind: look at what the researcher was given
        researcher = json.loads(result.tool_calls[0].output)["results"][0]
        print(await agent.handover.describe_box(researcher["context_box_id"]))


asyncio.run(main())
'''


def _run_example(root: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (root / "ship.json").write_text(SHIP_JSON, encoding="utf-8")
    monkeypatch.chdir(root)
    out = io.StringIO()
    namespace: dict[str, Any] = {"__name__": "__main__"}
    with contextlib.redirect_stdout(out):
        exec(compile(EXAMPLE, "README-example", "exec"), namespace)
    return out.getvalue()


def test_the_example_runs_and_prints_the_joined_answer_and_the_box(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    json.loads(SHIP_JSON)  # the README's ship.json is valid JSON
    printed = _run_example(tmp_path, monkeypatch).splitlines()
    assert printed[0] == "Weekend on-call; no rollback window. / Ship it Friday, sleep on Saturday."
    assert printed[1].startswith("box ") and "· 2 card(s) ·" in printed[1]
    assert printed[2].startswith("[1] task.instruction · role user · by fork_join")
    assert printed[3] == "    List two risks of a Friday launch."
    assert printed[4].startswith("[2] meta.parent_pointer · role system · by fork_join")
    assert printed[5:] == ["    {", '      "parent_agent_id": "api:chat:lead"', "    }"]
    assert (tmp_path / ".ship" / "cardbox.sqlite3").is_file()


def test_the_readme_shows_the_example_verbatim() -> None:
    readme = README.read_text(encoding="utf-8") if README.is_file() else ""
    if SECTION not in readme:
        pytest.fail(f"{README} lost its section")
    assert SHIP_JSON.strip() in readme
    assert EXAMPLE.strip() in readme
