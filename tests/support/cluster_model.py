"""The scripted model of the cluster test, copied beside each worker's ship.json.

Workers load it with ``shipagent worker --model-factory cluster_model:model`` (a module beside
ship.json is importable). It crosses process boundaries only through files in
``$CLUSTER_SIGNALS``:

* ``requests.jsonl`` — one line per model request sent: the user's text, the worker's pid, and
  what the request carried of the conversation (``said``);
* ``running-<tag>`` — written (with the pid) when a ``wait:<tag>`` request starts; the request
  then waits for ``release-<tag>`` before it answers ``answer <tag>``.

Anything else is answered ``echo: <text>`` at once.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel


def _signals() -> Path:
    return Path(os.environ["CLUSTER_SIGNALS"])


def _said(messages: list[ModelMessage]) -> list[str]:
    said: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                said.append(f"user: {part.content}")
            elif isinstance(part, TextPart):
                said.append(f"assistant: {part.content}")
    return said


def _record(request: dict[str, object]) -> None:
    with open(_signals() / "requests.jsonl", "a", encoding="utf-8") as handle:  # a line: no wait
        handle.write(json.dumps(request) + "\n")


async def _respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    said = _said(messages)
    text = said[-1].removeprefix("user: ") if said else ""
    _record({"text": text, "pid": os.getpid(), "said": said})
    kind, _, tag = text.partition(":")
    if kind == "wait" and tag:
        (_signals() / f"running-{tag}").write_text(str(os.getpid()), encoding="utf-8")
        while not (_signals() / f"release-{tag}").exists():  # noqa: ASYNC110 - the test writes it
            await asyncio.sleep(0.05)
        return ModelResponse(parts=[TextPart(f"answer {tag}")])
    return ModelResponse(parts=[TextPart(f"echo: {text}")])


def model() -> FunctionModel:
    """The ``--model-factory`` target."""
    return FunctionModel(_respond, model_name="cluster-scripted")
