"""Pinned facts at the terminal: ``/pin`` and ``/unpin`` in ``shipagent chat``, the pins in ``inspect``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from typer.testing import CliRunner

from shipagent import ShipAgent
from shipagent.hosts.cli import _app as cli
from tests.support.core import make_project

runner = CliRunner()
KEY = "cli:pins"


def test_chat_pins_lists_and_unpins_and_the_model_reads_the_pins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_project(tmp_path, {"context": {"pins": {"maxTokens": 30}}})
    seen: list[str] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info.instructions or "")
        return ModelResponse(parts=[TextPart("ok")])

    def factory(root: Path, **kwargs: Any) -> ShipAgent:
        return ShipAgent.from_project(root, **{**kwargs, "model": FunctionModel(reply)})

    monkeypatch.setattr(cli, "agent_factory", factory)
    lines = [
        "/pin The user's name is Ada.",
        "/pin The user's favourite editor is one they wrote themselves, in a language they made up.",
        "/pin",
        "hello",
        "/unpin p1",
        "/unpin p1",
        "/help",
        "/exit",
    ]
    result = runner.invoke(cli.app, ["chat", "-C", str(tmp_path), "-k", KEY], input="\n".join(lines) + "\n")
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())  # rich wraps long lines
    assert "pinned p1: The user's name is Ada." in output
    assert "context.pins.maxTokens (30" in output and "unpin p1" in output  # the second did not fit
    assert "[p1] The user's name is Ada." in output  # /pin alone lists the pins
    assert "- [p1] The user's name is Ada." in seen[-1]
    assert "unpinned p1" in output and "no pin p1" in output and "(nothing is pinned in this chat)" in output
    assert "/unpin" in output.split("/help")[-1]


@pytest.mark.anyio
async def test_inspect_shows_the_pins_against_their_budget(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", {"context": {"pins": {"maxTokens": 300}}})
    agent = ShipAgent.from_project(
        root, model=FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("ok")]))
    )
    await agent.pin(KEY, "The launch is on March 3rd.", by="user")
    await agent.run(KEY, "hello")
    shown = runner.invoke(cli.app, ["inspect", KEY, "-C", str(root)])
    assert shown.exit_code == 0, shown.output
    assert "pinned facts: 1," in shown.output and "of 300 tokens" in shown.output
    assert "p1" in shown.output and "The launch is on March 3rd." in shown.output and "user" in shown.output
    agent.pin_store.path(KEY).write_text("{", encoding="utf-8")
    broken = runner.invoke(cli.app, ["inspect", KEY, "-C", str(root)])
    assert broken.exit_code == 0 and "pins.json is not valid JSON" in " ".join(broken.output.split())
