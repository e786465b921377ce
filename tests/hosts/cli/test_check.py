"""``shipagent check`` tells the truth, and ``shipagent chat`` checks before it prompts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel
from typer.testing import CliRunner

from shipagent import ShipAgent
from shipagent.hosts.cli import _app as cli
from shipagent.hosts.cli._checks import PROJECT_CHECKS, Problem, check_project

runner = CliRunner()


def project(root: Path, ship: dict[str, Any]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    return root


BROKEN = {
    "llm": {"model": "m", "provider": "opneai"},
    "tools": {"modules": ["shipagent_no_such_module", "toolless"]},
    "profiles": {"writer": {"agentMd": "profiles/writer.md"}},
    "context": {"chatHistory": {"inMemoryMaxMessages": 10, "compactKeepLastMessages": 10}},
    "mcp": {"servers": {"gone": {"command": "shipagent-no-such-command"}}},
}


def test_every_problem_is_found_with_its_key(tmp_path: Path) -> None:
    root = project(tmp_path, BROKEN)
    (root / "toolless.py").write_text("x = 1\n")
    problems = check_project(root)
    assert [(p.level, p.key) for p in problems] == [
        ("error", "llm.provider"),
        ("error", "context.chatHistory.compactKeepLastMessages"),
        ("error", "tools.modules[0]"),
        ("error", "tools.modules[1]"),
        ("error", "profiles.writer.agentMd"),
        ("warning", "mcp.servers.gone.command"),
    ]
    text = "\n".join(p.message for p in problems)
    assert "unknown provider 'opneai' (did you mean 'openai'?)" in text
    assert "cannot import 'shipagent_no_such_module'" in text
    assert "module 'toolless' has no 'toolset' attribute" in text
    assert "file 'profiles/writer.md' does not exist" in text
    assert "'shipagent-no-such-command' is not on PATH" in text


def test_check_command_lists_them_all_and_exits_1(tmp_path: Path) -> None:
    root = project(tmp_path, BROKEN)
    result = runner.invoke(cli.app, ["check", "-C", str(root)])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    warnings = [line for line in result.output.splitlines() if line.startswith("warning: ")]
    assert len(errors) == 5 and len(warnings) == 1
    assert "5 problem(s) would make a turn fail" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("llm", "expected"),
    [
        ({}, "error: llm.model is not set"),
        (
            {"model": "openai:gpt-5-mini"},
            "error: llm.model 'openai:gpt-5-mini' needs an API key: set the environment variable OPENAI_API_KEY",
        ),
        ({"model": "m", "provider": "openai-compatible"}, "error: llm.baseUrl is not set"),
        ({"model": "opneai:gpt-5"}, "error: llm.model: unknown provider 'opneai' (did you mean 'openai'?)"),
    ],
)
def test_model_problems_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: dict[str, Any], expected: str
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = runner.invoke(cli.app, ["check", "-C", str(project(tmp_path, {"llm": llm}))])
    assert result.exit_code == 1, result.output
    assert expected in result.output
    assert "OpenAIProvider(" not in result.output and "Agent('test')" not in result.output


def test_a_key_in_the_environment_or_ship_json_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --offline: the keys are made up; whether the server takes them is test_check_probe's part
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    root = project(tmp_path / "a", {"llm": {"model": "openai:gpt-5-mini"}})
    assert runner.invoke(cli.app, ["check", "--offline", "-C", str(root)]).exit_code == 0
    monkeypatch.delenv("OPENAI_API_KEY")
    root = project(tmp_path / "b", {"llm": {"model": "gpt-5-mini", "provider": "openai", "apiKey": "sk-x"}})
    result = runner.invoke(cli.app, ["check", "--offline", "-C", str(root)])
    assert result.exit_code == 0, result.output
    assert "sk-x" not in result.output


def test_warnings_alone_exit_0(tmp_path: Path) -> None:
    root = project(
        tmp_path,
        {"llm": {"model": "test"}, "mcp": {"servers": {"gone": {"command": "shipagent-no-such-command"}}}},
    )
    result = runner.invoke(cli.app, ["check", "-C", str(root)])
    assert result.exit_code == 0, result.output
    assert "warning: mcp.servers.gone.command: 'shipagent-no-such-command' is not on PATH" in result.output


def test_a_clean_project_has_no_problems(tmp_path: Path) -> None:
    root = project(tmp_path, {"llm": {"model": "test"}, "profiles": {"w": {"agentMd": "w.md"}}})
    (root / "w.md").write_text("You write.")
    problems = check_project(root)
    assert [
        p for p in problems if p.key != "permissions.execShell"
    ] == []  # the sandbox depends on the machine


def test_more_checks_plug_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def sandbox(root: Path, config: Any) -> list[Problem]:
        return [
            Problem("warning", "exec_shell: no sandbox (bwrap not found)", "permissions.execShell.sandbox")
        ]

    monkeypatch.setattr("shipagent.hosts.cli._checks.PROJECT_CHECKS", [*PROJECT_CHECKS, sandbox])
    result = runner.invoke(cli.app, ["check", "-C", str(project(tmp_path, {"llm": {"model": "test"}}))])
    assert result.exit_code == 0
    assert "warning: exec_shell: no sandbox (bwrap not found)" in result.output


# -- chat checks before it prompts ------------------------------------------------------------------


def test_chat_with_a_problem_exits_before_the_prompt(tmp_path: Path) -> None:
    root = project(tmp_path, {"llm": {"model": "test"}, "tools": {"modules": ["shipagent_no_such_module"]}})
    result = runner.invoke(cli.app, ["chat", "-C", str(root)], input="hello\n")
    assert result.exit_code == 1, result.output
    assert "error: tools.modules[0]: cannot import 'shipagent_no_such_module'" in result.output
    assert "chat key" not in result.output  # the banner line before the prompt never came
    assert not (root / ".ship" / "chats").exists()


def test_chat_without_a_model_exits_before_the_prompt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    root = project(tmp_path, {"llm": {"model": "openai:gpt-5-mini"}})
    result = runner.invoke(cli.app, ["chat", "-C", str(root)], input="hello\n")
    assert result.exit_code == 1
    assert "set the environment variable OPENAI_API_KEY" in result.output
    assert "chat key" not in result.output


def test_chat_validates_the_chat_key_first(tmp_path: Path) -> None:
    root = project(tmp_path, {"llm": {"model": "test"}})
    result = runner.invoke(cli.app, ["chat", "-C", str(root), "-k", "bad\x01key"], input="hello\n")
    assert result.exit_code == 2
    assert "error: --chat-key:" in result.output
    assert "chat key bad" not in result.output


def test_chat_warns_and_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def factory(root: Path, *, model: Any = None, **kwargs: Any) -> ShipAgent:
        reply = FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("pong")]))
        return ShipAgent.from_project(root, model=reply, **kwargs)

    monkeypatch.setattr(cli, "agent_factory", factory)
    root = project(
        tmp_path, {"mcp": {"servers": {"gone": {"command": "shipagent-no-such-command", "enabled": False}}}}
    )
    result = runner.invoke(cli.app, ["chat", "-C", str(root)], input="ping\n/exit\n")
    assert result.exit_code == 0, result.output
    assert "pong" in result.output  # no ship.json model needed: the agent's own model is what counts


# -- the exec_shell sandbox through check_project -------------------------------------


@pytest.fixture
def no_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin-without-bwrap"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def test_sandbox_required_but_unavailable_is_an_error(tmp_path: Path, no_bwrap: None) -> None:
    root = project(
        tmp_path / "p", {"llm": {"model": "test"}, "permissions": {"execShell": {"sandbox": "required"}}}
    )
    result = runner.invoke(cli.app, ["check", "-C", str(root)])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "bwrap is not on PATH" in errors[0]


def test_sandbox_unavailable_in_auto_is_a_warning(tmp_path: Path, no_bwrap: None) -> None:
    root = project(tmp_path / "p", {"llm": {"model": "test"}})
    result = runner.invoke(cli.app, ["check", "-C", str(root)])
    assert result.exit_code == 0, result.output
    warnings = [
        line for line in result.output.splitlines() if line.startswith("warning: ") and "bwrap" in line
    ]
    assert len(warnings) == 1  # listed once, not by the hook and check_project both
