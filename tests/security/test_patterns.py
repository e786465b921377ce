"""A hostile model's regular expressions: linear time, off the event loop, unsupported ones named.

Every tool that takes a pattern is driven through ``ShipAgent.run`` by a scripted model calling it
with a catastrophic-backtracking pattern over lines built to trigger it. Python's ``re`` needs
half a minute or more per such line (each extra character doubles the time, and it holds the GIL); the
runtime's engines (RE2 in-process, ripgrep) need microseconds. The bound below is therefore
generous by orders of magnitude on both sides: it only fails when a backtracking engine is back.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent.agent._agent import ShipAgent
from shipagent.agent.turns import TurnHooks
from shipagent.chatkeys import ShipPaths
from shipagent.jsonl import append_lines
from shipagent.store import MemoryStores
from shipagent.store.files import _grep as grep_module
from shipagent.store.files._grep import find_ripgrep
from shipagent.tools import _chat as chat_module
from shipagent.tools._deps import RecordTail, TurnStores
from shipagent.tools.files import ContextFiles

pytestmark = pytest.mark.anyio

KEY_A = "api:chat:alice"
KEY_B = "api:chat:bob"
BOUND = 10.0
"""Seconds a hostile search may take end to end (a whole scripted turn): Python's re needs minutes."""

# Lines on which a backtracking engine explodes for the patterns below (none of them matches):
# for ``(a+)+$`` about 2**28 steps, half a minute or more of Python's re per line. Long enough to
# overrun BOUND many times over, short enough that a regression fails in minutes rather than hangs
# (a search already running in a worker thread cannot be cancelled, only waited for).
HOSTILE_LINES = ["a" * 28 + "!", "x" * 28 + "!"]
FILLER = [f"filler #{i}." for i in range(20)]

# (hostile pattern, the one planted line it matches)
HOSTILE = [
    ("(a+)+$", "aaaa"),
    ("(a|aa)+$", "banana"),
    ("(a*)*b$", "aaab"),
    ("^(([a-z])+.)+[A-Z]([a-z])+$", "ab-Cd"),
    ("(.*a){12}$", "a" * 12),
    ("(x+x+)+y", "xxxy"),
    (r"(\w+\s?)+$", "word word"),
]

# (pattern, the construct the error must name)
UNSUPPORTED = [
    ("(?<=baz)bar", "lookbehind"),
    ("(?<!baz)bar", "negative lookbehind"),
    ("foo(?=bar)", "lookahead"),
    ("foo(?!bar)", "negative lookahead"),
    (r"(ab)\1", "backreference"),
    ("(?P<w>ab)(?P=w)", "named backreference"),
    ("(?>ab)c", "atomic group"),
    (r"end\Z", r"\Z"),
]

ENTRY_POINTS = [
    "chat_load_history",
    "chat_load_history/store",
    pytest.param("context_grep/ripgrep", marks=pytest.mark.skipif(find_ripgrep() is None, reason="no rg")),
    "context_grep/re2",
]


# --- a scripted model that records what it got ----------------------------------------------------


def _user_text(messages: list[ModelMessage]) -> str:
    return next(
        str(p.content)
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart)
    )


def _returns(messages: list[ModelMessage], tool: str) -> list[Any]:
    out = []
    for m in messages:
        if isinstance(m, ModelRequest):
            for p in m.parts:
                if isinstance(p, ToolReturnPart) and p.tool_name == tool:
                    content = p.content
                    out.append(json.loads(content) if isinstance(content, str) else content)
    return out


def _call(tool: str, args: dict[str, Any]) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(tool, json.dumps(args), tool_call_id="call-1")])


class OneCall:
    """Calls ``tool`` with ``args`` once, then answers; keeps what the tool returned."""

    def __init__(self, tool: str, args: dict[str, Any]) -> None:
        self.tool, self.args = tool, args
        self.result: Any = None
        self.requests: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        returned = _returns(messages, self.tool)
        if not returned:
            return _call(self.tool, self.args)
        self.result = returned[0]
        return ModelResponse(parts=[TextPart("done")])


# --- projects -------------------------------------------------------------------------------------


def _project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "ship.json").write_text("{}", encoding="utf-8")
    return root


