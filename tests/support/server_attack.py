"""A real ``shipagent serve`` process for the server-attack tests, and raw-socket helpers.

The model is a scripted ``FunctionModel`` loaded with ``--model-factory`` from a module beside
ship.json: it echoes the user's text, so a committed turn is visible in the transcript.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.net import free_port

SHIPAGENT = str(Path(sys.executable).with_name("shipagent"))
ECHO_MODEL = """
from pydantic_ai.messages import ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import FunctionModel


def _said(messages):
    for part in reversed(messages[-1].parts):
        if isinstance(part, UserPromptPart):
            return str(part.content)
    return ""


def respond(messages, info):
    return ModelResponse(parts=[TextPart("echo: " + _said(messages))])


async def stream(messages, info):
    yield "echo: " + _said(messages)


def build():
    return FunctionModel(respond, stream_function=stream, model_name="scripted")
"""


@dataclass
class Served:
    url: str
    port: int
    root: Path
    log: Path

    def stderr(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def transcript(self, chat_key: str) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.url}/v1/chats/{chat_key}/transcript", timeout=10)
        assert response.status_code == 200, response.text
        entries: list[dict[str, Any]] = response.json()["entries"]
        return entries

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=5).status_code == 200
        except httpx.TransportError:
            return False


LIMIT_FILES = (
    "import os, resource, sys; n = int(sys.argv[1]); "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); os.execv(sys.argv[2], sys.argv[2:])"
)


@contextmanager
def shipagent_serve(
    root: Path, serve: dict[str, Any] | None = None, *, open_files: int | None = None
) -> Iterator[Served]:
    """``shipagent serve`` on 127.0.0.1 for a project in ``root`` with ship.json ``serve`` settings.

    ``open_files`` starts it with that open-file limit (``ulimit -n``).
    """
    root.mkdir(parents=True, exist_ok=True)
    ship = {"name": "attacked-agent", "serve": serve or {}}
    (root / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    (root / "echo_model.py").write_text(ECHO_MODEL, encoding="utf-8")
    port = free_port()
    log = root / "serve.log"
    command = [
        SHIPAGENT,
        "serve",
        "-C",
        str(root),
        "--port",
        str(port),
        "--model-factory",
        "echo_model:build",
    ]
    if open_files is not None:
        command = [sys.executable, "-c", LIMIT_FILES, str(open_files), *command]
    with open(log, "wb") as err:
        process = subprocess.Popen(command, stdout=err, stderr=subprocess.STDOUT)
    served = Served(f"http://127.0.0.1:{port}", port, root, log)
    try:
        deadline = time.monotonic() + 60
        while not served.healthy():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"shipagent serve did not start:\n{served.stderr()}")
            time.sleep(0.1)
        yield served
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def raw_request(port: int, data: bytes, *, timeout: float = 10) -> bytes:
    """Send ``data`` on a new connection and read until the server closes it (or ``timeout``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        return read_until_closed(sock, timeout)


def read_until_closed(sock: socket.socket, timeout: float) -> bytes:
    """Everything the server sends until it closes the connection; raises after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    got = b""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            piece = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            return got
        if not piece:
            return got
        got += piece
    raise AssertionError(f"the server kept the connection open for {timeout} s (got {got[:200]!r})")


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def json_body(response: bytes) -> Any:
    return json.loads(response.split(b"\r\n\r\n", 1)[1])
