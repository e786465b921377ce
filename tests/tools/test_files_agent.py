"""Context files end to end through ShipAgent.run: spill, paging back, compaction history, catalog, CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset
from typer.testing import CliRunner

from shipagent import ShipAgent
from shipagent.hosts.cli import _app as cli

KEY = "telegram:chat:42"
BIG = "".join(f"{i:07d} 构建日志 🎉 step ok\n" for i in range(70_000))[: 2 * 1024 * 1024 - 3] + "END"


def _results(messages: list[ModelMessage]) -> list[Any]:
    out: list[Any] = []
    for part in messages[-1].parts:
        if isinstance(part, ToolReturnPart):
            text = part.model_response_str()
            try:
                out.append(json.loads(text))
            except json.JSONDecodeError:
                out.append(text)
    return out


def _call(name: str, **args: Any) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(name, args)])


def _say(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)])


def _project(root: Path, ship: dict[str, Any] | None = None) -> Path:
    (root / "ship.json").write_text(json.dumps(ship or {}), encoding="utf-8")
    return root


@pytest.mark.anyio
async def test_a_2mb_tool_result_is_spilled_and_paged_back_byte_exact(tmp_path: Path) -> None:
    """The request after the tool call holds only the preview; context_read pages back every byte."""
    assert len(BIG.encode()) > 2 * 1024 * 1024
    requests: list[list[ModelMessage]] = []
    pages: list[dict[str, Any]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        requests.append(list(messages))
        results = _results(messages)
        if len(requests) == 1:
            return _call("build_log")
        if len(requests) == 2:
            ref_id = results[0].split("id='")[1].split("'")[0]
            return _call("context_read", id=ref_id, offset=0, limit=65536)
        pages.append(results[0])
        if not results[0]["done"]:
            return _call("context_read", id=results[0]["id"], offset=results[0]["nextOffset"], limit=65536)
        return _say("read it all")

    def build_log() -> str:
        """The whole build log."""
        return BIG

    # Reading all 2 MB back inside ONE run needs a request budget that holds every page of the
    # run; with the default budget the pages shrink to fit (next test) and a model reads on in
    # later turns.
    ship = {"context": {"chatHistory": {"maxHistoryTokens": 4_000_000}}}
    agent = ShipAgent.from_project(
        _project(tmp_path, ship), model=FunctionModel(model), toolsets=[FunctionToolset([build_log])]
    )
    async with agent:
        result = await agent.run(KEY, "show me the build log")
    assert result.success, result.output

    [preview] = [p.model_response_str() for p in requests[1][-1].parts if isinstance(p, ToolReturnPart)]
    assert preview.startswith(
        f"[build_log output too large for the context window: {len(BIG.encode()):,} bytes"
    )
    assert len(preview.encode()) < 2600
    assert "0000000 构建日志 🎉 step ok" in preview and preview.split("\n")[-2].endswith("END")
    # No part of any request the model received ever held the 2 MB (pages are ≤ 64 KB each).
    sizes = [
        len(p.model_response_str().encode())
        for r in requests
        for m in r
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]
    assert max(sizes) < 70_000

    assert "".join(p["content"] for p in pages).encode() == BIG.encode()
    [ref] = agent.context_files.list(KEY, kind="artifact")
    assert (ref.kind, ref.source, ref.size_bytes) == ("artifact", "tool:build_log", len(BIG.encode()))
    # The persisted history keeps the preview as build_log's result (the file holds the bytes).
    records = [
        json.loads(line)
        for line in (tmp_path / ".ship" / "chats" / "telegram%3Achat%3A42" / "messages.jsonl").open()
    ]
    stored = {
        part["content"]
        for record in records
        for m in record.get("messages") or record.get("history") or []
        for part in m["parts"]
        if part["part_kind"] == "tool-return" and part["tool_name"] == "build_log"
    }
    assert stored == {preview}


@pytest.mark.anyio
async def test_with_the_default_budget_a_big_page_shrinks_instead_of_being_cut(tmp_path: Path) -> None:
    received: list[Any] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        results = _results(messages)
        if not results:
            return _call("context_read", id=ref.id, offset=0, limit=65536)
        received.append(results[0])
        return _say("ok")

    agent = ShipAgent.from_project(_project(tmp_path), model=FunctionModel(model))
    ref = agent.context_files.add_artifact(KEY, BIG[:300_000], name="log", source="test")
    async with agent:
        assert (await agent.run(KEY, "read it")).success
    [page] = received  # parsed as JSON: the request budget did not cut it
    assert page["notes"] == [
        f"page shortened to {page['nextOffset']} bytes to fit the token budget "
        "(context.chatHistory.maxHistoryTokens / 4); continue from nextOffset"
    ]
    assert 10_000 < page["nextOffset"] < 65536
    assert page["content"].encode() == BIG.encode()[: page["nextOffset"]]


@pytest.mark.anyio
async def test_compaction_writes_a_history_file_that_context_grep_finds(tmp_path: Path) -> None:
    ship = {"context": {"chatHistory": {"inMemoryMaxMessages": 4, "compactKeepLastMessages": 2}}}
    found: list[dict[str, Any]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        results = _results(messages)
        user = str(messages[-1].parts[-1].content) if not results else ""  # type: ignore[union-attr]
        if user == "what was the deploy code?":
            return _call("context_list", kind="history")
        if results and "items" in results[0]:
            return _call(
                "context_grep", id=results[0]["items"][-1]["id"], pattern="deploy code is", contextLines=1
            )
        if results:
            found.append(results[0])
            return _say(results[0]["matches"][0]["content"])
        return _say("the deploy code is PURPLE-42" if user == "remember this" else f"ok: {user}")

    agent = ShipAgent.from_project(_project(tmp_path, ship), model=FunctionModel(model))
    async with agent:
        for text in ("remember this", "one", "two", "three"):
            assert (await agent.run(KEY, text)).success
        histories = agent.context_files.list(KEY, kind="history")
        assert histories, "compaction kept what it removed as a history file"
        assert all(m.parts for m in agent.history(KEY))
        result = await agent.run(KEY, "what was the deploy code?")
    assert result.success, result.output
    [grep] = found
    assert grep["success"] and grep["totalMatches"] == 1
    [match] = grep["matches"]
    assert match["content"] == "the deploy code is PURPLE-42"
    assert match["before"] == ["## assistant · " + match["before"][0].split(" · ")[1]]
    text = agent.context_files.read(KEY, histories[-1].id, 0, 65536).content
    assert "## user · " in text and "remember this" in text
    assert result.output == "the deploy code is PURPLE-42"


@pytest.mark.anyio
async def test_the_catalog_file_lists_the_skills_and_tools_of_the_run(tmp_path: Path) -> None:
    skill = tmp_path / "skills" / "deploy" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: deploy\ndescription: Ship a release to production.\n---\n\nSteps.\n")
    agent = ShipAgent.from_project(_project(tmp_path), model=FunctionModel(lambda m, i: _say("hi")))
    async with agent:
        assert (await agent.run(KEY, "hello")).success
    catalog = agent.context_files.read(KEY, "catalog", 0, 65536).content
    assert "## Skills\n- deploy: Ship a release to production.\n" in catalog
    for tool in ("context_grep", "context_read", "exec_shell", "skills_load"):
        assert f"\n- {tool}: " in catalog
    [ref] = agent.context_files.list(KEY, kind="catalog")
    assert ref.source == "catalog"
    index = agent.context_files.folder(KEY) / "index.jsonl"
    async with agent:
        assert (await agent.run(KEY, "again")).success
    assert index.read_text("utf-8").count("\n") == 1  # unchanged tools: not rewritten

    def deploy_now() -> str:
        """Deploy the current build."""
        return "deployed"

    more = ShipAgent.from_project(
        tmp_path, model=FunctionModel(lambda m, i: _say("hi")), toolsets=[FunctionToolset([deploy_now])]
    )
    async with more:
        assert (await more.run(KEY, "hello")).success
    assert "\n- deploy_now: Deploy the current build.\n" in more.context_files.read(KEY, "catalog").content
    assert index.read_text("utf-8").count("\n") == 2  # the tools changed: regenerated


runner = CliRunner()


def test_cli_lists_exports_and_imports_a_chats_context_files(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old, new = _project(tmp_path / "old"), _project(tmp_path / "new")
    files = ShipAgent.from_project(old).context_files  # no model, never started
    ref = files.add_artifact(KEY, "日志 🎉\nline two\n", name="stdout of make", source="tool:exec_shell")

    listed = runner.invoke(cli.app, ["context", "list", KEY, "-C", str(old), "--json"])
    assert listed.exit_code == 0, listed.output
    assert [r["id"] for r in json.loads(listed.output)] == [ref.id]

    out = tmp_path / "export.json"
    exported = runner.invoke(cli.app, ["context", "export", KEY, "-o", str(out), "-C", str(old)])
    assert exported.exit_code == 0, exported.output
    imported = runner.invoke(cli.app, ["context", "import", "api:chat:bob", str(out), "-C", str(new)])
    assert imported.exit_code == 0, imported.output
    assert "imported 1 context files into api:chat:bob" in imported.output
    copy = ShipAgent.from_project(new).context_files
    assert copy.path_of("api:chat:bob", ref).read_bytes() == files.path_of(KEY, ref).read_bytes()

    hostile = json.loads(out.read_text("utf-8"))
    hostile["files"]["../../../escaped.txt"] = "pwned"
    out.write_text(json.dumps(hostile), encoding="utf-8")
    refused = runner.invoke(cli.app, ["context", "import", "api:chat:eve", str(out), "-C", str(new)])
    assert refused.exit_code == 2
    assert "would land outside" in refused.output or "contains '..'" in refused.output
    assert not (tmp_path / "escaped.txt").exists() and copy.list("api:chat:eve") == []
