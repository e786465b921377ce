"""A directory without ship.json is diagnosed as such, in one line and with status 2, by every
command that works on a project — never "ship.json OK" followed by a missing model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from shipagent.hosts.cli import _app as cli

runner = CliRunner()
SHIPAGENT = str(Path(sys.executable).with_name("shipagent"))

COMMANDS = {
    "check": ["check"],
    "run": ["run", "hello"],
    "chat": ["chat"],
    "serve": ["serve"],
    "worker": ["worker"],
    "recover": ["recover"],
    "inspect": ["inspect", "cli:default"],
    "migrate": ["migrate", "--to", "postgresql://127.0.0.1:1/x"],
    "mcp list": ["mcp", "list"],
    "context list": ["context", "list", "cli:default"],
    "context export": ["context", "export", "cli:default"],
    "context import": ["context", "import", "cli:default", "EXPORT"],
    "channels run": ["channels", "run"],
    "channels pending": ["channels", "pending"],
    "channels pair": ["channels", "pair", "ABCD2345"],
}


def _project_commands(command: Any, ctx: typer.Context, prefix: str = "") -> list[str]:
    """Every (sub)command of ``command`` that takes ``-C/--project``, lazy ones loaded."""
    if hasattr(command, "list_commands"):  # a group (typer's own click)
        found: list[str] = []
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None
            found += _project_commands(
                sub, typer.Context(sub, parent=ctx, info_name=name), f"{prefix}{name} "
            )
        return found
    takes = any("--project" in getattr(p, "opts", []) for p in command.params)
    return [prefix.strip()] if takes else []


def test_the_list_below_is_every_command_that_takes_a_project() -> None:
    group = typer.main.get_command(cli.app)
    commands = _project_commands(group, typer.Context(group, info_name="shipagent"))
    assert sorted(commands) == sorted([*COMMANDS, "init"])  # init makes the project: -C is where


def _args(name: str, tmp_path: Path) -> list[str]:
    export = tmp_path / "export.json"
    export.write_text(json.dumps({"version": 1, "chatKey": "cli:default", "items": []}))
    return [str(export) if a == "EXPORT" else a for a in COMMANDS[name]]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_no_ship_json_is_one_line_and_exit_2(name: str, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(cli.app, [*_args(name, tmp_path), "-C", str(empty)])
    assert result.exit_code == 2, result.output
    assert result.output == (
        f"error: no ship.json in {empty.resolve()}: run `shipagent init {empty}` or pass -C DIR\n"
    )
    assert list(empty.iterdir()) == []  # nothing created (.ship/, a lock, a database)


def test_a_missing_directory_says_so(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    result = runner.invoke(cli.app, ["check", "-C", str(gone)])
    assert result.exit_code == 2
    assert result.output == (
        f"error: no ship.json in {gone} (the directory does not exist): run `shipagent init {gone}` "
        "or pass -C DIR\n"
    )
    assert not gone.exists()


@pytest.mark.parametrize("args", [["check"], ["run", "hi"], ["mcp", "list"]])
def test_in_the_current_directory_init_needs_no_argument(args: list[str], tmp_path: Path) -> None:
    """The console script, in its own process, started in an empty directory."""
    result = subprocess.run([SHIPAGENT, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        result.stderr == f"error: no ship.json in {tmp_path.resolve()}: run `shipagent init` or pass -C DIR\n"
    )
    assert result.stdout == ""


def test_with_ship_json_the_command_goes_on(tmp_path: Path, monkeypatch: Any) -> None:
    """The same directory, once it holds a ship.json, is a project (check reaches its own report)."""
    (tmp_path / "ship.json").write_text(json.dumps({"llm": {"model": "test"}}))
    result = runner.invoke(cli.app, ["check", "-C", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ship.json OK")
