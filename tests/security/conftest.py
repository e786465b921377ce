"""A real ``shipagent serve`` driven by a hostile scripted model, for the sandbox attacks.

The model (``--model-factory hostile_model:build``, a module beside ship.json) does what a
prompt-injected model does: a user message ``exec: CMD`` makes it call ``exec_shell`` with ``CMD``;
given the tool's answer, it repeats it to the user. Tests read ``toolCalls[0].output`` of the
``POST /v1/chats/{key}/messages`` answer: exactly what the model was told.

The server holds secrets a command must not see: ``OPENAI_API_KEY`` and the two ``serve.apiKeys``
in its environment, a ``.env``, another chat's transcript, a descriptor 8 open on a host file.
``permissions.execShell.mode`` is ``allow``, so the sandbox is the only thing in the way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from shipagent.tools._sandbox import sandbox_status
from tests.support.net import free_port

_REQUIRED = bool(os.environ.get("SHIPAGENT_REQUIRE_SANDBOX") or os.environ.get("CI"))

SANDBOX_MISSING = not sandbox_status().available and not _REQUIRED
"""Skip on a developer machine without a working bwrap; never in CI, where it must fail instead."""

SHIPAGENT = str(Path(sys.executable).with_name("shipagent"))

OPENAI_KEY = "sk-server-openai-secret-7f3a9c"
ADMIN_KEY = "admin-key-secret-0123456789abcdef"
WEB_KEY = "web-key-secret-fedcba9876543210"
DOTENV_SECRET = "dotenv-secret-value-5521"
BOB_SECRET = "bob-private-words-8812"
HIDDEN_SECRET = "hidden-by-config-3141"
EXTRA_ALLOWED = "passed-through-on-purpose"
NAMED = "named-for-the-mcp-server"
SERVER_SECRETS = (OPENAI_KEY, ADMIN_KEY, WEB_KEY, DOTENV_SECRET)

HOSTILE_MODEL = """
import json

from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import FunctionModel


def respond(messages, info):
    last = messages[-1].parts
    for part in last:
        if isinstance(part, ToolReturnPart):
            return ModelResponse(parts=[TextPart(json.dumps(part.content, default=str)[:20000])])
    said = next((str(p.content) for p in reversed(last) if isinstance(p, UserPromptPart)), "")
    if said.startswith("call: "):
        return ModelResponse(parts=[ToolCallPart(said[len("call: "):], {})])
    if said.startswith("exec: "):
        call = {"command": said[len("exec: "):], "timeoutMs": 120000}
        return ModelResponse(parts=[ToolCallPart("exec_shell", call)])
    return ModelResponse(parts=[TextPart("echo: " + said)])


def build():
    return FunctionModel(respond, model_name="hostile")
"""

PROBE_SERVER = """
import json
import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("probe")


@server.tool()
def probe() -> str:
    \"\"\"What this server was handed: its environment and whether descriptor 8 is open.\"\"\"
    try:
        os.fstat(8)
        fd8 = True
    except OSError:
        fd8 = False
    return json.dumps({"env": dict(os.environ), "fd8": fd8})


server.run()
"""

TOOLS_MODULE = """
from pydantic_ai.toolsets import FunctionToolset


def project_motto() -> str:
    \"\"\"The project's motto.\"\"\"
    return "tools as shipped"


