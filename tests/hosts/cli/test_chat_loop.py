"""``shipagent chat``: streamed text, commands, usage, Ctrl-C."""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel
from rich.console import Console
from typer.testing import CliRunner

from shipagent import ShipAgent
from shipagent.hosts.cli import _app as cli
from shipagent.hosts.cli._chat_loop import ChatLoop
from tests.support.core import answer, has_tool_return, make_project, tool_call, user_texts
from tests.support.stream import StreamScript

runner = CliRunner()
KEY = "cli:t"


@pytest.fixture(autouse=True)
def _project(tmp_path: Path) -> None:
    """Every chat here runs in a project (a directory with ship.json)."""
    (tmp_path / "ship.json").write_text("{}")


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> StreamScript:
    scripted = StreamScript(chunk=3)

    def factory(root: Path, *, model: Any = None, **kwargs: Any) -> ShipAgent:
        return ShipAgent.from_project(root, model=scripted.model, **kwargs)

    monkeypatch.setattr(cli, "agent_factory", factory)
    return scripted


def test_chat_streams_the_answer_and_prints_a_usage_line(tmp_path: Path, script: StreamScript) -> None:
    result = runner.invoke(cli.app, ["chat", "-C", str(tmp_path), "-k", KEY], input="hello there\n/exit\n")
    assert result.exit_code == 0, result.output
    assert "echo: hello there" in result.output
    assert script.streamed == [True]
    assert "tokens in" in result.output and "· 1 request" in result.output


def test_unknown_command_prints_the_command_list_and_never_reaches_the_model(
    tmp_path: Path, script: StreamScript
) -> None:
    result = runner.invoke(cli.app, ["chat", "-C", str(tmp_path), "-k", KEY], input="/hist\n/exit\n")
    assert result.exit_code == 0
    assert "unknown command /hist" in result.output
    for command in ("/help", "/history", "/clear", "/exit"):
        assert command in result.output
    assert script.requests == []


def test_a_path_is_a_message_not_a_command(tmp_path: Path, script: StreamScript) -> None:
    result = runner.invoke(cli.app, ["chat", "-C", str(tmp_path), "-k", KEY], input="/etc/hosts is odd\n")
    assert "echo: /etc/hosts is odd" in result.output


def test_history_after_clear_shows_only_what_the_model_sees(tmp_path: Path, script: StreamScript) -> None:
    lines = "first question\n/history\n/clear\n/history\nsecond\n/history\n/exit\n"
    result = runner.invoke(cli.app, ["chat", "-C", str(tmp_path), "-k", KEY], input=lines)
    assert result.exit_code == 0, result.output
    first, after_clear, after_second = result.output.split("that is what the model sees now")[:3]
    assert "user: first question" in first
    assert "first question" not in after_clear.split("context cleared")[1]
    assert "context of this chat is empty" in after_clear
    assert "user: second" in after_second and "first question" not in after_second
    assert "history.jsonl" in result.output  # where the full transcript is


def test_approval_is_asked_at_the_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def reply(messages, info, n):  # type: ignore[no-untyped-def]
        if has_tool_return(messages):
            return answer("ran it")
        return tool_call("exec_shell", {"command": "echo from-the-shell"}, "c1")

    scripted = StreamScript(reply)
    monkeypatch.setattr(
        cli, "agent_factory", lambda root, **kw: ShipAgent.from_project(root, model=scripted.model)
    )
    result = runner.invoke(cli.app, ["chat", "-C", str(tmp_path), "-k", KEY], input="run\ny\n/exit\n")
    assert "Allow exec_shell to run `echo from-the-shell`?" in result.output
    assert "ran: echo from-the-shell (exit 0)" in result.output


class _Lines(io.StringIO):
    """stdin whose reads can raise KeyboardInterrupt (Ctrl-C at the prompt)."""

    def readline(self, *args: Any) -> str:  # type: ignore[override]
        line = super().readline(*args)
        if line == "^C\n":
            raise KeyboardInterrupt
        return line


def _chat(root: Path, model: Any, lines: str, monkeypatch: pytest.MonkeyPatch) -> tuple[ShipAgent, str]:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdin", _Lines(lines))
    agent = ShipAgent.from_project(root, model=model)
    ChatLoop(agent, KEY, Console(file=out, force_terminal=False, width=200)).run()
    return agent, out.getvalue()


def test_ctrl_c_at_the_prompt_ends_the_chat_cleanly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scripted = StreamScript()
    with pytest.raises(KeyboardInterrupt):
        _chat(make_project(tmp_path), scripted.model, "hi\n^C\nnever sent\n", monkeypatch)
    assert [t for m in scripted.requests for t in user_texts(m)] == ["hi"]  # "never sent" was not

    monkeypatch.setattr(
        cli, "agent_factory", lambda root, **kw: ShipAgent.from_project(root, model=StreamScript().model)
    )
    monkeypatch.setattr(
        "rich.console.Console.input", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt)
    )
    result = runner.invoke(cli.app, ["chat", "-C", str(tmp_path), "-k", KEY])
    assert result.exit_code == 130 and "interrupted" in result.output and "Traceback" not in result.output


def test_a_model_that_cannot_stream_still_chats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A FunctionModel without a stream_function: the streamed turn gets the answer whole."""
    whole = FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("pong")]))
    monkeypatch.setattr(cli, "agent_factory", lambda root, **kw: ShipAgent.from_project(root, model=whole))
    result = runner.invoke(cli.app, ["chat", "-C", str(tmp_path), "-k", KEY], input="ping\n/exit\n")
    assert result.exit_code == 0 and "pong" in result.output


@pytest.fixture
def python_sigint() -> Any:
    """Python's own SIGINT handler (KeyboardInterrupt), whatever an earlier test in this worker set."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("python_sigint")
def test_ctrl_c_during_a_turn_cancels_only_that_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real SIGINT while the answer streams: the turn stops, nothing is saved, the chat goes on."""
    slow = StreamScript(
        lambda m, i, n: answer("a slow answer " * 20 if n == 1 else "quick"), chunk=2, delay=0.05
    )

    def interrupt() -> None:
        while slow.chunks_sent < 3:  # the answer is streaming
            threading.Event().wait(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    agent, out = _chat(make_project(tmp_path), slow.model, "slow one\nafter\n/exit\n", monkeypatch)
    assert "turn cancelled" in out and "quick" in out
    assert slow.chunks_sent < 100  # the model stream stopped early
    assert user_texts(agent.history(KEY)) == ["after"]
    transcript = agent.transcript.path(KEY).read_text(encoding="utf-8")
    assert "slow one" not in transcript
