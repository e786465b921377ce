"""``shipagent init`` writes an ``llm`` block that works: the embedded model, a hosted provider, or
any OpenAI-compatible server, from flags or asked in a terminal; a missing key is one named line.

(The project layout init creates is tested in test_cli.py and test_cli_newcomer.py.)
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.models.openai import OpenAIChatModel
from typer.testing import CliRunner

from shipagent.agent._local_model import LocalModel, demo_model_path, local_model_of
from shipagent.agent._retry import RetryingModel
from shipagent.agent.models import build_model
from shipagent.config import load_config
from shipagent.hosts.cli import _app as cli

runner = CliRunner()


@pytest.fixture(autouse=True)
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(var, raising=False)


def _init(tmp_path: Path, *flags: str) -> tuple[Any, Path]:
    target = tmp_path / "demo"
    result = runner.invoke(cli.app, ["init", str(target), *flags])
    return result, target


def _llm(target: Path) -> dict[str, Any]:
    llm: dict[str, Any] = json.loads((target / "ship.json").read_text(encoding="utf-8"))["llm"]
    return llm


def _inner(model: Any) -> Any:
    assert isinstance(model, RetryingModel)
    return model.wrapped


def test_local_writes_the_embedded_model_with_limits_it_can_meet(tmp_path: Path) -> None:
    result, target = _init(tmp_path, "--local")
    assert result.exit_code == 0, result.output
    llm = _llm(target)
    assert llm["provider"] == "local" and "model" not in llm and "apiKey" not in llm
    assert 0 < llm["maxTokens"] <= 1024 and llm["timeoutSeconds"] >= 60
    assert "API key" not in result.output and "note:" not in result.output
    config = load_config(target)
    model = build_model(config.llm)
    local = local_model_of(model)
    assert isinstance(local, LocalModel) and not local.engine.running  # built, started only with the agent
    assert local.engine.model_path is None  # the demo model, resolved when the engine starts
    assert demo_model_path().is_file()  # init fetched it (or found it installed) for the first chat
    assert config.llm.max_tokens == llm["maxTokens"] and config.llm.timeout_seconds == llm["timeoutSeconds"]


def test_base_url_writes_an_openai_compatible_server(tmp_path: Path) -> None:
    result, target = _init(tmp_path, "--base-url", "http://127.0.0.1:11434/v1", "--model", "llama3.2")
    assert result.exit_code == 0, result.output
    llm = _llm(target)
    assert llm["provider"] == "openai-compatible" and llm["baseUrl"] == "http://127.0.0.1:11434/v1"
    assert "API key" not in result.output  # a local server needs none
    inner = _inner(build_model(load_config(target).llm))
    assert isinstance(inner, OpenAIChatModel)
    assert inner.model_name == "llama3.2" and inner.base_url.rstrip("/") == "http://127.0.0.1:11434/v1"
    # a local server on a laptop: fewer tokens, more time than a hosted model gets
    assert (
        llm["maxTokens"] <= 2048 and llm["timeoutSeconds"] > _llm(_init(tmp_path / "h")[1])["timeoutSeconds"]
    )


def test_provider_and_model_write_a_hosted_model_whose_key_comes_from_dotenv(tmp_path: Path) -> None:
    result, target = _init(tmp_path, "--provider", "openai", "--model", "gpt-4.1-mini")
    assert result.exit_code == 0, result.output
    assert _llm(target)["model"] == "openai:gpt-4.1-mini"
    lines = result.output.splitlines()
    assert "OPENAI_API_KEY=..." in lines  # the one line to add, alone on its line
    assert lines[lines.index("OPENAI_API_KEY=...") - 1].endswith(f"{target / '.env'}:")
    assert ".env" in (target / ".gitignore").read_text(encoding="utf-8").splitlines()
    # that line, with a key, is all it takes
    (target / ".env").write_text("OPENAI_API_KEY=sk-test-from-dotenv\n", encoding="utf-8")
    config = load_config(target)
    assert config.llm.api_key == "sk-test-from-dotenv"
    inner = _inner(build_model(config.llm))
    assert inner.system == "openai" and inner.model_name == "gpt-4.1-mini"
    assert inner.client.api_key == "sk-test-from-dotenv"


def test_no_hint_when_the_key_is_already_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-in-the-environment")
    result, target = _init(tmp_path)
    assert result.exit_code == 0, result.output
    assert "API key" not in result.output and "OPENAI_API_KEY" not in result.output
    assert _llm(target)["model"] == "openai:gpt-5-mini"  # no flags, no terminal: OpenAI's default
    (target / ".env").write_text("ANTHROPIC_API_KEY=sk-ant\n", encoding="utf-8")
    again = runner.invoke(cli.app, ["init", str(target), "--force", "--provider", "anthropic"])
    assert again.exit_code == 0 and "ANTHROPIC_API_KEY=..." not in again.output
    assert _llm(target)["model"].startswith("anthropic:")
    assert load_config(target).llm.api_key == "sk-ant"


def test_a_provider_prefix_in_model_and_anthropic_names_its_key(tmp_path: Path) -> None:
    result, target = _init(tmp_path, "--model", "anthropic:claude-haiku-4-5")
    assert result.exit_code == 0, result.output
    assert _llm(target)["model"] == "anthropic:claude-haiku-4-5"
    assert _llm(target)["apiKey"] == "${ANTHROPIC_API_KEY:-}"
    assert "ANTHROPIC_API_KEY=..." in result.output.splitlines()
    assert load_config(target).llm.model == "anthropic:claude-haiku-4-5"


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--base-url", "http://127.0.0.1:8000/v1"], "--base-url needs --model"),
        (["--provider", "openai-compatible", "-m", "x"], "needs --base-url"),
        (["--provider", "antropic"], "did you mean 'anthropic'"),
        (["--local", "--provider", "openai"], "--local runs the embedded model"),
        (["--provider", "groq"], "--provider groq needs --model"),
    ],
)
def test_flags_that_do_not_make_a_model_name_the_flag(tmp_path: Path, flags: list[str], says: str) -> None:
    result, target = _init(tmp_path, *flags)
    assert result.exit_code == 2
    assert says in result.output
    assert not (target / "ship.json").exists()  # nothing written


def _talk(args: list[str], answers: list[tuple[str, str]], cwd: Path) -> str:
    """Run ``args`` on a pseudo-terminal; send each answer once its prompt text has appeared."""
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    env["COLUMNS"] = "200"
    process = subprocess.Popen(args, stdin=follower, stdout=follower, stderr=follower, cwd=cwd, env=env)
    os.close(follower)
    seen, pending = "", list(answers)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(leader, 4096).decode(errors="replace")
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
            if pending and pending[0][0] in seen:
                prompt, answer = pending.pop(0)
                seen = seen.replace(prompt, f"<{prompt}>", 1)  # each prompt answered once
                os.write(leader, f"{answer}\r".encode())
            if not pending and process.poll() is not None:
                break
        process.wait(timeout=30)
    finally:
        os.close(leader)
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, seen
    return seen


def test_in_a_terminal_init_asks_which_model(tmp_path: Path) -> None:
    shipagent = [sys.executable, "-c", "from shipagent.hosts.cli._app import main; main()"]
    seen = _talk(
        [*shipagent, "init", "demo"],
        [
            ("choice", "9"),
            ("a number from", "4"),
            ("server URL", "http://127.0.0.1:1234/v1"),
            ("model name", "qwen2.5"),
        ],
        tmp_path,
    )
    assert "embedded demo model" in seen and "OpenAI-compatible server" in seen
    assert "pip install 'shipagent[local]'" in seen  # printed as written, not read as markup
    llm = _llm(tmp_path / "demo")
    assert llm["provider"] == "openai-compatible" and llm["baseUrl"] == "http://127.0.0.1:1234/v1"
    assert llm["model"] == "qwen2.5"
    load_config(tmp_path / "demo")
