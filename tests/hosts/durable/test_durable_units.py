"""Durable mode's parts, without worker processes: settings, the commit, check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from typer.testing import CliRunner

from shipagent import ConfigError, ShipAgent, ShipAgentError
from shipagent.agent.turns import CommitOutcome, TurnCommit, TurnHooks
from shipagent.config import parse_config
from shipagent.hosts.cli._app import app
from shipagent.hosts.durable import resolve_settings
from tests.support.core import make_agent, make_project

pytestmark = pytest.mark.anyio


def _config(**durable: Any) -> Any:
    return parse_config(
        {"durable": {"enabled": True, **durable}}, env={"DATABASE_URL": "postgresql://u:pw@h:5/db"}
    )


def test_database_sqlite_lives_under_ship(tmp_path: Path) -> None:
    settings = resolve_settings(_config().durable, tmp_path)
    assert settings.database_url == f"sqlite:///{tmp_path}/.ship/durable.sqlite"
    assert settings.is_sqlite and settings.recover_after_seconds == 30


def test_database_url_from_environment_and_redacted(tmp_path: Path) -> None:
    settings = resolve_settings(_config(database="${DATABASE_URL}").durable, tmp_path)
    assert settings.database_url == "postgresql://u:pw@h:5/db"
    assert settings.redacted_url() == "postgresql://u:***@h:5/db"
    assert "pw" not in settings.redacted_url()


def test_bad_durable_config_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"durable\.database.*sqlite.*postgresql://"):
        _config(database="mysql://x")
    with pytest.raises(ConfigError, match=r"durable\.recoverAfterSeconds"):
        _config(recoverAfterSeconds=0)
    with pytest.raises(ConfigError, match=r"did you mean 'executorId'"):
        parse_config({"durable": {"executorID": "x"}})


def test_configured_executor_id_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHIPAGENT_EXECUTOR_ID", raising=False)
    assert resolve_settings(_config().durable, tmp_path).executor_id is None  # <hostname>:<n>
    assert resolve_settings(_config(executorId="box-7").durable, tmp_path).executor_id == "box-7"
    monkeypatch.setenv("SHIPAGENT_EXECUTOR_ID", "from-env")
    assert resolve_settings(_config(executorId="box-7").durable, tmp_path).executor_id == "from-env"
    assert resolve_settings(_config().durable, tmp_path, executor_id="flag").executor_id == "flag"


def _echo(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("answer")])


class _Capture(TurnHooks):
    """Plain hooks whose commit stops after the message log, as a worker killed mid-commit leaves it."""

    turn: TurnCommit | None = None

    async def commit(self, agent: ShipAgent, turn: TurnCommit, commit: Any) -> CommitOutcome:
        self.turn = turn

        def killed(part: str) -> None:
            if part != "messages":
                raise OSError(f"killed before {part}")

        agent.store.fault = killed
        try:
            await commit(turn, agent.store)
        finally:
            agent.store.fault = None
        return None, None


async def stores_holding(agent: ShipAgent, chat_key: str, request_id: str) -> set[str]:
    """Which parts of the chat's store hold ``request_id``."""
    found = set()
    for name, log in (
        ("messages", agent.store.messages),
        ("transcript", agent.store.transcript),
        ("agentContext", agent.store.agent_context),
    ):
        if any(r.data.get("requestId") == request_id for r in await log.records(chat_key)):
            found.add(name)
    box = await agent.handover.read_box(await agent.handover.output_box_id(chat_key))
    if any(c.metadata.get("request_id") == request_id for c in box):
        found.add("cards")
    return found


async def test_a_recommit_finishes_a_partial_commit_and_never_writes_twice(tmp_path: Path) -> None:
    agent = make_agent(make_project(tmp_path / "p"), FunctionModel(_echo))
    hooks = agent.turn_hooks = _Capture()
    result = await agent.run("chat:c", "hello", request_id="rid-1")
    assert result.success and hooks.turn is not None
    assert await stores_holding(agent, "chat:c", "rid-1") == {"messages"}
    outcome = await agent._wiring.commit(hooks.turn, agent.store)  # the resumed turn's commit
    assert outcome == (None, None)
    assert await stores_holding(agent, "chat:c", "rid-1") == {
        "messages",
        "transcript",
        "agentContext",
        "cards",
    }
    await agent._wiring.commit(hooks.turn, agent.store)  # and once more: nothing changes
    log = [json.loads(line) for line in agent.chats.log.path("chat:c").read_text().splitlines()]
    assert [r["requestId"] for r in log] == ["rid-1"]
    transcript = agent.transcript.last("chat:c", 10)
    assert [(e["role"], e["text"]) for e in transcript] == [("user", "hello"), ("assistant", "answer")]
    assert len(agent.agent_context.last("chat:c", 10)) == 1
    box = await agent.handover.read_box(await agent.handover.output_box_id("chat:c"))
    assert [c.metadata["role"] for c in box] == ["user", "assistant"]
    await agent.handover.aclose()


