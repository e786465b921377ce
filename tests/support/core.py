"""Helpers shared by the core-runtime tests: project dirs, scripted models, message rendering."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from shipagent import ShipAgent


def make_project(root: Path, ship: dict[str, Any] | None = None) -> Path:
    """A real project directory with an (optional) ship.json."""
    root.mkdir(parents=True, exist_ok=True)
    if ship is not None:
        (root / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    return root


def make_agent(root: Path, model: Any, tools: Sequence[Callable[..., Any]] = ()) -> ShipAgent:
    toolsets = [FunctionToolset(list(tools))] if tools else []
    return ShipAgent.from_project(root, model=model, toolsets=toolsets)


def context_limits(**chat_history: int) -> dict[str, Any]:
    return {"context": {"chatHistory": chat_history}}


def _part_text(part: Any) -> str:
    if isinstance(part, UserPromptPart):
        return part.content if isinstance(part.content, str) else str(part.content)
    if isinstance(part, SystemPromptPart | TextPart):
        return part.content
    if isinstance(part, ToolCallPart):
        return f"{part.tool_name}({part.args_as_json_str()})"
    if isinstance(part, ToolReturnPart):
        return f"{part.tool_name} -> {part.model_response_str()}"
    if isinstance(part, RetryPromptPart):
        return f"retry {part.tool_name}"
    return ""


def render(messages: Sequence[ModelMessage]) -> list[tuple[str, str, str]]:
    """Messages as ``(message kind, part kind, text)`` tuples, one per part."""
    return [(m.kind, p.part_kind, _part_text(p)) for m in messages for p in m.parts]


def texts(messages: Sequence[ModelMessage]) -> list[str]:
    return [t for _, _, t in render(messages)]


_NOTES = ("[Summary of the earlier conversation", "[shipagent left out ")
"""How shipagent's own notes begin: a request sends them as user text, but nobody said them."""


def user_texts(messages: Sequence[ModelMessage]) -> list[str]:
    """What the user said in ``messages``: the user prompts, shipagent's notes left out."""
    return [t for _, kind, t in render(messages) if kind == "user-prompt" and not t.startswith(_NOTES)]


def last_user_text(messages: Sequence[ModelMessage]) -> str:
    found = user_texts(messages)
    return found[-1] if found else ""


def dump(messages: Sequence[ModelMessage]) -> Any:
    """A JSON-comparable form of messages (for 'exactly the same history' checks)."""
    return ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")


def read_jsonl(path: Path) -> list[Any]:
    """Every line of a JSONL file parsed strictly (a bad line fails the test)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


class ScriptedModel:
    """A FunctionModel that records every request and answers via ``reply(messages, info, n)``.

    The default reply is ``"echo: <last user text>"``.
    """

    def __init__(self, reply: Callable[[list[ModelMessage], AgentInfo, int], ModelResponse] | None = None):
        self.requests: list[list[ModelMessage]] = []
        self._reply = reply
        self.model = FunctionModel(self._call)

    def _call(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        if self._reply is not None:
            return self._reply(list(messages), info, len(self.requests))
        return ModelResponse(parts=[TextPart(f"echo: {last_user_text(messages)}")])


def tool_call(name: str, args: dict[str, Any] | None = None, call_id: str = "call-1") -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(name, args or {}, tool_call_id=call_id)])


def answer(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)])


def has_tool_return(messages: Sequence[ModelMessage]) -> bool:
    """Whether the newest message is the result of a tool call (the model should answer now)."""
    last = messages[-1]
    return isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts)
