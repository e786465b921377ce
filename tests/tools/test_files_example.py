"""The documentation's context-files example (examples/context_files.py), run through ShipAgent."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.support.paths import ROOT

EXAMPLE = ROOT / "examples" / "context_files.py"
README = ROOT / "docs" / "guides/context-files.md"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("context_files_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.anyio
async def test_the_example_finds_the_failure_in_a_spilled_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The model calls build_log, gets the preview, greps the file for FAILED and answers."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        [*_, last] = messages
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(parts=[ToolCallPart("build_log", {})])
        if returns[0].tool_name == "build_log":
            preview = returns[0].model_response_str()
            assert len(preview.encode()) < 2600
            ref_id = preview.split("id='")[1].split("'")[0]
            return ModelResponse(parts=[ToolCallPart("context_grep", {"id": ref_id, "pattern": "failed"})])
        found = json.loads(returns[0].model_response_str())
        [match] = found["matches"]
        return ModelResponse(parts=[TextPart(f"Line {match['line']}: {match['content']}")])

    example = load_example()
    output = await example.why_did_the_build_fail(tmp_path, FunctionModel(model))
    assert output == "Line 50001: step 50000: FAILED writing dist/app.whl: No space left on device"
    printed = capsys.readouterr().out.split()
    assert printed[1:] == ["artifact", "1,977,845", "bytes", "tool:build_log"]


def test_the_readme_shows_the_example_verbatim() -> None:
    readme = README.read_text(encoding="utf-8")
    if "# Context files" not in readme:
        pytest.fail(f"{README} lost its section")
    assert EXAMPLE.read_text(encoding="utf-8").strip() in readme
