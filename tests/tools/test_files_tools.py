"""The context_* tools and the spill wrapper, driven by a scripted model through a real pydantic-ai run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from shipagent.chatkeys import ShipPaths
from shipagent.config import ShipConfig
from shipagent.tools.execution import ToolExecutionContext, use_tool_context
from shipagent.tools.files import ContextFiles, SpillToolset, context_toolset
from shipagent.window.tokens import count_tokens

KEY = "telegram:chat:42"
# ~300 KB, multi-byte everywhere. (Paging a file through a scripted run costs O(pages²) in the
# FunctionModel's token estimates; the 2 MB case runs once, end to end, in test_files_agent.py.)
BIG = "".join(f"{i:07d} 构建日志 🎉 step ok\n" for i in range(9_000))


def _ctx(root: Path, *, threshold: int = 16384, chat_key: str = KEY) -> ToolExecutionContext:
    config = ShipConfig.model_validate({"context": {"files": {"spillThresholdBytes": threshold}}})
    return ToolExecutionContext(
        chat_key=chat_key, request_id="req-1", project_root=root, config=config, paths=ShipPaths(root)
    )


Script = Callable[[list[ModelMessage], list[dict[str, Any]]], ModelResponse]


def _last_results(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    """The tool results of the latest request, as the model received them (JSON text parsed)."""
    parts = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
    out = []
    for part in parts:
        text = part.model_response_str()
        try:
            out.append(json.loads(text))
        except json.JSONDecodeError:
            out.append({"text": text})
    return out


async def _run(root: Path, script: Script, toolsets: list[Any], **ctx_args: Any) -> list[list[ModelMessage]]:
    """Run a scripted model; return every request the model received."""
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return script(messages, _last_results(messages))

    agent = Agent(FunctionModel(model), toolsets=toolsets)
    with use_tool_context(_ctx(root, **ctx_args)):
        await agent.run("go")
    return seen


def _call(name: str, **args: Any) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(name, args)])


def _done() -> ModelResponse:
    return ModelResponse(parts=[TextPart("done")])


@pytest.mark.anyio
async def test_context_read_pages_a_file_back_byte_exact(tmp_path: Path) -> None:
    ref = ContextFiles(ShipPaths(tmp_path)).add_artifact(KEY, BIG, name="log", source="test")
    pages: list[dict[str, Any]] = []

    def script(messages: list[ModelMessage], results: list[dict[str, Any]]) -> ModelResponse:
        if results:
            pages.append(results[0])
            if results[0]["done"]:
                return _done()
            return _call("context_read", id=ref.id, offset=results[0]["nextOffset"], limit=65536)
        return _call("context_read", id=ref.id, offset=0, limit=65536)

    await _run(tmp_path, script, [context_toolset()])
    assert "".join(p["content"] for p in pages).encode() == BIG.encode()
    assert all(p["success"] and p["limit"] == 65536 and p["totalBytes"] == len(BIG.encode()) for p in pages)
    # 64 KB of CJK and emoji is more than a quarter of the default 32000-token budget: each page
    # shrinks to fit (and says so) instead of being cut in the middle on its way to the model.
    assert len(pages) > -(-len(BIG.encode()) // 65536)
    assert all("to fit the token budget" in p["notes"][0] for p in pages[:-1])
    assert all(count_tokens(json.dumps({"content": p["content"]}, ensure_ascii=False)) <= 7744 for p in pages)


@pytest.mark.anyio
async def test_tools_clamp_out_of_range_values_and_say_which(tmp_path: Path) -> None:
    files = ContextFiles(ShipPaths(tmp_path))
    ref = files.add_artifact(KEY, "a\nb\nERROR c\n", name="log", source="test")
    calls = [
        _call("context_read", id=ref.id, offset=-5, limit=10**6),
        _call("context_tail", id=ref.id, lines=99999),
        _call("context_grep", id=ref.id, pattern="error", maxResults=0, contextLines=500),
        _call("context_list", limit=0),
    ]
    got: list[dict[str, Any]] = []

    def script(messages: list[ModelMessage], results: list[dict[str, Any]]) -> ModelResponse:
        got.extend(results)
        return calls.pop(0) if calls else _done()

    await _run(tmp_path, script, [context_toolset()])
    read, tail, grep, listing = got
    assert read["notes"] == [
        "offset=-5 is negative; clamped to 0 (use context_tail to read the end)",
        "limit=1000000 is above the maximum; clamped to 65536",
    ]
    assert (read["offset"], read["content"], read["done"]) == (0, "a\nb\nERROR c\n", True)
    assert tail["notes"] == ["lines=99999 is above the maximum; clamped to 2000"]
    assert (tail["lines"], tail["content"]) == (3, "a\nb\nERROR c\n")
    assert grep["notes"] == [
        "maxResults=0 is below the minimum; clamped to 1",
        "contextLines=500 is above the maximum; clamped to 20",
    ]
    assert grep["totalMatches"] == 1
    assert grep["matches"] == [{"line": 3, "content": "ERROR c", "before": ["a", "b"], "after": []}]
    assert listing["notes"] == ["limit=0 is below the minimum; clamped to 1"]
    assert [i["id"] for i in listing["items"]] == [ref.id]
    assert "path" not in listing["items"][0]


@pytest.mark.anyio
async def test_failures_come_back_as_data(tmp_path: Path) -> None:
    files = ContextFiles(ShipPaths(tmp_path))
    mine = files.add_artifact(KEY, "hello\n", name="mine", source="test")
    theirs = files.add_artifact("telegram:chat:7", "private\n", name="theirs", source="test")
    calls = [
        _call("context_grep", id=mine.id, pattern="(unclosed"),
        _call("context_read", id=theirs.id),
        _call("context_tail", id="nope"),
        _call("context_list", kind="secrets"),
    ]
    got: list[dict[str, Any]] = []

    def script(messages: list[ModelMessage], results: list[dict[str, Any]]) -> ModelResponse:
        got.extend(results)
        return calls.pop(0) if calls else _done()

    await _run(tmp_path, script, [context_toolset()])
    assert [g["success"] for g in got] == [False] * 4
    assert "invalid regular expression '(unclosed'" in got[0]["error"]
    assert (
        got[1]["error"]
        == f"context file {theirs.id!r} not found for this chat; context_list shows the ids it has"
    )
    assert "'nope' not found" in got[2]["error"]
    assert got[3]["error"] == "kind must be one of artifact, history, catalog; got 'secrets'"
    assert "private" not in json.dumps(got)


def _big_tools() -> FunctionToolset[Any]:
    def build_log() -> str:
        """Return the whole build log."""
        return BIG

    def run_tests() -> dict[str, Any]:
        """Run the tests."""
        return {"success": False, "exit_code": 1, "stdout": BIG, "stderr": "FAILED test_x 💥\n"}

    def small() -> str:
        """A small result."""
        return "tiny"

    return FunctionToolset([build_log, run_tests, small])


@pytest.mark.anyio
async def test_a_big_result_reaches_the_model_as_a_preview_and_reads_back_byte_exact(tmp_path: Path) -> None:
    steps: list[dict[str, Any]] = []
    collected: list[str] = []

    def script(messages: list[ModelMessage], results: list[dict[str, Any]]) -> ModelResponse:
        steps.append(results[0] if results else {})
        if len(steps) == 1:
            return _call("build_log")
        if len(steps) == 2:
            preview = results[0]["text"]
            ref_id = preview.split("id='")[1].split("'")[0]
            steps[-1]["ref"] = ref_id
            return _call("context_read", id=ref_id, offset=0, limit=65536)
        collected.append(results[0]["content"])
        if not results[0]["done"]:
            return _call("context_read", id=results[0]["id"], offset=results[0]["nextOffset"], limit=65536)
        return _done()

    requests = await _run(tmp_path, script, [SpillToolset(_big_tools()), SpillToolset(context_toolset())])
    preview = steps[1]["text"]
    # The request after the tool call holds the preview only: head, tail, id, size, hint.
    sent = [p.model_response_str() for p in requests[1][-1].parts if isinstance(p, ToolReturnPart)]
    assert sent == [preview] and len(preview.encode()) < 2600
    assert preview.startswith(
        f"[build_log output too large for the context window: {len(BIG.encode()):,} bytes"
    )
    assert "0000000 构建日志 🎉 step ok" in preview and "0008999 构建日志 🎉 step ok" in preview
    assert f"context_read(id={steps[1]['ref']!r}" in preview and "context_grep" in preview
    # Context tools' own 64 KB pages are not spilled again, and they page back every byte.
    assert "".join(collected).encode() == BIG.encode()
    files = ContextFiles(ShipPaths(tmp_path))
    (ref,) = files.list(KEY)
    assert (ref.kind, ref.source, ref.size_bytes) == ("artifact", "tool:build_log", len(BIG.encode()))


@pytest.mark.anyio
async def test_a_dict_result_keeps_its_shape_and_spills_only_the_big_field(tmp_path: Path) -> None:
    got: list[dict[str, Any]] = []

    def script(messages: list[ModelMessage], results: list[dict[str, Any]]) -> ModelResponse:
        got.extend(results)
        return _call("run_tests") if not got else _done()

    await _run(tmp_path, script, [SpillToolset(_big_tools())])
    (result,) = got
    assert (result["success"], result["exit_code"], result["stderr"]) == (False, 1, "FAILED test_x 💥\n")
    assert result["stdout"].startswith("[run_tests stdout too large")
    (ref,) = ContextFiles(ShipPaths(tmp_path)).list(KEY)
    # The field is kept as text with real newlines, so tail and grep work line by line.
    assert ContextFiles(ShipPaths(tmp_path)).tail(KEY, ref.id, 1).content == "0008999 构建日志 🎉 step ok\n"


@pytest.mark.anyio
async def test_small_results_and_results_outside_a_run_pass_through(tmp_path: Path) -> None:
    got: list[dict[str, Any]] = []

    def script(messages: list[ModelMessage], results: list[dict[str, Any]]) -> ModelResponse:
        got.extend(results)
        return _call("small") if not got else _done()

    await _run(tmp_path, script, [SpillToolset(_big_tools())], threshold=1024)
    assert got == [{"text": "tiny"}]
    assert not (tmp_path / ".ship").exists()
    # Without a shipagent run there is no chat to spill into: the result is passed on whole.
    agent = Agent(
        FunctionModel(lambda m, i: _call("build_log") if len(m) == 1 else _done()),
        toolsets=[SpillToolset(_big_tools())],
    )
    result = await agent.run("go")
    returned = [p for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    assert returned[0].content == BIG
