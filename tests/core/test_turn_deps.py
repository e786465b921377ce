"""A run's tools get their context from pydantic-ai's ``deps``; ambient state is the exception.

Each run hands pydantic-ai ``deps=TurnDeps(...)``: a tool taking ``ctx: RunContext[TurnDeps]``
reads the run there, the history tools read the stores the turn hooks chose, and only three
ContextVars remain — each where a library calls shipagent without any context to pass.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import RunContext
from pydantic_ai.toolsets import FunctionToolset

import shipagent
from shipagent.agent.turns import TurnHooks
from shipagent.tools._deps import FILE_STORES, TurnDeps, TurnStores
from shipagent.tools.execution import ToolExecutionContext, current_tool_context
from tests.support.tools import (
    Call,
    Script,
    index_of_user,
    make_agent,
    make_project,
    response_text,
    tool_results,
)

pytestmark = pytest.mark.anyio
KEY = "api:chat:deps"
PACKAGE = Path(shipagent.__file__).parent

ALLOWED = {
    # pydantic-ai calls a tool written without ctx with its arguments only
    ("tools/execution.py", "_current"): "pydantic-ai",
    ("agent/_retry.py", "_listener"): "pydantic-ai",  # Model.request gets no RunContext
    ("tools/mcp/_stdio.py", "_current"): "MCP SDK",  # spawns and decodes inside its own connection task
}
"""The ContextVars shipagent may have, and the library that calls it without a context."""


def _context_vars() -> dict[tuple[str, str], str | None]:
    """Every module-level ``NAME = ContextVar(...)`` in the package, with the docstring after it."""
    found: dict[tuple[str, str], str | None] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        body = tree.body
        for i, node in enumerate(body):
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if not isinstance(value, ast.Call):
                continue
            func = value.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name != "ContextVar":
                continue
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target  # type: ignore[union-attr]
            assert isinstance(target, ast.Name)
            after = body[i + 1] if i + 1 < len(body) else None
            doc = (
                after.value.value
                if isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
                else None
            )
            found[(path.relative_to(PACKAGE).as_posix(), target.id)] = doc
    return found


def test_at_most_three_context_vars_each_saying_why() -> None:
    found = _context_vars()
    assert set(found) == set(ALLOWED), "a new ContextVar: pass the value through RunContext.deps instead"
    assert len(found) <= 3
    for where, doc in found.items():  # its docstring names the library that calls without a context
        assert doc and ALLOWED[where] in doc and "context" in doc.lower(), (
            f"{where}: say who calls it, and why"
        )


def test_no_other_module_creates_a_context_var_indirectly() -> None:
    """``ContextVar`` is only named where one of the allowed variables is made."""
    holders = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "ContextVar" in path.read_text(encoding="utf-8")
    }
    assert holders == {file for file, _ in ALLOWED}


async def test_a_tool_with_ctx_gets_the_run_from_deps(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    seen: list[tuple[TurnDeps, ToolExecutionContext]] = []

    async def whoami(ctx: RunContext[TurnDeps]) -> str:
        """Say which chat this is."""
        seen.append((ctx.deps, current_tool_context()))
        return ctx.deps.chat_key

    script = Script([Call("whoami"), "ok"])
    agent = make_agent(root, script, toolsets=[FunctionToolset([whoami])])
    result = await agent.run(KEY, "hi", request_id="req-deps")
    assert result.success
    assert tool_results(script.requests[1], "whoami") == [KEY]
    ((deps, ambient),) = seen
    assert deps.tool is ambient  # one run, one context: ctx.deps and current_tool_context() agree
    assert deps.tool.request_id == "req-deps" and deps.stores is FILE_STORES


def injected_history_block(script: Script, user_text: str) -> str:
    """The assistant message the second request carries right before the user message."""
    request = script.requests[1]
    return response_text(request[index_of_user(request, user_text) - 1])


class _Transcript:
    """A transcript store in memory, standing in for the Postgres one a durable worker reads."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int, int]] = []

    async def last(self, chat_key: str, count: int, *, skip: int = 0) -> list[dict[str, Any]]:
        self.asked.append((chat_key, count, skip))
        lines = [
            {
                "v": 1,
                "ts": "2026-01-01T00:00:00Z",
                "chatKey": chat_key,
                "requestId": "r0",
                "role": "user",
                "text": "STORED-IN-THE-SHARED-STORE",
            },
        ]
        return lines[skip : skip + count]


class _SharedHooks(TurnHooks[Any]):
    def __init__(self, transcript: _Transcript) -> None:
        self.transcript = transcript

    def tool_stores(self, agent: Any) -> TurnStores:
        return TurnStores(transcript=self.transcript)


async def test_history_tools_read_the_stores_the_turn_hooks_chose(tmp_path: Path) -> None:
    """What a durable worker on Postgres does: the run's deps name the shared transcript."""
    root = make_project(tmp_path / "p")
    store = _Transcript()
    script = Script([Call("chat_load_history", {"count": 5}), "ok"])
    agent = make_agent(root, script)
    agent.turn_hooks = _SharedHooks(store)
    assert (await agent.run(KEY, "what did I say?")).success
    assert store.asked and store.asked[0][0] == KEY
    (result,) = tool_results(script.requests[1], "chat_load_history")
    assert result["success"] and result["inserted"] == 1 and result["picked"] == 1
    # the model's next request carries the store's line (the project has no transcript file to read)
    assert "STORED-IN-THE-SHARED-STORE" in injected_history_block(script, "what did I say?")


async def test_a_sub_agent_reads_the_stores_of_the_agent_that_delegated(tmp_path: Path) -> None:
    """A delegation in a durable worker on Postgres: the expert's history tools read the shared store."""
    root = make_project(tmp_path / "p", {"profiles": {"expert": {"instructions": "You are the expert."}}})
    store = _Transcript()
    expert = Script([Call("chat_load_history", {"count": 3}), "Use a B-tree."])
    boss = Script([Call("ask_expert", {"profile_name": "expert", "question": "Which index?"}), "done"])
    agent = make_agent(root, boss, profile_models={"expert": expert.model()})
    agent.turn_hooks = _SharedHooks(store)
    assert (await agent.run(KEY, "ask the expert")).success
    (result,) = tool_results(expert.requests[1], "chat_load_history")
    assert result["success"] and result["inserted"] == 1
    assert store.asked and store.asked[0][0] != KEY  # the expert's own chat, in the shared store
    assert "STORED-IN-THE-SHARED-STORE" in injected_history_block(expert, "Which index?")
