"""The README's promises: short, the two commands first, its Python example runs, CI runs its
test command verbatim, and every document it links to exists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from typer.testing import CliRunner

from shipagent import ShipAgent
from shipagent.hosts.cli import _app as cli
from tests.support.paths import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_exactly_two_setup_commands_and_ci_runs_the_test_one() -> None:
    bash = blocks("bash")
    assert len(bash) == 2
    install, test = (b.strip() for b in bash)
    assert re.search(r"pip install -e '?\.", install) and install.endswith("shipagent chat")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert test in ci.splitlines()


def test_the_readme_is_a_front_page() -> None:
    """At most ~250 lines, and the model server config on its first screen, not far below."""
    lines = README.splitlines()
    assert len(lines) <= 250
    first_screen = "\n".join(lines[:60])
    assert '"provider": "openai-compatible"' in first_screen and '"baseUrl"' in first_screen


def test_every_relative_link_of_the_readme_exists() -> None:
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README)
    assert len(targets) >= 10
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert missing == []


def test_python_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert CliRunner().invoke(cli.app, ["init", str(tmp_path / "my-agent")]).exit_code == 0
    monkeypatch.chdir(tmp_path)

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("A demo project with one skill.")])

    original = ShipAgent.from_project.__func__  # type: ignore[attr-defined]

    def scripted(cls: type[ShipAgent], root: Any, **kwargs: Any) -> ShipAgent:
        kwargs.setdefault("model", FunctionModel(model))
        return original(cls, root, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(ShipAgent, "from_project", classmethod(scripted))
    example = blocks("python")[0]
    exec(compile(example, "README.md", "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out == "A demo project with one skill.\n"
    transcript = tmp_path / "my-agent" / ".ship" / "chats" / "api%3Achat%3Aalice" / "history.jsonl"
    assert transcript.read_text().count("\n") == 2


def test_the_repository_itself_is_an_example_project() -> None:
    """Agent.md and skills/ at the top of the repo are what a newcomer copies: they must load."""
    from shipagent.agent.instructions import read_agent_md
    from shipagent.config import ShipConfig
    from shipagent.tools.skills import scan_skills

    role = read_agent_md(ROOT)
    assert role.startswith("# Role") and "git-change-summary" in role
    scan = scan_skills(ROOT, ShipConfig())
    assert [s.id for s in scan.skills] == ["git-change-summary"]
    assert scan.problems == []
