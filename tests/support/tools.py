"""Scripted-model helpers for the builtin tool tests: every test goes through ``ShipAgent.run``."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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

from shipagent.agent._agent import ShipAgent


@dataclass
class Call:
    """A tool call the scripted model makes."""

    tool: str
    args: dict[str, Any] = field(default_factory=dict)


Step = str | Call | Sequence[Call]


@dataclass
class Script:
    """A model that plays ``steps`` in order (text ends the run) and records every request it got."""

    steps: list[Step]
    requests: list[list[ModelMessage]] = field(default_factory=list)
    infos: list[AgentInfo] = field(default_factory=list)

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        self.infos.append(info)
        step = self.steps.pop(0) if self.steps else "done"
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)])
        calls = [step] if isinstance(step, Call) else list(step)
        return ModelResponse(
            parts=[
                ToolCallPart(c.tool, json.dumps(c.args), tool_call_id=f"call-{i}")
                for i, c in enumerate(calls)
            ]
        )

    def model(self) -> FunctionModel:
        return FunctionModel(self)


def make_project(root: Path, ship: dict[str, Any] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "ship.json").write_text(json.dumps(ship or {}), encoding="utf-8")
    return root


def make_agent(root: Path, script: Script, **kwargs: Any) -> ShipAgent:
    return ShipAgent.from_project(root, model=script.model(), **kwargs)


def tool_results(messages: Sequence[ModelMessage], name: str) -> list[Any]:
    """Contents of every return of tool ``name`` in ``messages``."""
    return [
        part.content
        for m in messages
        if isinstance(m, ModelRequest)
        for part in m.parts
        if isinstance(part, ToolReturnPart) and part.tool_name == name
    ]


def system_texts(message: ModelMessage) -> list[str]:
    return [p.content for p in message.parts if isinstance(p, SystemPromptPart)]


def is_user_text(message: ModelMessage, text: str) -> bool:
    return isinstance(message, ModelRequest) and any(
        isinstance(p, UserPromptPart) and p.content == text for p in message.parts
    )


def index_of_user(messages: Sequence[ModelMessage], text: str) -> int:
    """Index of the request carrying the user's ``text`` (the current user message)."""
    found = [i for i, m in enumerate(messages) if is_user_text(m, text)]
    assert found, f"user message {text!r} not in the request"
    return found[-1]


def response_text(message: ModelMessage) -> str:
    assert isinstance(message, ModelResponse), f"expected an assistant message, got {type(message).__name__}"
    return "".join(p.content for p in message.parts if isinstance(p, TextPart))


def first_matching(messages: Sequence[ModelMessage], predicate: Callable[[ModelMessage], bool]) -> int:
    for index, message in enumerate(messages):
        if predicate(message):
            return index
    raise AssertionError("no message matches")
