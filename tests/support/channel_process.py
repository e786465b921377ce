"""``shipagent channels run`` as a real process, for the tests that kill it mid-answer.

Every platform has one such test: the process answers with the scripted model below (a module the
test writes beside ship.json and names with ``--model-factory``), a test kills it with SIGKILL
while the answer streams, starts it again and checks the message is answered exactly once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

__all__ = [
    "HOLD",
    "MODEL_MODULE",
    "SHIPAGENT",
    "kill_while_streaming",
    "reply_recorded",
    "start_channels",
    "stop",
    "user_lines",
]

SHIPAGENT = str(Path(sys.executable).with_name("shipagent"))

MODEL_MODULE = """
import asyncio
from pathlib import Path
from pydantic_ai.messages import ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import FunctionModel

def _said(messages):
    for part in reversed(messages[-1].parts):
        if isinstance(part, UserPromptPart):
            return str(part.content)
    return ""

def respond(messages, info):
    return ModelResponse(parts=[TextPart("done: " + _said(messages))])

HOLD = Path(__file__).with_name("hold")

async def stream(messages, info):
    for n, word in enumerate(("done: " + _said(messages) + " " + "and more " * 8).split(" ")):
        await asyncio.sleep(0.25)
        yield word + " "
        while n == 0 and HOLD.exists():  # the first word is out: wait here while the test says so
            await asyncio.sleep(0.05)

def build():
    return FunctionModel(respond, stream_function=stream, model_name="scripted")
"""
"""A model that answers ``done: <what was said> and more and more …`` slowly, word by word, so a
test has time to kill the process mid-answer (the full answer ends with ``and more``). While a
file named :data:`HOLD` exists beside the module, the answer stops after its first word, so a kill
lands mid-stream however slow the machine is."""

HOLD = "hold"
"""The file (in the project directory, beside the model module) that holds the answer after its first word."""


def held_project(tmp_path: Path) -> tuple[Path, Path]:
    """A project under ``tmp_path`` with the scripted model, its answer held after the first word
    (:data:`HOLD`) until :func:`kill_while_streaming` lets it go; and where the process logs."""
    root = tmp_path / "p"
    root.mkdir()
    (root / "scripted_model.py").write_text(MODEL_MODULE, encoding="utf-8")
    (root / HOLD).touch()
    return root, tmp_path / "channels.log"


def start_channels(root: Path, log: Path) -> subprocess.Popen[bytes]:
    """``shipagent channels run`` on the project at ``root`` with the scripted model, output to ``log``."""
    command = [SHIPAGENT, "channels", "run", "-C", str(root), "--model-factory", "scripted_model:build"]
    with open(log, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)


async def stop(process: subprocess.Popen[bytes], sig: int) -> None:
    """Send ``sig`` and wait (off the event loop) for the process to end."""
    process.send_signal(sig)
    await anyio.to_thread.run_sync(lambda: process.wait(30))


def reply_recorded(root: Path, channel: str) -> bool:
    """Whether the channel's dedupe record names a message its answer was posted as (after the post
    there is a moment before that is on disk: a kill in it would leave the message behind)."""
    seen = root / ".ship" / "channels" / f"{channel}-seen.jsonl"
    return seen.exists() and '"reply"' in seen.read_text(encoding="utf-8")


async def kill_while_streaming(
    process: subprocess.Popen[bytes], root: Path, channel: str, fake: Any, text: Callable[[Any], str]
) -> Any:
    """SIGKILL ``process`` once its answer has begun streaming (held after its first word by
    :data:`HOLD`) and the message it streams into is on disk; then let the next answer go on.
    The one message the chat shows then, the half-written ``done:``."""
    await fake.wait_for(lambda: fake.shown(), within=60)
    await fake.wait_for(lambda: reply_recorded(root, channel), within=60)
    await stop(process, signal.SIGKILL)
    (partial,) = fake.shown()
    assert text(partial).strip() == "done:"
    (root / HOLD).unlink()
    return partial


def user_lines(transcript: Path) -> int:
    """How many user lines a chat's transcript holds (a killed turn's replay must add just one)."""
    lines = [json.loads(line) for line in transcript.read_text(encoding="utf-8").splitlines()]
    return sum(1 for line in lines if line.get("role") == "user")
