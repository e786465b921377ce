"""MCP servers through ``ShipAgent``: started by ``async with agent``, recorded, summarized, stopped.

The same real servers as ``test_mcp_servers.py``, now through the runtime a user runs: tool call
records (an ``isError`` result or a dead server is a failed record, the turn still succeeds),
``step_finish`` summaries, ``agent.mcp`` statuses, no child process after the agent exits, and
``shipagent mcp list``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from shipagent import ShipAgent
from shipagent.errors import ConfigError
from shipagent.hosts.cli._app import app
from shipagent.results import StepEvent
from tests.support.mcp_servers.support import PYTHON, STDIO_SERVER, Script, descendants, make_project

pytestmark = pytest.mark.anyio

TIME = {"command": PYTHON, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}
TEST = {"command": PYTHON, "args": [STDIO_SERVER]}


async def test_agent_runs_real_mcp_tools_and_records_them(tmp_path: Path) -> None:
    before = descendants()
    make_project(tmp_path, {"time": TIME, "t": TEST})
    script = Script(
        [
            ("time__get_current_time", {"timezone": "Asia/Tokyo"}),
            ("t__fail", {"message": "disk full on /data"}),
        ]
    )
    steps: list[StepEvent] = []
    agent = ShipAgent.from_project(tmp_path, model=script.model())
    async with agent:
        assert [s.state for s in agent.mcp.servers] == ["connected", "connected"]
        result = await agent.run("test:chat:1", "what time is it in Tokyo?", on_step=steps.append)
    assert descendants() - before == set()

    offered = {tool.name for tool in script.infos[0].function_tools}
    assert {"time__get_current_time", "time__convert_time", "t__echo", "t__fail"} <= offered
    assert result.success and result.had_tool_failure
    now, fail = result.tool_calls
    assert now.tool == "time__get_current_time" and now.success and now.input == {"timezone": "Asia/Tokyo"}
    assert json.loads(now.output)["timezone"] == "Asia/Tokyo"
    assert (fail.tool, fail.success, fail.error) == ("t__fail", False, "disk full on /data")

    summaries = [e.text for e in steps if e.type == "step_finish"]
    assert summaries[0].startswith("MCP tool time__get_current_time") and "Asia/Tokyo" in summaries[0]
    assert summaries[1].startswith("MCP tool t__fail") and "disk full on /data" in summaries[1]
    assert all(len(s) <= 500 for s in summaries)


async def test_agent_survives_a_server_that_dies_mid_session(tmp_path: Path) -> None:
    make_project(tmp_path, {"flaky": TEST})
    script = Script(
        [("flaky__exit_after_reply", {"text": "x"}), ("flaky__echo", {"text": "y"})],
        between=lambda step: anyio.sleep(1.0) if step == 1 else None,
    )
    agent = ShipAgent.from_project(tmp_path, model=script.model())
    async with agent:
        result = await agent.run("test:chat:2", "go")
        status = agent.mcp.status("flaky")
    assert result.success
    first, second = result.tool_calls
    assert first.success and first.output == "bye x"
    assert not second.success and "MCP server 'flaky' stopped while running 'flaky__echo'" in (
        second.error or ""
    )
    assert status.state == "failed"


async def test_agent_with_a_broken_server_still_answers(tmp_path: Path) -> None:
    make_project(tmp_path, {"ghost": {"command": "definitely-not-installed-mcp"}})
    script = Script([])
    agent = ShipAgent.from_project(tmp_path, model=script.model())
    async with agent:
        result = await agent.run("test:chat:3", "hello")
        status = agent.mcp.status("ghost")
    assert result.success and result.output.startswith("done")
    assert status.reason == "command 'definitely-not-installed-mcp' was not found on PATH"
    assert not any(t.name.startswith("ghost__") for t in script.infos[0].function_tools)


async def test_collision_stops_agent_start(tmp_path: Path) -> None:
    before = descendants()
    make_project(
        tmp_path,
        {"a": {**TEST, "args": [STDIO_SERVER, "--extra-tool", "b__echo"]}, "a__b": TEST},
    )
    agent = ShipAgent.from_project(tmp_path, model=Script([]).model())
    with pytest.raises(ConfigError, match="would both be exposed as 'a__b__echo'"):
        async with agent:
            pass
    assert descendants() - before == set()


# -- shipagent mcp list ----------------------------------------------------------------------------


def test_cli_mcp_list_shows_status_and_exposed_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.mcp_servers.http_server import LONG_TOOL_NAME, running_http_server

    monkeypatch.setenv("LIST_TOKEN", "tk-9911-secret")
    with running_http_server(token="tk-9911-secret") as url:
        make_project(
            tmp_path,
            {
                "time": TIME,
                "http": {
                    "type": "http",
                    "url": url + "?sig=${LIST_TOKEN}",
                    "headers": {"Authorization": "Bearer ${LIST_TOKEN}"},
                    "allowedTools": ["weather.get:current", LONG_TOOL_NAME],
                },
                "ghost": {"command": "no-such-mcp-cmd", "env": {"API_KEY": "${LIST_TOKEN}"}},
                "off": {**TEST, "enabled": False},
            },
        )
        result = CliRunner().invoke(app, ["mcp", "list", "-C", str(tmp_path)])
        as_json = CliRunner().invoke(app, ["mcp", "list", "-C", str(tmp_path), "--json"])

    out = result.output
    assert result.exit_code == 1  # one enabled server failed
    assert "tk-9911-secret" not in out and "tk-9911-secret" not in as_json.output
    assert "time  connected  stdio" in out
    assert "  time__get_current_time" in out and "  time__convert_time" in out
    assert re.search(r"\n  http__weather_get_current +\(server name: weather\.get:current\)\n", out)
    assert re.search(
        rf"\n  http__summarize_quarterly_\w+_[0-9a-f]{{8}} +\(server name: {LONG_TOOL_NAME}\)\n", out
    )
    assert "hidden by allowedTools: create_event, picture, attachment, fail, sleep" in out
    assert "ghost  failed  stdio" in out
    assert "reason: command 'no-such-mcp-cmd' was not found on PATH" in out
    assert "off  disabled  stdio" in out

    data = {s["name"]: s for s in json.loads(as_json.output)}
    assert data["http"]["state"] == "connected"
    assert data["http"]["target"] == url
    assert [t["exposed"] for t in data["time"]["tools"]] == ["time__get_current_time", "time__convert_time"]
    assert data["ghost"]["reason"] == "command 'no-such-mcp-cmd' was not found on PATH"


def test_cli_mcp_list_without_servers(tmp_path: Path) -> None:
    make_project(tmp_path, {})
    result = CliRunner().invoke(app, ["mcp", "list", "-C", str(tmp_path)])
    assert result.exit_code == 0
    assert "no MCP servers configured" in result.output


async def test_servers_from_dot_ship_mcp_json_are_started_too(tmp_path: Path) -> None:
    make_project(tmp_path, {"t": TEST})
    legacy = tmp_path / ".ship" / "mcp"
    legacy.mkdir(parents=True)
    (legacy / "mcp.json").write_text(json.dumps({"servers": {"time": TIME}}))
    script = Script([("time__get_current_time", {"timezone": "UTC"}), ("t__echo", {"text": "hi"})])
    agent = ShipAgent.from_project(tmp_path, model=script.model())
    async with agent:
        result = await agent.run("test:chat:4", "go")
    assert [s.name for s in agent.mcp.servers] == ["t", "time"]
    assert [(c.tool, c.success) for c in result.tool_calls] == [
        ("time__get_current_time", True),
        ("t__echo", True),
    ]
