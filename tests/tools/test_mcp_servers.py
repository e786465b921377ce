"""MCP servers from ship.json, end to end against real servers and a scripted model.

Real third-party servers (mcp-server-time, mcp-server-git) over stdio, our own streamable-HTTP
server on 127.0.0.1, and stdio servers that fail in every way a user meets: a command that does
not exist, a crash at start-up, a handshake that never comes, a server that exits after its first
call, a call that outlives its timeout.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from fastmcp.client import Client
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent

from shipagent.errors import ConfigError
from shipagent.tools.mcp import McpManager
from tests.support.mcp_servers.support import PYTHON, STDIO_SERVER, Script, descendants, make_project

pytestmark = pytest.mark.anyio


def time_server() -> dict[str, Any]:
    return {"command": PYTHON, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}


def stdio_test_server(**extra: Any) -> dict[str, Any]:
    return {"command": PYTHON, "args": [STDIO_SERVER], **extra}


def resolved(path: Path) -> Path:
    return path.resolve()


async def run(manager: McpManager, script: Script) -> Any:
    agent = Agent(script.model(), toolsets=[manager.toolset])
    return await agent.run("go")


# -- mcp-server-time ------------------------------------------------------------------------------


async def test_time_server_answer_reaches_the_next_model_request(tmp_path: Path) -> None:
    config = make_project(tmp_path, {"time": time_server()})
    script = Script([("time__get_current_time", {"timezone": "Europe/Berlin"})])
    async with McpManager(config, tmp_path) as manager:
        assert manager.status("time").state == "connected"
        result = await run(manager, script)

    assert result.output == "done"
    offered = {tool.name for tool in script.infos[0].function_tools}
    assert offered == {"time__get_current_time", "time__convert_time"}
    [ret] = script.returns()
    assert ret.tool_name == "time__get_current_time"
    answer = json.loads(ret.content)
    assert answer["timezone"] == "Europe/Berlin"
    # the server's clock, not a calendar field of ours: it answered with the time it is now
    told = datetime.datetime.fromisoformat(answer["datetime"])
    assert abs((told - datetime.datetime.now(datetime.UTC)).total_seconds()) < 300


# -- mcp-server-git -------------------------------------------------------------------------------


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@e",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@e",
    }
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "README.md").write_text("hello\n")
    subprocess.run(["git", "-C", str(repo), "add", "README.md"], check=True)
    subprocess.run(
        ["git", "-C", str(repo), "commit", "-qm", "first"], check=True, env={**env, "PATH": "/usr/bin:/bin"}
    )
    (repo / "notes.txt").write_text("untracked\n")
    return repo


async def server_schemas(command: str, args: list[str]) -> dict[str, dict[str, Any]]:
    """The inputSchema of every tool, asked of the server directly (not through shipagent)."""
    async with Client(StdioTransport(command, args, keep_alive=False)) as client:
        return {tool.name: tool.input_schema for tool in await client.list_tools()}


async def test_git_server_status_and_schemas_reach_the_model_whole(tmp_path: Path, git_repo: Path) -> None:
    args = ["-m", "mcp_server_git", "--repository", str(git_repo)]
    config = make_project(tmp_path / "project", {"git": {"command": PYTHON, "args": args}})
    script = Script(
        [
            ("git__git_status", {"repo_path": str(git_repo)}),
            ("git__git_diff", {"repo_path": str(git_repo), "target": "HEAD"}),
        ]
    )
    async with McpManager(config, tmp_path / "project") as manager:
        await run(manager, script)

    expected = await server_schemas(PYTHON, args)
    seen = {tool.name: tool.parameters_json_schema for tool in script.infos[0].function_tools}
    assert set(seen) == {f"git__{name}" for name in expected}
    for name, schema in expected.items():
        assert seen[f"git__{name}"] == schema, name
    # a tool with several required arguments keeps them all
    assert set(seen["git__git_diff"]["required"]) == {"repo_path", "target"}

    status, diff = script.returns()
    assert "notes.txt" in status.content and "Untracked" in status.content
    assert diff.tool_name == "git__git_diff"


# -- streamable HTTP ------------------------------------------------------------------------------


async def test_http_server_awkward_names_schemas_and_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.mcp_servers.http_server import LONG_TOOL_NAME, running_http_server

    long_exposed = "http__" + LONG_TOOL_NAME
    monkeypatch.setenv("MCP_TEST_TOKEN", "tok-5f3a9c")
    with running_http_server(token="tok-5f3a9c") as url:
        config = make_project(
            tmp_path,
            {"http": {"type": "http", "url": url, "headers": {"Authorization": "Bearer ${MCP_TEST_TOKEN}"}}},
        )
        script = Script(
            [
                ("http__weather_get_current", {"city": "Oslo", "units": "imperial"}),
                ("http__picture", {}),
                ("http__attachment", {}),
                ("http__fail", {"message": "quota exceeded for project 7"}),
            ]
        )
        manager = McpManager(config, tmp_path)
        async with manager:
            tools = {t.original: t.exposed for t in manager.status("http").tools}
            long_name = tools[LONG_TOOL_NAME]
            script.calls.append((long_name, {"region": "EMEA"}))
            result = await run(manager, script)

    assert tools["weather.get:current"] == "http__weather_get_current"
    assert len(long_name) == 64 and long_name.startswith(long_exposed[:55]) and long_name != long_exposed[:64]
    seen = {tool.name: tool for tool in script.infos[0].function_tools}
    assert all(len(n) <= 64 and n.replace("_", "a").replace("-", "a").isalnum() for n in seen)
    event = seen["http__create_event"].parameters_json_schema
    assert event["required"] == ["title", "start", "attendees", "location"]
    assert event["properties"]["priority"]["enum"] == ["low", "normal", "high"]
    assert event["$defs"]["Attendee"]["properties"]["email"]["description"] == "Where the invitation goes"

    weather, picture, attachment, fail, long = script.returns()
    assert weather.content == "Oslo: 21 degrees (imperial)"
    assert picture.content == "[image: image/png, 100 bytes]\na very small picture"
    assert attachment.content == "[embedded resource file:///reports/q3.pdf: application/pdf, 2048 bytes]"
    assert fail.content == {"success": False, "error": "quota exceeded for project 7"}
    assert long.content == "revenue for EMEA: 42"
    assert result.output == "done"


async def test_http_wrong_token_fails_without_leaking_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.mcp_servers.http_server import running_http_server

    monkeypatch.setenv("MCP_TEST_TOKEN", "wrong-secret-7781")
    with running_http_server(token="right-secret") as url:
        config = make_project(
            tmp_path,
            {"http": {"type": "http", "url": url, "headers": {"Authorization": "Bearer ${MCP_TEST_TOKEN}"}}},
        )
        async with McpManager(config, tmp_path) as manager:
            status = manager.status("http")
    assert status.state == "failed"
    assert status.reason and "wrong-secret-7781" not in status.reason
    assert manager.toolsets() == []


async def test_http_connection_refused_is_a_failed_server(tmp_path: Path) -> None:
    from tests.support.net import free_port

    url = f"http://127.0.0.1:{free_port()}/mcp?api_key=sk-live-123456"
    config = make_project(tmp_path, {"down": {"type": "http", "url": url}})
    script = Script([])
    async with McpManager(config, tmp_path) as manager:
        result = await run(manager, script)
        status = manager.status("down")
    assert status.state == "failed"
    assert "connect" in (status.reason or "").lower()
    assert "sk-live-123456" not in (status.reason or "") and "sk-live" not in status.target
    assert status.target == url.split("?")[0]
    assert result.output == "done" and script.infos[0].function_tools == []


# -- servers that fail ----------------------------------------------------------------------------


async def test_missing_command_is_reported_and_the_agent_keeps_working(tmp_path: Path) -> None:
    config = make_project(tmp_path, {"ghost": {"command": "no-such-mcp-server-xyz"}, "time": time_server()})
    script = Script([("time__get_current_time", {"timezone": "UTC"})])
    async with McpManager(config, tmp_path) as manager:
        result = await run(manager, script)
        ghost = manager.status("ghost")
    assert ghost.state == "failed"
    assert ghost.reason == "command 'no-such-mcp-server-xyz' was not found on PATH"
    assert not any(t.name.startswith("ghost__") for t in script.infos[0].function_tools)
    assert '"timezone": "UTC"' in script.returns()[0].content
    assert result.output == "done"


async def test_crash_at_start_reason_carries_the_servers_stderr(tmp_path: Path) -> None:
    config = make_project(tmp_path, {"broken": stdio_test_server(args=[STDIO_SERVER, "--crash-on-start"])})
    async with McpManager(config, tmp_path) as manager:
        status = manager.status("broken")
    assert status.state == "failed"
    assert "stderr: boom: config file /nowhere/settings.toml not found" in (status.reason or "")
    log = (tmp_path / ".ship" / "logs" / "mcp" / "broken.log").read_text()
    assert "boom: config file" in log


async def test_handshake_timeout_fails_fast_and_leaves_no_process(tmp_path: Path) -> None:
    before = descendants()
    silent = {"command": PYTHON, "args": ["-c", "import time; time.sleep(60)"], "initTimeoutSeconds": 1}
    config = make_project(tmp_path, {"silent": silent})
    started = time.monotonic()
    async with McpManager(config, tmp_path) as manager:
        status = manager.status("silent")
    elapsed = time.monotonic() - started
    assert status.state == "failed"
    assert status.reason == "no answer to the MCP handshake within 1s (mcp.servers.silent.initTimeoutSeconds)"
    assert elapsed < 10
    assert descendants() - before == set()


async def test_server_that_exits_after_its_first_call(tmp_path: Path) -> None:
    import anyio

    config = make_project(tmp_path, {"flaky": stdio_test_server()})
    script = Script(
        [
            ("flaky__exit_after_reply", {"text": "one"}),
            ("flaky__echo", {"text": "two"}),
            ("flaky__echo", {"text": "three"}),
        ],
        between=lambda step: anyio.sleep(1.0) if step == 1 else None,  # let the process exit
    )
    async with McpManager(config, tmp_path) as manager:
        result = await run(manager, script)
        status = manager.status("flaky")

    first, second, third = script.returns()
    assert first.content == "bye one"
    assert second.content["success"] is False
    assert "MCP server 'flaky' stopped while running 'flaky__echo'" in second.content["error"]
    assert third.content["success"] is False
    assert "MCP server 'flaky' is not available" in third.content["error"]
    assert status.state == "failed" and status.reason and status.reason.startswith("died during the session")
    assert result.output == "done"


async def test_call_past_timeout_is_a_tool_failure_and_the_server_stays_usable(tmp_path: Path) -> None:
    config = make_project(tmp_path, {"slow": stdio_test_server(timeoutSeconds=1)})
    script = Script([("slow__sleep", {"seconds": 5}), ("slow__echo", {"text": "still here"})])
    started = time.monotonic()
    async with McpManager(config, tmp_path) as manager:
        await run(manager, script)
    slept, echoed = script.returns()
    assert slept.content == {
        "success": False,
        "error": "MCP tool 'slow__sleep' timed out after 1s (mcp.servers.slow.timeoutSeconds)",
    }
    assert echoed.content == "still here"
    assert time.monotonic() - started < 15


async def test_name_collision_is_a_config_error_naming_both(tmp_path: Path) -> None:
    # server "a" offering "b__echo" and server "a__b" offering "echo" both become "a__b__echo"
    before = descendants()
    config = make_project(
        tmp_path,
        {
            "a": stdio_test_server(args=[STDIO_SERVER, "--extra-tool", "b__echo"]),
            "a__b": stdio_test_server(),
        },
    )
    manager = McpManager(config, tmp_path)
    with pytest.raises(ConfigError) as caught:
        await manager.start()
    assert str(caught.value) == (
        "MCP tool name collision: tool 'b__echo' of server 'a' and tool 'echo' of server 'a__b' "
        "would both be exposed as 'a__b__echo'; hide one with mcp.servers.<name>.allowedTools "
        "or rename a server"
    )
    assert caught.value.path == "mcp.servers.a__b"
    assert manager.toolsets() == []
    assert descendants() - before == set()


async def test_allowed_tools_resolve_the_collision(tmp_path: Path) -> None:
    config = make_project(
        tmp_path,
        {
            "a": stdio_test_server(args=[STDIO_SERVER, "--extra-tool", "b__echo"], allowedTools=["echo"]),
            "a__b": stdio_test_server(allowedTools=["a__b__echo", "whereami"]),
        },
    )
    async with McpManager(config, tmp_path) as manager:
        a, ab = manager.status("a"), manager.status("a__b")
    assert [t.exposed for t in a.tools] == ["a__echo"]
    assert "b__echo" in a.hidden_tools
    assert [(t.exposed, t.original) for t in ab.tools] == [
        ("a__b__echo", "echo"),
        ("a__b__whereami", "whereami"),
    ]


# -- process environment, cwd, lifecycle ----------------------------------------------------------


async def test_stdio_env_and_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHIP_SECRET_FOR_TEST", "s3cr3t-value")
    monkeypatch.setenv("SHIP_TEST_VALUE", "from-the-process")  # not inherited: only what env names
    (tmp_path / "work").mkdir()
    config = make_project(
        tmp_path,
        {
            "here": stdio_test_server(env={"SHIP_TEST_VALUE": "${SHIP_SECRET_FOR_TEST}"}),
            "there": stdio_test_server(cwd="work"),
        },
    )
    script = Script([("here__whereami", {}), ("there__whereami", {})])
    async with McpManager(config, tmp_path) as manager:
        await run(manager, script)
    here, there = script.returns()
    assert here.content == f"cwd={resolved(tmp_path)} value=s3cr3t-value"
    assert there.content == f"cwd={resolved(tmp_path / 'work')} value=<unset>"


async def test_disabled_server_is_not_started(tmp_path: Path) -> None:
    before = descendants()
    config = make_project(tmp_path, {"off": stdio_test_server(enabled=False)})
    async with McpManager(config, tmp_path) as manager:
        assert manager.status("off").state == "disabled"
        assert descendants() - before == set()
        assert manager.toolsets() == []


async def test_no_child_processes_after_exit_even_when_the_run_crashes(tmp_path: Path) -> None:
    before = descendants()
    config = make_project(tmp_path, {"time": time_server(), "echo": stdio_test_server()})

    async def crashing_model(messages: Any, info: Any) -> Any:
        raise RuntimeError("model exploded")

    from pydantic_ai.models.function import FunctionModel

    manager = McpManager(config, tmp_path)
    with pytest.raises(RuntimeError, match="model exploded"):
        async with manager:
            assert len(descendants() - before) >= 2  # both servers run as our children
            await Agent(FunctionModel(crashing_model), toolsets=[manager.toolset]).run("go")
    assert descendants() - before == set()
    assert [s.state for s in manager.servers] == ["stopped", "stopped"]


async def test_sse_server(tmp_path: Path) -> None:
    from tests.support.mcp_servers.http_server import running_http_server

    with running_http_server(sse=True) as url:
        config = make_project(tmp_path, {"legacy": {"type": "sse", "url": url}})
        script = Script([("legacy__weather_get_current", {"city": "Lima"})])
        async with McpManager(config, tmp_path) as manager:
            await run(manager, script)
    assert script.returns()[0].content == "Lima: 21 degrees (metric)"


async def test_http_server_that_goes_away_mid_session(tmp_path: Path) -> None:
    from tests.support.mcp_servers.http_server import running_http_server

    server = running_http_server()
    url = server.__enter__()
    try:
        config = make_project(tmp_path, {"remote": {"type": "http", "url": url}})
        script = Script(
            [
                ("remote__weather_get_current", {"city": "Rome"}),
                ("remote__weather_get_current", {"city": "Oslo"}),
            ],
            between=lambda step: server.__exit__(None, None, None) if step == 1 else None,
        )
        async with McpManager(config, tmp_path) as manager:
            result = await run(manager, script)
            status = manager.status("remote")
    finally:
        server.__exit__(None, None, None)
    first, second = script.returns()
    assert first.content == "Rome: 21 degrees (metric)"
    assert second.content["success"] is False
    assert "MCP server 'remote'" in second.content["error"]
    assert status.state == "failed"
    assert result.output == "done"


async def test_cancelled_start_leaves_no_process(tmp_path: Path) -> None:
    import anyio

    before = descendants()
    silent = {"command": PYTHON, "args": ["-c", "import time; time.sleep(60)"], "initTimeoutSeconds": 30}
    config = make_project(tmp_path, {"fast": stdio_test_server(), "silent": silent})
    manager = McpManager(config, tmp_path)
    with anyio.move_on_after(3) as scope:  # like Ctrl-C while a server hangs in its handshake
        await manager.start()
    assert scope.cancelled_caught
    assert manager.toolsets() == []
    assert descendants() - before == set()


async def test_secrets_never_reach_the_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """httpx logs request URLs at INFO and the MCP client its endpoint: a URL token must be masked."""
    from tests.support.mcp_servers.http_server import running_http_server

    caplog.set_level("DEBUG")
    monkeypatch.setenv("URL_TOKEN", "tk-log-leak-4242")
    with running_http_server(token="tk-log-leak-4242") as url:
        config = make_project(
            tmp_path,
            {
                "h": {
                    "type": "http",
                    "url": url + "?sig=${URL_TOKEN}",
                    "headers": {"Authorization": "Bearer ${URL_TOKEN}"},
                },
                "ghost": {"command": "no-such-cmd-${URL_TOKEN}"},
            },
        )
        script = Script([("h__weather_get_current", {"city": "Kyiv"})])
        async with McpManager(config, tmp_path) as manager:
            await run(manager, script)
    assert script.returns()[0].content == "Kyiv: 21 degrees (metric)"
    assert "sig=***" in caplog.text  # the request lines are still logged, masked
    assert "tk-log-leak-4242" not in caplog.text
    assert manager.status("ghost").reason == "command 'no-such-cmd-***' was not found on PATH"


async def test_stderr_log_is_rotated_past_a_megabyte(tmp_path: Path) -> None:
    logs = tmp_path / ".ship" / "logs" / "mcp"
    logs.mkdir(parents=True)
    (logs / "broken.log").write_text("old line\n" * 150_000)  # 1.35 MB
    config = make_project(tmp_path, {"broken": stdio_test_server(args=[STDIO_SERVER, "--crash-on-start"])})
    async with McpManager(config, tmp_path) as manager:
        assert manager.status("broken").state == "failed"
    assert (logs / "broken.log.1").stat().st_size > 1024 * 1024
    current = (logs / "broken.log").read_text()
    assert "old line" not in current and "boom: config file" in current
