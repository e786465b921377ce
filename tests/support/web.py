"""Support for the web page tests: Debian's chromium via Playwright, the real serve app under uvicorn.

Playwright's own browser download is not reachable from these machines, so the browser is always
``/usr/bin/chromium`` (installed by apt; ``.ci/run`` installs it when missing). The server is the
real ``shipagent.hosts.serve.create_app`` running under uvicorn on 127.0.0.1 in a thread of the test
process, so a scripted ``FunctionModel`` (a Python function) can drive the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from tests.support.core import last_user_text
from tests.support.net import free_port
from tests.support.paths import ROOT

CHROMIUM = Path("/usr/bin/chromium")
STATIC = ROOT / "shipagent" / "hosts" / "serve" / "static"


def launch_chromium(playwright: Any) -> Any:
    """Debian's chromium, headless; a clear error (not a skip) when it is missing."""
    if not CHROMIUM.exists():
        raise RuntimeError(f"the web page tests need {CHROMIUM}: apt-get install chromium (.ci/run does)")
    return playwright.chromium.launch(executable_path=str(CHROMIUM))


@contextlib.contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """Run an ASGI ``app`` under uvicorn on 127.0.0.1 in a thread; yields its base URL.

    The app's lifespan starts and stops the agent, exactly as ``shipagent serve`` does.
    """
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the server thread died before it started listening")
        if time.monotonic() > deadline:
            raise TimeoutError("uvicorn did not start within 20 s")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


# ------------------------------------------------------------------ the scripted model


def tool_return(messages: list[ModelMessage]) -> ToolReturnPart | None:
    """The tool result the model is being asked to answer, if the newest request carries one."""
    last = messages[-1]
    if isinstance(last, ModelRequest):
        for part in last.parts:
            if isinstance(part, ToolReturnPart):
                return part
    return None


Reply = Callable[[str, ToolReturnPart | None], "list[str] | DeltaToolCalls"]


class StreamingScript:
    """A FunctionModel that streams scripted answers in small pieces, with pauses between them.

    ``reply(user_text, tool_result)`` returns either the text chunks to stream or a tool call
    (``DeltaToolCalls``). The pause lets the browser render (and a test observe) partial text.
    """

    def __init__(self, reply: Reply, *, pause: float = 0.12) -> None:
        self.reply = reply
        self.pause = pause
        self.model = FunctionModel(self._complete, stream_function=self._stream)

    def _complete(self, messages: list[ModelMessage], info: AgentInfo) -> Any:
        raise AssertionError("the web page must stream; a non-streamed model request was made")

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        planned = self.reply(last_user_text(messages), tool_return(messages))
        if isinstance(planned, dict):
            yield planned
            return
        for index, chunk in enumerate(planned):
            if index:
                await asyncio.sleep(self.pause)
            yield chunk


def shell_call(command: str, call_id: str = "call-shell-1") -> DeltaToolCalls:
    return {
        0: DeltaToolCall(name="exec_shell", json_args=json.dumps({"command": command}), tool_call_id=call_id)
    }


def chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]
