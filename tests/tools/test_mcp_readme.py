"""The documentation's MCP example: it loads as documented, and the documentation shows it verbatim."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from shipagent.config import McpHttpServer, McpStdioServer, load_config
from shipagent.tools.mcp import McpManager
from tests.support.paths import ROOT

EXAMPLE = ROOT / "examples" / "mcp_ship.json"
README = ROOT / "docs" / "guides/mcp.md"


def test_the_example_loads_with_the_documented_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCS_TOKEN", "docs-token-123")
    shutil.copy(EXAMPLE, tmp_path / "ship.json")
    servers = load_config(tmp_path).mcp.servers

    time, git, docs, legacy = servers["time"], servers["git"], servers["docs"], servers["legacy"]
    assert isinstance(time, McpStdioServer) and time.type == "stdio" and time.cwd is None
    assert (time.timeout_seconds, time.init_timeout_seconds, time.enabled) == (60, 20, True)
    assert isinstance(git, McpStdioServer) and git.allowed_tools == ["git_status", "git_log", "git_diff"]
    assert git.timeout_seconds == 30
    assert isinstance(docs, McpHttpServer) and docs.headers == {"Authorization": "Bearer docs-token-123"}
    assert isinstance(legacy, McpHttpServer) and legacy.type == "sse" and not legacy.enabled

    # what `shipagent mcp list` shows before anything starts: no token, no query
    statuses = {s.name: s for s in McpManager(load_config(tmp_path), tmp_path).servers}
    assert statuses["docs"].target == "http://127.0.0.1:8931/mcp"
    assert statuses["legacy"].state == "disabled"
    assert statuses["time"].target == "mcp-server-time --local-timezone Europe/Berlin"


def test_the_example_loads_without_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pasted as it is, on a machine without DOCS_TOKEN: the default applies, nothing is unset."""
    monkeypatch.delenv("DOCS_TOKEN", raising=False)
    shutil.copy(EXAMPLE, tmp_path / "ship.json")
    docs = load_config(tmp_path).mcp.servers["docs"]
    assert isinstance(docs, McpHttpServer) and docs.headers == {"Authorization": "Bearer "}


def test_the_example_uses_installed_commands_not_uvx() -> None:
    """`pip install -e '.[dev]'` installs mcp-server-time and mcp-server-git as console scripts."""
    for server in ("time", "git"):
        assert f'"command": "mcp-server-{server}"' in EXAMPLE.read_text(encoding="utf-8")
        assert (
            shutil.which(f"mcp-server-{server}")
            or (Path(sys.executable).parent / f"mcp-server-{server}").exists()
        )


def test_the_readme_shows_the_example_verbatim() -> None:
    readme = README.read_text(encoding="utf-8")
    if "# MCP servers" not in readme:
        pytest.fail(f"{README} lost its section")
    assert EXAMPLE.read_text(encoding="utf-8").strip() in readme
