"""The turn is a function of explicit parts: it runs without an agent, from a model and a dict.

``shipagent.agent._turn.run_turn`` takes a :class:`~shipagent.agent._turn.TurnParts` — the model, the toolset,
the instructions, the store operations as plain callables — and nothing else. These tests build
the parts by hand (a ``FunctionModel``, an in-memory store that is a dict, a pydantic-ai toolset)
and check what the turn does with them; the first one checks that the turn's module cannot reach
the agent at all, so the parts really are all it has.
"""

from __future__ import annotations

import ast
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.exceptions import ModelContextWindowExceededError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from shipagent.agent._request import TurnRequest
from shipagent.agent._streaming import PendingApprovals
from shipagent.agent._turn import TurnParts, run_turn
from shipagent.agent.turns import CommitOutcome, TurnCommit
from shipagent.chatkeys import ShipPaths
from shipagent.config import ShipConfig
from shipagent.events import Compacted, Done, RunEvent, TextDelta
from shipagent.tools._deps import TurnDeps, TurnStores
from shipagent.tools.execution import ToolExecutionContext

pytestmark = pytest.mark.anyio
PACKAGE = Path(__file__).resolve().parents[2] / "shipagent"


def _exists(module: str) -> bool:
    rel = PACKAGE.parent / Path(*module.split("."))
    return rel.with_suffix(".py").exists() or (rel / "__init__.py").exists()


def _reach(start: str) -> set[str]:
    """Every ``shipagent`` module ``start`` imports, directly or through others (any import form)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        rel = Path(*name.split("."))
        path = (PACKAGE.parent / rel).with_suffix(".py")
        if not path.exists():
            path = PACKAGE.parent / rel / "__init__.py"
        if not name.startswith("shipagent") or not path.exists():
            continue
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*package, base]).strip(".")
                # ``from . import x`` names the module x; ``from .m import X`` the module m
                todo.extend(f"{base}.{a.name}" if _exists(f"{base}.{a.name}") else base for a in node.names)
            elif isinstance(node, ast.Import):
                todo.extend(alias.name for alias in node.names)
    return {name for name in seen if name.startswith("shipagent") and _exists(name)}


def test_the_turn_module_cannot_reach_the_agent() -> None:
    reached = _reach("shipagent.agent._turn")
    assert "shipagent.agent.turns" in reached  # the walk follows imports (TurnCommit comes from there)
    assert "shipagent.agent._agent" not in reached
    assert all("Agent" not in str(f.type) or "Agent[TurnDeps" in str(f.type) for f in fields(TurnParts))


@dataclass
class MemoryChats:
    """A chat store that is a dict: what the turn's ``load``/``commit``/``keep_sent`` parts write."""

    histories: dict[str, list[ModelMessage]] = field(default_factory=dict)
    commits: list[TurnCommit] = field(default_factory=list)
    kept: list[tuple[str, str, list[str]]] = field(default_factory=list)
    locks: dict[str, anyio.Lock] = field(default_factory=dict)

    @asynccontextmanager
    async def lock(self, chat_key: str) -> Any:
        async with self.locks.setdefault(chat_key, anyio.Lock()):
            yield

    async def load(self, chat_key: str) -> list[ModelMessage]:
        return list(self.histories.get(chat_key, []))

    async def commit(self, turn: TurnCommit) -> CommitOutcome:
        self.commits.append(turn)
        self.histories[turn.chat_key] = [*turn.base, *turn.new]
        return None, None

    async def keep_sent(
        self, chat_key: str, request_id: str, text: str, ctx: ToolExecutionContext, sender: object
    ) -> None:
        self.kept.append((chat_key, request_id, list(ctx.sent_texts)))