async def test_plain_mode_keeps_a_given_request_id(tmp_path: Path) -> None:
    agent = make_agent(make_project(tmp_path / "p"), FunctionModel(_echo))
    for bad in ("", "x" * 201, "line\nbreak"):
        with pytest.raises(ShipAgentError, match="request_id must be 1-200 printable characters"):
            await agent.run("chat:c", "hi", request_id=bad)
    result = await agent.run("chat:c", "hi", request_id="mine")
    assert result.request_id == "mine"
    assert agent.transcript.last("chat:c", 1)[0]["requestId"] == "mine"
    await agent.handover.aclose()


def test_check_reports_and_connects(tmp_path: Path) -> None:
    config = {"llm": {"model": "test"}, "durable": {"enabled": True, "database": "sqlite"}}
    project = make_project(tmp_path / "p", config)  # a model: check exits 1 without one
    out = CliRunner().invoke(app, ["check", "-C", str(project)])
    assert out.exit_code == 0, out.output
    assert f"durable: on — sqlite:///{project}/.ship/durable.sqlite" in out.output
    assert "durable: database reachable" in out.output


def test_check_fails_on_an_unreachable_database_without_leaking_the_password(tmp_path: Path) -> None:
    project = make_project(
        tmp_path / "p", {"durable": {"enabled": True, "database": "postgresql://u:s3cret@127.0.0.1:1/x"}}
    )
    out = CliRunner().invoke(app, ["check", "-C", str(project)])
    assert out.exit_code == 1
    assert "durable: cannot use the database postgresql://u:***@127.0.0.1:1/x" in out.output
    assert "s3cret" not in out.output


def test_worker_refuses_a_project_without_durable(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {})
    out = CliRunner().invoke(app, ["worker", "-C", str(project)])
    assert out.exit_code == 2
    assert "durable.enabled is not true" in out.output


async def test_a_run_started_by_a_tool_of_a_durable_turn_runs_inline(tmp_path: Path) -> None:
    """Delegation: the sub-agent's run is part of the delegating tool's step, not a queued turn."""
    from shipagent.tools.execution import use_tool_context

    project = make_project(tmp_path / "p", {"durable": {"enabled": True}})
    agent = make_agent(project, FunctionModel(_echo))
    with pytest.raises(Exception, match="async with agent"):
        await agent.run("chat:top", "hi")  # a top-level run outside the queue is refused
    with use_tool_context(agent._wiring.tool_context("chat:parent", "parent-turn", None)):
        result = await agent.run("delegate:1", "do it")
    assert (result.success, result.output) == (True, "answer")
    assert agent.transcript.last("delegate:1", 5)[0]["text"] == "do it"
    await agent.handover.aclose()


def test_worker_on_an_unreachable_database_fails_with_one_line(tmp_path: Path) -> None:
    project = make_project(
        tmp_path / "p", {"durable": {"enabled": True, "database": "postgresql://u:s3cret@127.0.0.1:1/x"}}
    )
    out = CliRunner().invoke(app, ["worker", "-C", str(project), "--executor-id", "w"])
    assert out.exit_code == 2, out.output
    assert "error: durable: cannot use the database postgresql://u:***@127.0.0.1:1/x" in out.output
    assert "s3cret" not in out.output and "Traceback" not in out.output


def test_durable_problems_for_a_check_list(tmp_path: Path) -> None:
    from shipagent.hosts.durable._check import durable_problems

    off = parse_config({})
    assert durable_problems(tmp_path, off) == []
    assert durable_problems(tmp_path, _config()) == []  # sqlite under .ship/: reachable
    bad = parse_config({"durable": {"enabled": True, "database": "postgresql://u:s3cret@127.0.0.1:1/x"}})
    [(level, message)] = durable_problems(tmp_path, bad)
    assert level == "error" and message.startswith("durable: cannot use the database postgresql://u:***@")
    assert "s3cret" not in message
