"""The command line a newcomer meets: --version, init -C and .gitignore, -C everywhere, no banner,
and Ctrl-C at the prompt or at start-up ends the command cleanly (real processes, real signals)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from shipagent.hosts.cli import _app as cli

runner = CliRunner()
SHIPAGENT = [sys.executable, "-c", "from shipagent.hosts.cli._app import main; main()"]


def _env() -> dict[str, str]:
    """A terminal-less user session in which pydantic-ai *would* show its banner (AI_AGENT makes a
    pipe count as a reader); pytest's and CI's markers, which silence it anyway, are removed."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_VERSION", "CI", "PYDANTIC_AI_NO_BANNER")}
    env["AI_AGENT"] = "1"
    env.pop("OPENAI_API_KEY", None)
    return env


def test_version() -> None:
    result = runner.invoke(cli.app, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("shipagent ") and "pydantic-ai" in result.output


def test_init_with_C_and_a_gitignore_for_ship(tmp_path: Path) -> None:
    result = runner.invoke(cli.app, ["init", "demo", "-C", str(tmp_path)])
    assert result.exit_code == 0, result.output
    demo = tmp_path / "demo"
    assert (demo / "ship.json").is_file() and json.loads((demo / "ship.json").read_text())["name"] == "demo"
    assert ".ship/" in (demo / ".gitignore").read_text().splitlines()
    # an existing .gitignore keeps its lines and gets .ship/ once, however often init runs
    (demo / ".gitignore").write_text("node_modules/\n")
    assert runner.invoke(cli.app, ["init", "-C", str(demo), "--force"]).exit_code == 0
    assert runner.invoke(cli.app, ["init", str(demo), "--force"]).exit_code == 0
    assert (demo / ".gitignore").read_text().splitlines()[0] == "node_modules/"
    assert (demo / ".gitignore").read_text().splitlines().count(".ship/") == 1


def _leaf_commands(group: Any, prefix: str = "") -> dict[str, Any]:
    found: dict[str, Any] = {}
    ctx = typer.Context(group)
    for name in group.list_commands(ctx):  # as click resolves them: lazy sub-commands load here
        command = group.get_command(ctx, name)
        if hasattr(command, "commands"):  # a group (typer vendors its own click)
            found.update(_leaf_commands(command, f"{prefix}{name} "))
        else:
            found[f"{prefix}{name}"] = command
    return found


def test_every_command_takes_C() -> None:
    commands = _leaf_commands(typer.main.get_command(cli.app))
    assert {"init", "run", "chat", "check", "mcp list", "context list"} <= set(commands)
    assert {"inspect", "serve", "worker", "recover"} <= set(commands)
    for name, command in commands.items():
        if name == "schema":  # prints the schema: no project involved
            continue
        opts = {opt for param in command.params for opt in getattr(param, "opts", [])}
        assert "-C" in opts, name


def test_pydantic_ai_banner_never_appears(tmp_path: Path) -> None:
    (tmp_path / "ship.json").write_text("{}")
    script = (
        "from pydantic_ai.messages import ModelResponse, TextPart\n"
        "from pydantic_ai.models.function import FunctionModel\n"
        "from shipagent import ShipAgent\n"
        "model = FunctionModel(lambda m, i: ModelResponse(parts=[TextPart('hello')]))\n"
        f"print(ShipAgent.from_project({str(tmp_path)!r}, model=model).run_sync('k:1', 'hi').success)\n"
    )
    # both at once: each is a fresh Python process, which is most of the time this takes
    runs = [
        subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
        for args in (
            [sys.executable, "-c", script],
            [*SHIPAGENT, "run", "-C", str(tmp_path), "-m", "test", "hi"],
        )
    ]
    (lib_out, lib_err), (cmd_out, cmd_err) = (p.communicate(timeout=120) for p in runs)
    assert lib_out.strip() == "True", lib_err
    assert runs[1].returncode == 0, cmd_err
    for stream in (lib_err, cmd_err, cmd_out):
        assert (
            "pydantic-ai v" not in stream
            and "observability" not in stream
            and "logfire" not in stream.lower()
        )


def _interrupt_after(args: list[str], marker: bytes, tmp_path: Path) -> tuple[int, str]:
    process = subprocess.Popen(
        [*SHIPAGENT, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()
    )
    assert process.stdout is not None and process.stderr is not None
    os.set_blocking(process.stdout.fileno(), False)
    seen, deadline = b"", time.monotonic() + 60
    while marker not in seen and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
        seen += process.stdout.read() or b""
    assert marker in seen, (seen, process.stderr.read() if process.poll() is not None else b"")
    time.sleep(0.3)  # now waiting at the prompt, or starting MCP servers
    process.send_signal(signal.SIGINT)
    try:
        code = process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail("shipagent chat did not exit after Ctrl-C")
    return code, process.stderr.read().decode()


def test_ctrl_c_at_the_prompt_exits_cleanly(tmp_path: Path) -> None:
    (tmp_path / "ship.json").write_text("{}")
    code, stderr = _interrupt_after(["chat", "-C", str(tmp_path), "-m", "test"], b"> ", tmp_path)
    assert code == 130
    assert "Traceback" not in stderr and "Fatal Python error" not in stderr
    assert stderr.strip() == "interrupted"


def test_ctrl_c_while_mcp_servers_start_exits_cleanly_and_stops_them(tmp_path: Path) -> None:
    marker = tmp_path / "server-started"
    server = f"import pathlib, time; pathlib.Path({str(marker)!r}).write_text(''); time.sleep(60)"
    ship = {
        "mcp": {
            "servers": {"slow": {"command": sys.executable, "args": ["-c", server], "initTimeoutSeconds": 30}}
        }
    }
    (tmp_path / "ship.json").write_text(json.dumps(ship))
    code, stderr = _interrupt_after(["chat", "-C", str(tmp_path), "-m", "test"], b"chat key", tmp_path)
    assert code == 130
    assert "Traceback" not in stderr
    assert stderr.strip().endswith("interrupted")
    leftovers = subprocess.run(["pgrep", "-f", str(marker)], capture_output=True, text=True)
    assert leftovers.stdout.strip() == ""  # no server process outlives the command
