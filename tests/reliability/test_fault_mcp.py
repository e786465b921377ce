"""MCP stdio servers that misbehave at the transport level: no orphan, no hang.

- a server that starts a background process and then exits promptly when its session closes: the
  MCP SDK kills the process group only when the server hangs, so the grandchild would live on;
  shipagent kills the whole group after every session;
- a server that writes bytes that are not UTF-8 to stdout, before the handshake or mid-session:
  the server is marked dead at once with a clear reason and its tools fail fast, instead of waiting
  for ``initTimeoutSeconds`` / ``timeoutSeconds``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic_ai import Agent

from shipagent.tools.mcp import McpManager
from tests.support.mcp_servers.support import PYTHON, STDIO_SERVER, Script, descendants, make_project

pytestmark = pytest.mark.anyio


def server(*args: str, **extra: Any) -> dict[str, Any]:
    return {"command": PYTHON, "args": [STDIO_SERVER, *args], **extra}


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def test_a_grandchild_of_a_server_that_exits_promptly_is_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    before = descendants()
    config = make_project(tmp_path, {"spawner": server("--grandchild", str(pidfile))})
    async with McpManager(config, tmp_path) as manager:
        assert manager.status("spawner").state == "connected"
        grandchild = int(pidfile.read_text())
        assert alive(grandchild)
    # the server exited on its own when stdin closed; its background child must not outlive it
    for _ in range(100):  # SIGKILL is immediate; allow for the zombie's reaping
        if not alive(grandchild):
            break
        await anyio.sleep(0.05)
    assert not alive(grandchild), "the server's background process outlived the agent"
    assert descendants() - before == set()


async def test_non_utf8_before_the_handshake_fails_the_server_at_once(tmp_path: Path) -> None:
    before = descendants()
    config = make_project(tmp_path, {"garbled": server("--garbage-on-start", initTimeoutSeconds=30)})
    started = time.monotonic()
    async with McpManager(config, tmp_path) as manager:
        status = manager.status("garbled")
    assert time.monotonic() - started < 10  # not the 30 s handshake timeout
    assert status.state == "failed"
    assert status.reason is not None and "not UTF-8" in status.reason, status.reason
    assert descendants() - before == set()


async def test_non_utf8_mid_session_fails_that_call_and_every_later_one_fast(tmp_path: Path) -> None:
    before = descendants()
    config = make_project(tmp_path, {"garbled": server(timeoutSeconds=30)})
    script = Script([("garbled__garbage", {}), ("garbled__echo", {"text": "after"})])
    started = time.monotonic()
    async with McpManager(config, tmp_path) as manager:
        agent = Agent(script.model(), toolsets=[manager.toolset])
        result = await agent.run("go")
        status = manager.status("garbled")
    assert time.monotonic() - started < 15  # not the 30 s call timeout
    broken, later = script.returns()
    assert broken.content["success"] is False
    assert "not UTF-8" in broken.content["error"], broken.content
    assert later.content["success"] is False
    assert "is not available" in later.content["error"] and "not UTF-8" in later.content["error"]
    assert status.state == "failed" and status.reason and "not UTF-8" in status.reason
    assert result.output == "done"
    assert descendants() - before == set()
    assert os.getpid()  # the test process itself is untouched


async def test_an_http_server_that_is_down_is_reported_in_our_words_with_the_library_detail(
    tmp_path: Path,
) -> None:
    import socket

    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mcp"
    config = make_project(tmp_path, {"docs": {"type": "http", "url": url, "initTimeoutSeconds": 10}})
    async with McpManager(config, tmp_path) as manager:
        status = manager.status("docs")
    assert status.state == "failed"
    assert (
        status.reason == f"cannot connect to {url}: check that the server is running and mcp.servers.docs.url"
    )
    assert status.detail  # whatever the HTTP library says, kept beside ours and not pinned
