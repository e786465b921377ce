"""``shipagent serve`` as a real process: the openai SDK against it, and SIGTERM.

The model is a scripted ``FunctionModel`` loaded with ``--model-factory scripted_model:build`` from
a module beside ship.json; the project also runs a real stdio MCP server (a copy of
``tests/support/mcp_servers/stdio_server.py`` under a unique name, so ``/proc`` tells whether it outlived
the server).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
from httpx_sse import connect_sse

from tests.support.net import free_port
from tests.support.paths import MCP_SERVERS

MODEL_MODULE = """
import asyncio

from pydantic_ai.messages import ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import FunctionModel


def _said(messages):
    for part in reversed(messages[-1].parts):
        if isinstance(part, UserPromptPart):
            return str(part.content)
    return ""


def _answer(said):
    return ("slowly " * 40) if said.startswith("slow") else f"echo: {said}"


def respond(messages, info):
    return ModelResponse(parts=[TextPart(_answer(_said(messages)))])


async def stream(messages, info):
    said = _said(messages)
    text = _answer(said)
    delay = 0.1 if said.startswith("slow") else 0
    for start in range(0, len(text), 7):
        await asyncio.sleep(delay)
        yield text[start : start + 7]


def build():
    return FunctionModel(respond, stream_function=stream, model_name="scripted")
"""

SHIPAGENT = str(Path(sys.executable).with_name("shipagent"))
MCP_SERVER = MCP_SERVERS / "stdio_server.py"


def _pids_running(marker: str) -> list[int]:
    """Processes whose command line holds ``marker`` (zombies have none, so they do not count)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@dataclass
class Served:
    url: str
    root: Path
    process: subprocess.Popen[bytes]
    marker: str
    log: Path

    def stderr(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@pytest.fixture
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Served]:
    grace = getattr(request, "param", 30)
    marker = f"mcp_{uuid.uuid4().hex}.py"
    shutil.copy(MCP_SERVER, tmp_path / marker)
    ship = {
        "name": "proc-agent",
        "mcp": {"servers": {"t": {"command": sys.executable, "args": [str(tmp_path / marker)]}}},
        "serve": {"shutdownGraceSeconds": grace},
    }
    (tmp_path / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    (tmp_path / "scripted_model.py").write_text(MODEL_MODULE, encoding="utf-8")
    port = free_port()
    log = tmp_path / "serve.log"
    command = [SHIPAGENT, "serve", "-C", str(tmp_path), "--port", str(port)]
    command += ["--model-factory", "scripted_model:build"]
    with open(log, "wb") as err:
        process = subprocess.Popen(command, stdout=err, stderr=subprocess.STDOUT)
    served = Served(f"http://127.0.0.1:{port}", tmp_path, process, marker, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{served.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"shipagent serve did not start:\n{served.stderr()}")
            time.sleep(0.1)
        yield served
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        for pid in _pids_running(marker):  # never leave a stray server behind, even when a test fails
            os.kill(pid, signal.SIGKILL)


def _openai_sdk_round(served: Served) -> None:
    client = openai.OpenAI(base_url=f"{served.url}/v1", api_key="local", max_retries=0)
    plain = client.chat.completions.create(
        model="proc", messages=[{"role": "user", "content": "hello"}], user="web:p"
    )
    assert plain.choices[0].message.content == "echo: hello"
    pieces = [
        chunk.choices[0].delta.content or ""
        for chunk in client.chat.completions.create(
            model="proc", messages=[{"role": "user", "content": "again"}], user="web:p", stream=True
        )
        if chunk.choices
    ]
    assert len(pieces) > 2 and "".join(pieces) == "echo: again"
    assert [m.id for m in client.models.list()] == ["proc-agent"]
    assert len(_pids_running(served.marker)) == 1  # the MCP server runs with the app
    # the access log, one line per request: written as the response ends, so it may trail the client
    deadline = time.monotonic() + 30
    while "GET /v1/models 200" not in served.stderr() and time.monotonic() < deadline:
        time.sleep(0.05)
    log = served.stderr()
    assert "POST /v1/chat/completions 200" in log
    assert "GET /v1/models 200" in log


def _stream_in_thread(url: str, text: str) -> tuple[threading.Thread, list[str], threading.Event]:
    events: list[str] = []
    first = threading.Event()

    def consume() -> None:
        try:
            with (
                httpx.Client(timeout=60) as client,
                connect_sse(client, "POST", f"{url}/v1/chats/web:t/messages", json={"text": text}) as source,
            ):
                for event in source.iter_sse():
                    events.append(event.event)
                    first.set()
        except httpx.HTTPError:
            events.append("<connection lost>")
        first.set()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    return thread, events, first


def _user_turns(root: Path) -> list[str]:
    path = root / ".ship" / "chats" / "web%3At" / "history.jsonl"
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [e["text"] for e in lines if e["role"] == "user"]


def test_openai_sdk_then_sigterm_during_a_turn_lets_it_finish_and_stops_everything(served: Served) -> None:
    """One process (start-up is the slow part): the SDK works against it, then a graceful stop."""
    _openai_sdk_round(served)
    thread, events, first = _stream_in_thread(served.url, "slow turn")
    assert first.wait(30), served.stderr()
    served.process.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    with pytest.raises(httpx.TransportError):  # no new connections once stopping
        httpx.get(f"{served.url}/healthz", timeout=2)
    thread.join(60)
    assert served.process.wait(60) in (0, -signal.SIGTERM), served.stderr()  # uvicorn re-raises SIGTERM
    assert events[-1] == "done" and "text_delta" in events  # the turn ran to its end
    assert _user_turns(served.root) == ["slow turn"]  # and was committed
    assert _pids_running(served.marker) == []  # no orphan MCP server


@pytest.mark.parametrize("served", [1], indirect=True)
def test_sigterm_past_the_grace_cancels_the_turn_without_committing_it(served: Served) -> None:
    thread, events, first = _stream_in_thread(served.url, "slow turn")
    assert first.wait(30), served.stderr()
    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(60) in (0, -signal.SIGTERM), served.stderr()  # uvicorn re-raises SIGTERM
    thread.join(10)
    assert "done" not in events
    assert _user_turns(served.root) == []  # nothing of the cancelled turn was saved
    messages = served.root / ".ship" / "chats" / "web%3At" / "messages.jsonl"
    assert not messages.exists() or "slow turn" not in messages.read_text(encoding="utf-8")
    assert _pids_running(served.marker) == []
    assert "Cancel 1 running task" in served.stderr() or "cancel" in served.stderr().lower()


def test_model_factory_errors_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "ship.json").write_text("{}")  # a project: else that is the one line
    result = subprocess.run(
        [SHIPAGENT, "serve", "-C", str(tmp_path), "--model-factory", "no_such_module:build"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "error: --model-factory 'no_such_module:build': ModuleNotFoundError" in result.stderr
    assert "Traceback" not in result.stderr
