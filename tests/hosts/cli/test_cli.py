"""The ``shipagent`` command through typer's runner: init, run, check, schema, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from typer.testing import CliRunner

from shipagent import ShipAgent
from shipagent.hosts.cli import _app as cli

runner = CliRunner()


def echo_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    last = messages[-1]
    said = next(p.content for p in last.parts if isinstance(p, UserPromptPart))
    return ModelResponse(parts=[TextPart(f"echo: {said}")])


@pytest.fixture
def scripted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the CLI build agents with a scripted model instead of ship.json's (in a project)."""
    (tmp_path / "ship.json").write_text("{}")

    def factory(root: Path, *, model: Any = None, **kwargs: Any) -> ShipAgent:
        return ShipAgent.from_project(root, model=FunctionModel(echo_model), **kwargs)

    monkeypatch.setattr(cli, "agent_factory", factory)


def test_init_creates_project_and_refuses_to_overwrite(tmp_path: Path) -> None:
    target = tmp_path / "demo"
    result = runner.invoke(cli.app, ["init", str(target)])
    assert result.exit_code == 0, result.output
    config = json.loads((target / "ship.json").read_text())
    assert config["name"] == "demo"
    assert config["llm"]["model"] == "openai:gpt-5-mini"
    assert (target / "Agent.md").read_text().startswith("# Role")
    skill = (target / "skills" / "summarize" / "SKILL.md").read_text()
    assert skill.startswith("---\nname: summarize\n")
    schema = json.loads((target / ".ship" / "ship.schema.json").read_text())
    assert "llm" in schema["properties"]

    (target / "Agent.md").write_text("mine")
    again = runner.invoke(cli.app, ["init", str(target)])
    assert again.exit_code == 2
    assert "already exist" in again.output and "--force" in again.output
    assert (target / "Agent.md").read_text() == "mine"  # nothing overwritten

    forced = runner.invoke(cli.app, ["init", str(target), "--force"])
    assert forced.exit_code == 0
    assert (target / "Agent.md").read_text().startswith("# Role")


def test_run_prints_answer_and_persists(tmp_path: Path, scripted: None) -> None:
    result = runner.invoke(cli.app, ["run", "-C", str(tmp_path), "--chat-key", "cli:t", "hello"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "echo: hello"
    transcript = tmp_path / ".ship" / "chats" / "cli%3At" / "history.jsonl"
    lines = [json.loads(line) for line in transcript.read_text().splitlines()]
    assert [(e["role"], e["text"]) for e in lines] == [("user", "hello"), ("assistant", "echo: hello")]


def test_run_json_output(tmp_path: Path, scripted: None) -> None:
    result = runner.invoke(cli.app, ["run", "-C", str(tmp_path), "--json", "hi"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["success"] is True
    assert data["output"] == "echo: hi"
    assert data["toolCalls"] == []
    assert data["usage"]["requests"] == 1
    assert len(data["requestId"]) == 32


def test_run_with_bad_chat_key_is_one_clear_line(tmp_path: Path, scripted: None) -> None:
    result = runner.invoke(cli.app, ["run", "-C", str(tmp_path), "--chat-key", "a\x00b", "hi"])
    assert result.exit_code == 2
    assert "error: chat key" in result.output
    assert "Traceback" not in result.output


def test_run_without_model_names_the_key(tmp_path: Path) -> None:
    (tmp_path / "ship.json").write_text("{}")
    result = runner.invoke(cli.app, ["run", "-C", str(tmp_path), "hi"])
    assert result.exit_code == 2
    assert "llm.model is not set" in result.output


def test_check_reports_configuration(tmp_path: Path) -> None:
    (tmp_path / "ship.json").write_text(
        json.dumps(
            {
                "name": "checked",
                "llm": {"model": "openai:gpt-5-mini", "apiKey": "${SECRET_KEY_FOR_TEST:-sk-very-secret}"},
                "mcp": {"servers": {"time": {"command": "mcp-server-time"}}},
            }
        )
    )
    # --offline: the key is made up, and the report of what the agent uses is what is tested here
    result = runner.invoke(cli.app, ["check", "--offline", "-C", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "ship.json OK — checked" in result.output
    assert "model: openai:gpt-5-mini apiKey=<set>" in result.output
    assert "sk-very-secret" not in result.output  # secrets never printed
    assert "mcp server time: stdio, enabled" in result.output
    assert "Agent.md: missing" in result.output


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"llm": {"model": "x",}}', "invalid JSON at line 1, column {col}"),
        ('{"llm": {"modle": "x"}}', "unknown key 'llm.modle' (did you mean 'model'?)"),
        (
            '{"context": {"chatHistory": {"inMemoryMaxMessages": "many"}}}',
            "'context.chatHistory.inMemoryMaxMessages'",
        ),
        (
            '{"llm": {"apiKey": "${SHIPAGENT_TEST_UNSET_VAR}"}}',
            "llm.apiKey: environment variable ${SHIPAGENT_TEST_UNSET_VAR}",
        ),
    ],
)
def test_check_errors_exit_2_with_one_line(tmp_path: Path, content: str, expected: str) -> None:
    (tmp_path / "ship.json").write_text(content)
    if "{col}" in expected:  # the column json reports for a trailing comma differs across Pythons
        with pytest.raises(json.JSONDecodeError) as err:
            json.loads(content)
        expected = expected.format(col=err.value.colno)
    result = runner.invoke(cli.app, ["check", "-C", str(tmp_path)])
    assert result.exit_code == 2
    assert expected in result.output
    assert result.output.count("\n") == 1
    assert "Traceback" not in result.output


def test_schema_prints_json_schema() -> None:
    result = runner.invoke(cli.app, ["schema"])
    assert result.exit_code == 0
    schema = json.loads(result.output)
    history = schema["$defs"]["ChatHistoryConfig"]["properties"]
    assert history["inMemoryMaxMessages"]["default"] == 400
    assert history["compactKeepLastMessages"]["default"] == 12
    assert schema["additionalProperties"] is False


def test_check_reports_skills_and_skips_broken_ones(tmp_path: Path) -> None:
    good, broken = tmp_path / "skills" / "good", tmp_path / "skills" / "broken"
    good.mkdir(parents=True)
    broken.mkdir(parents=True)
    (good / "SKILL.md").write_text("---\nname: good\ndescription: does good things\n---\nbody\n")
    (broken / "SKILL.md").write_text("no front matter here\n")
    (tmp_path / "ship.json").write_text('{"llm": {"model": "test"}}')  # a turn could run: exit 0
    result = runner.invoke(cli.app, ["check", "-C", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "skills: 1 usable (good)" in result.output
    assert "skill skipped: skills/broken/SKILL.md: SKILL.md has no front matter" in result.output
