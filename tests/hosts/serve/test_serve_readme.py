"""The documentation's streaming and serving examples run as pasted (against a scripted model)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from shipagent import ShipAgent
from shipagent.hosts.cli import _app as cli
from shipagent.hosts.serve import create_app
from tests.support.core import answer, tool_call, user_texts
from tests.support.paths import ROOT
from tests.support.serve import serving
from tests.support.stream import StreamScript

README = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
SERVE = (ROOT / "docs" / "guides" / "serve.md").read_text(encoding="utf-8")


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def _demo(tmp_path: Path) -> Path:
    assert CliRunner().invoke(cli.app, ["init", str(tmp_path / "demo")]).exit_code == 0
    return tmp_path / "demo"


def test_run_stream_example_prints_the_answer_as_it_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _demo(tmp_path)
    monkeypatch.chdir(tmp_path)

    def reply(messages, info, n):  # type: ignore[no-untyped-def]
        if n == 1:  # a command the default project asks about
            return tool_call("exec_shell", {"command": "touch approved.txt"}, "c1")
        return answer(f"echo: {user_texts(messages)[-1]}")

    script = StreamScript(reply, chunk=4)
    asked: list[str] = []
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or "y")
    original = ShipAgent.from_project.__func__  # type: ignore[attr-defined]

    def scripted(cls: type[ShipAgent], root: Any, **kwargs: Any) -> ShipAgent:
        kwargs.setdefault("model", script.model)
        return original(cls, root, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(ShipAgent, "from_project", classmethod(scripted))
    example = next(b for b in _blocks(README, "python") if "run_stream" in b)
    exec(compile(example, "docs/getting-started.md", "exec"), {"__name__": "__main__"})
    assert asked == ["run touch approved.txt? [y/N] "]
    assert (tmp_path / "demo" / "approved.txt").exists()
    assert capsys.readouterr().out == (
        "\n[exec_shell {'command': 'touch approved.txt'}]\n"
        "[ran: touch approved.txt (exit 0)]\n"
        "echo: What is in this project?\n(2 model requests)\n"
    )
    assert script.streamed == [True, True]


def test_curl_and_openai_examples_run_against_a_served_agent(tmp_path: Path) -> None:
    root = _demo(tmp_path)
    start, curl = _blocks(SERVE, "sh")[:2]
    assert start.split("#")[0].strip() == "shipagent serve"
    agent = ShipAgent.from_project(root, model=StreamScript(chunk=3).model)
    with serving(create_app(agent)) as url:
        commands = curl.replace("http://127.0.0.1:8000", url)
        out = subprocess.run(["bash", "-ec", commands], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        first, rest = out.stdout.split("\n", 1)[0], out.stdout
        assert json.loads(first)["output"] == "echo: Hello!"
        assert "event: text_delta" in rest and "event: done" in rest
        transcript = json.loads(rest[rest.rindex('{"chatKey"') :])
        assert [e["text"] for e in transcript["entries"]] == [
            "Hello!",
            "echo: Hello!",
            "Tell me more",
            "echo: Tell me more",
        ]
        sdk = next(b for b in _blocks(SERVE, "python") if "OpenAI(" in b).replace(
            "http://127.0.0.1:8000", url
        )
        result = subprocess.run([sys.executable, "-c", sdk], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "echo: Hello!\necho: Stream it\n"