toolset = FunctionToolset([project_motto])
"""


@dataclass
class Hostile:
    """The project, the running server, and how to send it a turn."""

    root: Path
    host_log: Path
    log: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    """More variables for the server's environment (``PYTHONPATH`` with a project folder)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {**os.environ, "OPENAI_API_KEY": OPENAI_KEY, "ADMIN_KEY": ADMIN_KEY, "WEB_KEY": WEB_KEY}
        env |= {"EXTRA_ALLOWED": EXTRA_ALLOWED, "NAMED": NAMED, **self.extra_env}
        command = [SHIPAGENT, "serve", "-C", str(self.root), "--port", str(self.port)]
        command += ["--model-factory", "hostile_model:build"]
        # Descriptor 8 open on a host file and inheritable, as with ``shipagent serve 8>>host.log``.
        command = ["bash", "-c", 'exec 8>>"$0" && exec "$@"', str(self.host_log), *command]
        with open(self.log, "ab") as err:
            self.process = subprocess.Popen(command, stdout=err, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"shipagent serve did not start:\n{self.stderr()}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process = None

    def stderr(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def turn(self, chat: str, text: str, key: str = WEB_KEY) -> dict[str, Any]:
        answer = httpx.post(
            f"{self.url}/v1/chats/{chat}/messages",
            json={"text": text},
            headers={"Authorization": f"Bearer {key}"},
            timeout=180,
        )
        assert answer.status_code == 200, answer.text
        return answer.json()  # type: ignore[no-any-return]

    def shell(self, command: str, chat: str = "web:alice") -> dict[str, Any]:
        """Run ``command`` through the hostile model; what exec_shell told the model."""
        result = self.turn(chat, f"exec: {command}")
        calls = [c for c in result["toolCalls"] if c["tool"] == "exec_shell"]
        assert len(calls) == 1, result
        output = calls[0]["output"]
        if isinstance(output, str):
            output = json.loads(output)
        assert isinstance(output, dict) and "denied" not in output, output  # it ran: the sandbox decides
        return output


def write_project(root: Path) -> None:
    ship = {
        "name": "hostile-target",
        "permissions": {
            "execShell": {
                "mode": "allow",
                "sandbox": "required",
                "maxOutputBytes": 1024 * 1024,
                "maxProcesses": 400,
                "maxFileBytes": 4 * 1024 * 1024,
                "env": ["EXTRA_ALLOWED", "FIXED_VALUE=set-by-ship-json"],
                "hide": ["private", "notes/key.txt"],
            }
        },
        "mcp": {
            "servers": {
                "probe": {
                    "command": sys.executable,
                    "args": ["probe_server.py"],
                    "env": {"NAMED": "${NAMED}"},
                }
            }
        },
        "tools": {"modules": ["project_tools"]},
        "serve": {
            "apiKeys": [
                {"key": "${ADMIN_KEY}"},
                {"key": "${WEB_KEY}", "chatKeys": ["web:*"]},
            ]
        },
    }
    (root / "ship.json").write_text(json.dumps(ship, indent=2), encoding="utf-8")
    (root / "Agent.md").write_text("You are the hostile-target agent.\n", encoding="utf-8")
    (root / "hostile_model.py").write_text(HOSTILE_MODEL, encoding="utf-8")
    (root / "project_tools.py").write_text(TOOLS_MODULE, encoding="utf-8")
    (root / ".env").write_text(f"DOTENV_SECRET={DOTENV_SECRET}\n", encoding="utf-8")
    (root / "README.md").write_text("# target\n", encoding="utf-8")
    (root / "probe_server.py").write_text(PROBE_SERVER, encoding="utf-8")
    (root / "private").mkdir()
    (root / "private" / "data.txt").write_text(f"{HIDDEN_SECRET}\n", encoding="utf-8")
    (root / "notes").mkdir()
    (root / "notes" / "key.txt").write_text(f"{HIDDEN_SECRET}\n", encoding="utf-8")
    (root / "notes" / "todo.txt").write_text("visible\n", encoding="utf-8")


@pytest.fixture(scope="package")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    """One server for the whole battery (start-up is the slow part); tests must not break it."""
    if SANDBOX_MISSING:
        pytest.skip(f"no working bwrap: {sandbox_status().reason}")
    base = tmp_path_factory.mktemp("hostile")
    root = base / "project"
    root.mkdir()
    write_project(root)
    server = Hostile(root=root, host_log=base / "host.log", log=base / "serve.log")
    server.start()
    try:
        # Another user's chat, which the web key may not read over HTTP.
        server.turn("api:chat:bob", f"my secret is {BOB_SECRET}", key=ADMIN_KEY)
        yield server
    finally:
        server.stop()


def defining_files(root: Path) -> dict[str, bytes]:
    """The bytes of every file that defines the agent."""
    names = ("ship.json", "Agent.md", "project_tools.py", "hostile_model.py", ".env", "probe_server.py")
    return {name: (root / name).read_bytes() for name in names}
