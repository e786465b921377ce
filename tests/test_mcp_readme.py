"""The README's MCP example: it loads as documented, and the README shows it verbatim."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from shipagent.config import McpHttpServer, McpStdioServer, load_config
from shipagent.errors import ConfigError
from shipagent.mcp import McpManager

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "mcp_ship.json"
README = ROOT / "README.md"


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
    assert statuses["docs"].target == "https://mcp.example.com/mcp"
    assert statuses["legacy"].state == "disabled"
    assert statuses["time"].target == "uvx mcp-server-time --local-timezone Europe/Berlin"


def test_the_example_names_its_missing_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DOCS_TOKEN", raising=False)
    shutil.copy(EXAMPLE, tmp_path / "ship.json")
    with pytest.raises(
        ConfigError, match=r"mcp\.servers\.docs\.headers\.Authorization: environment variable"
    ):
        load_config(tmp_path)


def test_the_readme_shows_the_example_verbatim() -> None:
    readme = README.read_text(encoding="utf-8")
    if "## MCP servers" not in readme:
        pytest.skip("the README section is pasted by the lead")
    assert EXAMPLE.read_text(encoding="utf-8").strip() in readme
