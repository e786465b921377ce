"""Helpers for the MCP tests: projects on disk, child-process scans, scripted models."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent.config import ShipConfig, load_config

PYTHON = sys.executable
STDIO_SERVER = str(Path(__file__).with_name("stdio_server.py"))


def make_project(root: Path, servers: dict[str, Any], **extra: Any) -> ShipConfig:
    """Write a ship.json declaring ``servers`` under ``root`` and load it the way the agent does."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "ship.json").write_text(json.dumps({"mcp": {"servers": servers}, **extra}), encoding="utf-8")
    return load_config(root)


def descendants(pid: int | None = None) -> set[int]:
    """Every live (non-zombie) descendant process of ``pid`` (default: this process), from /proc."""
    parent_of: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ..." - comm may contain spaces and parentheses
        rest = stat.rsplit(")", 1)[1].split()
        if rest[0] == "Z":
            continue
        parent_of[int(entry)] = int(rest[1])
    root = os.getpid() if pid is None else pid
    found: set[int] = set()
    frontier = {root}
    while frontier:
        children = {p for p, pp in parent_of.items() if pp in frontier and p not in found}
        found |= children
        frontier = children
    return found


@dataclass
class Script:
    """A FunctionModel that makes the given tool calls, one step each, then answers with text.

    ``seen`` collects what each model request carried, so tests can assert on what the model saw.
    """

    calls: list[tuple[str, dict[str, Any]]]
    requests: list[list[ModelMessage]] = field(default_factory=list)
    infos: list[AgentInfo] = field(default_factory=list)
    between: Callable[[int], Any] | None = None

    def returns(self) -> list[ToolReturnPart]:
        """Every tool return the model was shown, in order (from the last request)."""
        last = self.requests[-1]
        return [
            part
            for message in last
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        ]

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = len(self.requests)
        self.requests.append(list(messages))
        self.infos.append(info)
        if self.between is not None and step > 0:
            result = self.between(step)
            if hasattr(result, "__await__"):
                await result
        if step < len(self.calls):
            name, args = self.calls[step]
            return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"call-{step}")])
        return ModelResponse(parts=[TextPart("done")])

    def model(self) -> FunctionModel:
        return FunctionModel(self)