def _parts(tmp_path: Path, model: FunctionModel, chats: MemoryChats, **changes: Any) -> TurnParts:
    tools: FunctionToolset[TurnDeps] = FunctionToolset()

    @tools.tool
    def where(run: RunContext[TurnDeps]) -> str:
        """Which chat this run is in (read from the run's deps, not from an agent)."""
        return f"in {run.deps.chat_key}"

    @tools.tool
    def say(run: RunContext[TurnDeps], text: str) -> str:
        """Deliver ``text`` to the user now (as chat_send does)."""
        run.deps.tool.sent_texts.append(text)
        return "sent"

    config = ShipConfig()
    ids = iter(f"r{n}" for n in range(1, 100))
    parts = TurnParts(
        loop=Agent(output_type=str),
        model=model,
        toolset=lambda: tools,
        model_settings=None,
        instructions=lambda ctx: _async(f"You help in {ctx.chat_key}."),
        tool_context=lambda key, rid, channel: ToolExecutionContext(
            chat_key=key, request_id=rid, project_root=tmp_path, config=config, paths=ShipPaths(tmp_path)
        ),
        tool_stores=TurnStores,
        request_id=lambda given: given or next(ids),
        lock=chats.lock,
        load=chats.load,
        commit=chats.commit,
        keep_sent=chats.keep_sent,
        history_sources=lambda key: [f"history:{n}" for n in range(len(chats.histories.get(key, [])))],
        keep_last=2,
        is_mcp_tool=lambda name: False,
        approvals=PendingApprovals(),
        explain=lambda exc: f"the scripted model gave up ({exc})",
    )
    return TurnParts(**{**{f.name: getattr(parts, f.name) for f in fields(parts)}, **changes})


async def _async(value: str) -> str:
    return value


def _tool_then_answer(seen: list[list[ModelMessage]]) -> FunctionModel:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        last = messages[-1].parts[-1]
        if isinstance(last, ToolReturnPart):
            return ModelResponse(parts=[TextPart(f"done: {last.content}")])
        return ModelResponse(parts=[ToolCallPart("where", {}, tool_call_id=f"c{len(seen)}")])

    return FunctionModel(reply)


async def test_a_turn_runs_from_explicit_parts_and_the_next_turn_sees_it(tmp_path: Path) -> None:
    seen: list[list[ModelMessage]] = []
    chats = MemoryChats()
    parts = _parts(tmp_path, _tool_then_answer(seen), chats)

    first = await run_turn(parts, TurnRequest("api:chat:a", "hello"))
    assert first.success and first.output == "done: in api:chat:a"
    assert first.request_id == "r1"
    assert [c.tool for c in first.tool_calls] == ["where"]
    (turn,) = chats.commits
    assert (turn.chat_key, turn.request_id, turn.text, turn.said) == (
        "api:chat:a",
        "r1",
        "hello",
        turn.output,
    )
    assert turn.base == [] and len(turn.new) == 4  # request, tool call, tool return, answer

    second = await run_turn(parts, TurnRequest("api:chat:a", "again", request_id="mine"))
    assert second.success and second.request_id == "mine"
    assert seen[2][: len(turn.new)] == turn.new  # the second turn's model saw the first turn
    assert chats.commits[1].base == turn.new
    assert chats.kept == []  # both committed: nothing to keep on the side


async def test_a_failed_turn_commits_nothing_and_keeps_what_was_sent(tmp_path: Path) -> None:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if isinstance(messages[-1].parts[-1], ToolReturnPart):
            raise RuntimeError("provider down")
        return ModelResponse(parts=[ToolCallPart("say", {"text": "working on it"})])

    chats = MemoryChats()
    result = await run_turn(_parts(tmp_path, FunctionModel(reply), chats), TurnRequest("api:chat:b", "go"))
    assert not result.success
    assert "the scripted model gave up (provider down)" in result.output  # the explain part's words
    assert chats.commits == [] and chats.histories == {}
    assert chats.kept == [("api:chat:b", result.request_id, ["working on it"])]


async def test_an_overflow_retries_on_a_compacted_history_and_commits_the_compaction(tmp_path: Path) -> None:
    chats = MemoryChats()
    seen: list[list[ModelMessage]] = []
    parts = _parts(tmp_path, _tool_then_answer(seen), chats)
    for n in range(3):
        assert (await run_turn(parts, TurnRequest("api:chat:c", f"turn {n}"))).success
    before = len(chats.histories["api:chat:c"])
    calls = 0

    def overflow_once(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ModelContextWindowExceededError(model_name="scripted", message="too long")
        return ModelResponse(parts=[TextPart(f"fits in {len(messages)}")])

    events: list[RunEvent] = []

    async def emit(event: RunEvent) -> None:
        events.append(event)

    result = await run_turn(
        _parts(tmp_path, FunctionModel(overflow_once), chats), TurnRequest("api:chat:c", "more"), emit=emit
    )
    assert result.success and calls == 2
    turn = chats.commits[-1]
    assert turn.base_compaction is not None and len(turn.base) < before  # ran on the compacted history
    assert any(isinstance(e, Compacted) for e in events)
    assert any(isinstance(e, TextDelta) for e in events) or result.output.startswith("fits in")
    assert not any(isinstance(e, Done) for e in events)  # Done is the stream's, not the turn's
