"""Every command's ``--help``: no ``<bool>`` after a flag, and no completion options anywhere.

Walks the real command tree (the lazily imported sub-commands included) through typer's runner,
so a command added later is checked too.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.testing import CliRunner

from shipagent.hosts.cli import _app as cli

runner = CliRunner()


def _command_paths() -> list[list[str]]:
    """Every command path: [], ["run"], ["mcp"], ["mcp", "list"], …"""
    group = typer.main.get_command(cli.app)
    ctx = group.make_context("shipagent", [], resilient_parsing=True)
    paths: list[list[str]] = [[]]

    def walk(command: Any, path: list[str]) -> None:
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            paths.append([*path, name])
            if hasattr(sub, "list_commands"):
                walk(sub, [*path, name])

    walk(group, [])
    return paths


def _help(path: list[str]) -> str:
    result = runner.invoke(cli.app, [*path, "--help"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, (path, result.output)
    return result.output


def test_the_tree_reaches_the_lazy_commands() -> None:
    paths = {" ".join(p) for p in _command_paths()}
    assert {"run", "chat", "serve", "worker", "inspect", "mcp list", "context list"} <= paths


def test_no_flag_shows_a_bool_placeholder_and_no_command_offers_completion() -> None:
    for path in _command_paths():
        text = _help(path)
        assert "<bool>" not in text, (path, text)
        assert "--install-completion" not in text and "--show-completion" not in text, (path, text)
        assert "--help" in text


def test_options_that_take_a_value_still_show_its_type() -> None:
    text = _help(["run"])
    line = next(line for line in text.splitlines() if "--chat-key" in line)
    assert "<str>" in line  # only flags lost their placeholder
    json_line = next(line for line in text.splitlines() if "--json" in line)
    assert "<" not in json_line