def _records(lines: list[str], key: str) -> list[dict[str, Any]]:
    return [
        {
            "v": 1,
            "ts": "2026-01-01T00:00:00Z",
            "chatKey": key,
            "requestId": f"r{i}",
            "role": "user" if i % 2 == 0 else "assistant",
            "text": line,
        }
        for i, line in enumerate(lines)
    ]


class _SharedTranscript(TurnHooks[Any]):
    """The history tools read the chat's transcript from a store, as a durable worker's do."""

    def __init__(self, transcript: RecordTail) -> None:
        self.transcript = transcript

    def tool_stores(self, agent: Any) -> TurnStores:
        return TurnStores(transcript=self.transcript)


@asynccontextmanager
async def _entry_point(
    entry: str, root: Path, lines: list[str], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[str, dict[str, Any], TurnHooks[Any]]]:
    """Put ``lines`` where ``entry`` searches (chat A); yield the tool, its non-pattern arguments
    and the turn hooks that make the agent read there."""
    if entry == "chat_load_history":
        append_lines(ShipPaths(root).transcript(KEY_A), _records(lines, KEY_A))
        yield "chat_load_history", {}, TurnHooks()
    elif entry == "chat_load_history/store":
        stores = MemoryStores()
        await stores.transcript.append_records(KEY_A, _records(lines, KEY_A))
        yield "chat_load_history", {}, _SharedTranscript(stores.transcript)
    else:
        if entry == "context_grep/re2":
            monkeypatch.setattr(grep_module, "find_ripgrep", lambda: None)
        ref = ContextFiles(ShipPaths(root)).add_artifact(
            KEY_A, "\n".join(lines) + "\n", name="log", source="test"
        )
        yield "context_grep", {"id": ref.id}, TurnHooks()


def _agent(root: Path, script: Any, hooks: TurnHooks[Any]) -> ShipAgent:
    agent = ShipAgent.from_project(root, model=FunctionModel(script))
    agent.turn_hooks = hooks
    return agent


def _pattern_args(tool: str, pattern: str) -> dict[str, Any]:
    return {"keyword": pattern} if tool == "chat_load_history" else {"pattern": pattern}


def _found_lines(tool: str, result: dict[str, Any], script: OneCall) -> list[str]:
    """The lines a successful search returned, whichever tool it was."""
    if tool == "context_grep":
        return [m["content"] for m in result["matches"]]
    if not result.get("picked"):
        return []
    injected = next(
        "".join(p.content for p in m.parts if isinstance(p, TextPart))
        for m in script.requests[-1]
        if isinstance(m, ModelResponse) and any("[Earlier conversation" in str(p) for p in m.parts)
    )
    return [line.split(": ", 1)[1] for line in injected.splitlines()[1:]]


# --- tests ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize(("pattern", "planted"), HOSTILE)
async def test_a_hostile_pattern_returns_promptly_with_the_right_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str, pattern: str, planted: str
) -> None:
    root = _project(tmp_path / "p")
    lines = [*FILLER[:10], *HOSTILE_LINES, planted, *FILLER[10:]]
    async with _entry_point(entry, root, lines, monkeypatch) as (tool, args, hooks):
        script = OneCall(tool, {**args, **_pattern_args(tool, pattern)})
        agent = _agent(root, script, hooks)
        with anyio.fail_after(BOUND):
            result = await agent.run(KEY_A, "find it")
    assert result.success, result.output
    assert script.result["success"] is True, script.result
    assert _found_lines(tool, script.result, script) == [planted]


