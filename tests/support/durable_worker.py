"""Scripted model and tools for durable-mode worker subprocesses (the ``--model-factory`` hook).

Workers run as real processes (``shipagent worker --model-factory
tests.support.durable_worker:scripted_model`` with the repository on ``PYTHONPATH``); the project's
ship.json lists this module in ``tools.modules`` so the workers offer its tools. Everything the test needs to observe crosses
the process boundary through files in ``$SHIPAGENT_TEST_DIR``:

* ``requests.jsonl`` — one line per model request *actually sent* (a recorded request replayed by
  DBOS never reaches the model, so it is not written): the user's text, the phase (``first`` or
  ``after-tool``), the worker's pid, the system prompt texts it carried (``RULE-…`` injections and
  ``agent_load_context`` blocks) and what it carried of the
  conversation (``said``: ``user: …`` / ``assistant: …`` per prompt and answer, in order);
* ``running-<tag>`` — written by ``test_block`` (and by a blocking model request) when it starts, so
  the test can kill the worker mid-call; it then waits for ``release-<tag>`` (never, if the test
  wants it killed there);
* ``effects.jsonl`` — one line per ``test_block`` call that finished (an effect outside the turn).

The model's answers depend only on the user's text:

* ``block:<tag>`` — call ``test_block(tag)``, then answer ``finished <tag>``;
* ``inject:<tag>`` — call ``test_inject(tag)`` (injects the system message ``RULE-<tag>``), then block in
  the next model request on ``release-<tag>``, then answer ``saw RULE-<tag>: yes|no``;
* ``send:<tag>`` — call ``chat_send("sent <tag>")``, then block in the next model request on
  ``release-<tag>``, then answer ``finished <tag>``;
* ``shell:<command>`` — call ``exec_shell(command)``, then answer ``shell said: <its result as JSON>``;
* ``recap:<n>`` — call ``agent_load_context(count=n)``, then answer ``recapped <n>``;
* ``recall:<n>`` — call ``chat_load_history(count=n)``, then answer ``recalled <n>``;
* ``sendfail:<tag>`` — call ``chat_send("sent <tag>")``, then fail the next model request (the
  turn fails after something was said);
* ``big:<tag>`` — call ``test_big(tag)`` (:func:`big_output`: over the spill threshold, so the
  result becomes a context file), then answer ``spilled <id>`` with the id the preview names;
* ``read:<id>:<offset>:<limit>:<pattern>`` — call ``context_read`` and ``context_grep`` on that id
  in one step, then answer with the two results as JSON;
* anything else — answer ``echo: <text>`` (after ``$SHIPAGENT_TEST_DELAY`` seconds, default 0).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from shipagent import current_tool_context
from tests.support.core import last_user_text

__all__ = ["scripted_model", "toolset"]


def _dir() -> Path:
    return Path(os.environ["SHIPAGENT_TEST_DIR"])


def _append(name: str, record: dict[str, Any]) -> None:
    with open(_dir() / name, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


async def _wait_released(tag: str) -> None:
    (_dir() / f"running-{tag}").write_text(str(os.getpid()), encoding="utf-8")
    while not (_dir() / f"release-{tag}").exists():  # noqa: ASYNC110 - another process writes it
        await asyncio.sleep(0.05)


async def test_block(tag: str) -> str:
    """Signal that the call is running, wait for the test to release it, record the effect."""
    await _wait_released(tag)
    _append("effects.jsonl", {"tag": tag, "pid": os.getpid()})
    return f"block {tag} done"


async def test_inject(tag: str) -> str:
    """Inject a system message the next model request must carry."""
    result = current_tool_context().inject_system_message_once(f"RULE-{tag}", fingerprint=f"rule:{tag}")
    _append("effects.jsonl", {"tag": f"inject-{tag}", "inserted": result.inserted, "pid": os.getpid()})
    return f"injected {tag}"


def big_output(tag: str) -> str:
    """~48 KB of numbered lines, different per tag (and not ASCII only: UTF-8 offsets matter)."""
    return "".join(f"{tag} line {n:05d} ✓ {'x' * (n % 50)}\n" for n in range(1200))


async def test_big(tag: str) -> str:
    """Return :func:`big_output`: far over ``spillThresholdBytes``, so it is spilled."""
    return big_output(tag)


toolset: FunctionToolset[Any] = FunctionToolset([test_block, test_inject, test_big])


def _said(messages: list[ModelMessage]) -> list[str]:
    """What the model sees of the conversation: every user prompt and answer text, in order."""
    said: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                said.append(f"user: {part.content}")
            elif isinstance(part, TextPart):
                said.append(f"assistant: {part.content}")
    return said


def _tool_returns(message: ModelMessage) -> list[Any]:
    return [p.content for p in message.parts if isinstance(p, ToolReturnPart)]


def _systems(messages: list[ModelMessage]) -> list[str]:
    return [
        p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, SystemPromptPart) and p.content.startswith(("RULE-", "[Agent context"))
    ]


async def _respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    text = last_user_text(messages)
    last = messages[-1]
    after_tool = isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts)
    phase = "after-tool" if after_tool else "first"
    _append(
        "requests.jsonl",
        {
            "text": text,
            "phase": phase,
            "pid": os.getpid(),
            "systems": _systems(messages),
            "said": _said(messages),
            "t": time.time(),
        },
    )
    kind, _, tag = text.partition(":")
    if kind == "block" and tag:
        if not after_tool:
            return ModelResponse(parts=[ToolCallPart("test_block", {"tag": tag})])
        return ModelResponse(parts=[TextPart(f"finished {tag}")])
    if kind == "inject" and tag:
        if not after_tool:
            return ModelResponse(parts=[ToolCallPart("test_inject", {"tag": tag})])
        await _wait_released(tag)
        seen = "yes" if f"RULE-{tag}" in _systems(messages) else "no"
        return ModelResponse(parts=[TextPart(f"saw RULE-{tag}: {seen}")])
    if kind == "send" and tag:
        if not after_tool:
            return ModelResponse(parts=[ToolCallPart("chat_send", {"text": f"sent {tag}"})])
        await _wait_released(tag)
        return ModelResponse(parts=[TextPart(f"finished {tag}")])
    if kind == "shell" and tag:
        if not after_tool:
            return ModelResponse(parts=[ToolCallPart("exec_shell", {"command": tag})])
        return ModelResponse(parts=[TextPart(f"shell said: {json.dumps(_tool_returns(last)[0])}")])
    if kind == "recap" and tag:
        if not after_tool:
            return ModelResponse(parts=[ToolCallPart("agent_load_context", {"count": int(tag)})])
        return ModelResponse(parts=[TextPart(f"recapped {tag}")])
    if kind == "recall" and tag:
        if not after_tool:
            return ModelResponse(parts=[ToolCallPart("chat_load_history", {"count": int(tag)})])
        return ModelResponse(parts=[TextPart(f"recalled {tag}")])
    if kind == "sendfail" and tag:
        if not after_tool:
            return ModelResponse(parts=[ToolCallPart("chat_send", {"text": f"sent {tag}"})])
        raise RuntimeError(f"scripted failure after sending {tag}")
    if kind == "big" and tag:
        if not after_tool:
            return ModelResponse(parts=[ToolCallPart("test_big", {"tag": tag})])
        found = re.search(r"kept as context file id='([^']+)'", _tool_returns(last)[0])
        return ModelResponse(parts=[TextPart(f"spilled {found.group(1) if found else '?'}")])
    if kind == "read" and tag:
        ref_id, offset, limit, pattern = tag.split(":", 3)
        if not after_tool:
            read = {"id": ref_id, "offset": int(offset), "limit": int(limit)}
            grep = {"id": ref_id, "pattern": pattern}
            return ModelResponse(
                parts=[ToolCallPart("context_read", read), ToolCallPart("context_grep", grep)]
            )
        return ModelResponse(parts=[TextPart(json.dumps(_tool_returns(last)))])
    delay = float(os.environ.get("SHIPAGENT_TEST_DELAY", "0"))
    if delay:
        await asyncio.sleep(delay)
    return ModelResponse(parts=[TextPart(f"echo: {text}")])


def scripted_model() -> FunctionModel:
    """The ``--model-factory`` target: a FunctionModel scripted by the user's text."""
    return FunctionModel(_respond, model_name="durable-scripted")