@pytest.mark.parametrize("store", [False, True], ids=["transcript-file", "transcript-store"])
async def test_another_chat_completes_its_turn_while_the_hostile_search_runs(
    tmp_path: Path, store: bool
) -> None:
    """Chat B's turn is open (its model waits) while chat A's hostile search runs and returns.

    B's model answers only once A's model has seen its tool result, so both turns completing,
    in this order, shows the search ran and finished while another chat's turn was in progress.
    """
    root = _project(tmp_path / "p")
    lines = [*HOSTILE_LINES, "aaaa", *FILLER]
    stores = MemoryStores()
    if store:
        await stores.transcript.append_records(KEY_A, _records(lines, KEY_A))
    else:
        append_lines(ShipPaths(root).transcript(KEY_A), _records(lines, KEY_A))
    order: list[str] = []
    b_started, a_searched = anyio.Event(), anyio.Event()
    results: dict[str, Any] = {}

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if _user_text(messages) == "search please":  # chat A
            returned = _returns(messages, "chat_load_history")
            if not returned:
                await b_started.wait()
                return _call("chat_load_history", {"keyword": "(a+)+$"})
            results["a"] = returned[0]
            order.append("a searched")
            a_searched.set()
            return ModelResponse(parts=[TextPart("found it")])
        order.append("b started")  # chat B
        b_started.set()
        await a_searched.wait()
        order.append("b answers")
        return ModelResponse(parts=[TextPart("hello bob")])

    agent = ShipAgent.from_project(root, model=FunctionModel(model))
    if store:
        agent.turn_hooks = _SharedTranscript(stores.transcript)

    async def turn(key: str, text: str) -> None:
        results[key] = await agent.run(key, text)

    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            tg.start_soon(turn, KEY_B, "hi")
            tg.start_soon(turn, KEY_A, "search please")
    assert order == ["b started", "a searched", "b answers"]
    assert results[KEY_A].success and results[KEY_B].success
    assert results[KEY_B].output == "hello bob"
    assert results["a"]["success"] is True and results["a"]["picked"] == 1


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize(("pattern", "construct"), UNSUPPORTED)
async def test_an_unsupported_construct_is_refused_by_name_with_a_literal_suggested(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str, pattern: str, construct: str
) -> None:
    root = _project(tmp_path / "p")
    async with _entry_point(entry, root, ["foobar", "bazbar", "abab", "abc", "the end"], monkeypatch) as (
        tool,
        args,
        hooks,
    ):
        script = OneCall(tool, {**args, **_pattern_args(tool, pattern)})
        result = await _agent(root, script, hooks).run(KEY_A, "find it")
    assert result.success
    assert script.result["success"] is False
    error = script.result["error"]
    assert construct in error and repr(pattern) in error, error
    assert "RE2" in error and "literal" in error, error


@pytest.mark.parametrize("entry", ["context_grep/re2"])
async def test_a_possessive_quantifier_is_refused_by_context_grep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str
) -> None:
    root = _project(tmp_path / "p")
    async with _entry_point(entry, root, ["aab"], monkeypatch) as (tool, args, hooks):
        script = OneCall(tool, {**args, "pattern": "a++b"})
        await _agent(root, script, hooks).run(KEY_A, "find it")
    assert script.result["success"] is False
    assert "possessive quantifier" in script.result["error"]


async def test_a_keyword_that_is_no_regex_is_matched_literally(tmp_path: Path) -> None:
    """``C++`` (a possessive quantifier to a backtracking engine) is what a user typed: a substring."""
    root = _project(tmp_path / "p")
    append_lines(ShipPaths(root).transcript(KEY_A), _records(["we use C++ here", "and Rust there"], KEY_A))
    script = OneCall("chat_load_history", {"keyword": "c++"})
    await ShipAgent.from_project(root, model=FunctionModel(script)).run(KEY_A, "find it")
    assert script.result["success"] is True and script.result["picked"] == 1
    assert _found_lines("chat_load_history", script.result, script) == ["we use C++ here"]


async def test_context_grep_refuses_an_overlong_pattern(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    ref = ContextFiles(ShipPaths(root)).add_artifact(KEY_A, "abc\n", name="log", source="test")
    script = OneCall("context_grep", {"id": ref.id, "pattern": "a" * 5000})
    await ShipAgent.from_project(root, model=FunctionModel(script)).run(KEY_A, "find it")
    assert script.result["success"] is False
    assert "5000 characters" in script.result["error"]


async def test_a_keyword_search_reads_a_bounded_amount_and_says_where_it_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _project(tmp_path / "p")
    old = ["needle in the oldest message", *[f"message number {i:04d}" for i in range(200)]]
    append_lines(ShipPaths(root).transcript(KEY_A), _records(old, KEY_A))
    monkeypatch.setattr(chat_module, "SEARCH_MAX_CHARS", 100 * len("message number 0000"))
    script = OneCall("chat_load_history", {"keyword": "needle"})
    await ShipAgent.from_project(root, model=FunctionModel(script)).run(KEY_A, "find it")
    assert script.result["success"] is True and script.result["picked"] == 0
    assert "stopped after the newest 100 messages" in script.result["note"]
