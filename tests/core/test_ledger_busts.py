"""Cache busts in the ledger: a request that does not start with the chat's previous one is found,
attributed to the section that changed and why, and counted by ``shipagent inspect --stats``; the
provider's cached tokens reach the records and the stats."""

from __future__ import annotations

import json
import shutil
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import RunContext, Tool, models
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import FunctionToolset
from typer.testing import CliRunner

from shipagent import ShipAgent, current_tool_context
from shipagent.agent.ledger import RequestRecord
from shipagent.agent.ledger._inspect import ledger_stats
from shipagent.hosts.cli import _app as cli
from tests.support.core import has_tool_return, last_user_text
from tests.support.paths import FIXTURES

pytestmark = pytest.mark.anyio
KEY = "web:user:busts"
runner = CliRunner()
COMPACTING = {"context": {"chatHistory": {"inMemoryMaxMessages": 8, "compactKeepLastMessages": 3}}}


def _stats(root: Path, key: str = KEY) -> dict[str, Any]:
    shown = runner.invoke(cli.app, ["inspect", key, "-C", str(root), "--stats", "--json"])
    assert shown.exit_code == 0, shown.output
    stats: dict[str, Any] = json.loads(shown.output)
    return stats


def _project(root: Path, ship: dict[str, Any] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "ship.json").write_text(json.dumps(ship or {}), encoding="utf-8")
    return root


def _call(name: str, args: dict[str, Any]) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"call-{uuid.uuid4().hex[:8]}")])


def _answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart(f"noted: {last_user_text(messages)}")])


# -- a tool definition that changes mid-chat --------------------------------------------------------


async def test_a_tool_description_that_changes_mid_chat_is_a_tools_bust_and_counted(tmp_path: Path) -> None:
    version = {"n": 1}

    async def describe(ctx: RunContext[Any], tool: ToolDefinition) -> ToolDefinition:
        return replace(tool, description=f"Look a word up (catalogue v{version['n']}).")

    def lookup(word: str) -> str:
        return f"{word}: found"

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if last_user_text(messages).startswith("look") and not has_tool_return(messages):
            return _call("lookup", {"word": "x"})
        return _answer(messages, info)

    root = _project(tmp_path / "p")
    agent = ShipAgent.from_project(
        root,
        model=FunctionModel(model),
        toolsets=[FunctionToolset([Tool(lookup, prepare=describe)])],
    )
    for text in ("hello", "look it up", "thanks"):
        assert (await agent.run(KEY, text)).success
    version["n"] = 2  # what an MCP server relisting its tools with new descriptions does
    for text in ("and now", "look again", "bye"):
        assert (await agent.run(KEY, text)).success

    records = agent.ledger(KEY)
    busts = [(n, r.bust) for n, r in enumerate(records) if r.bust]
    changed_at = next(n for n, r in enumerate(records) if r.tools_hash != records[0].tools_hash)
    assert busts == [(changed_at, {"section": "tools", "reason": "changed"})]
    assert records[changed_at].instructions_hash == records[0].instructions_hash
    assert records[changed_at].config_hash == records[0].config_hash != ""
    assert len({r.tools_hash for r in records}) == 2 and len({r.prefix_hash for r in records}) == 2

    stats = _stats(root)
    assert stats["busts"] == {"total": 1, "byReason": {"changed": 1}, "bySection": {"tools": 1}}
    assert stats["requests"] == len(records) and stats["distinctPrefixes"] == 2
    table = runner.invoke(cli.app, ["inspect", KEY, "-C", str(root), "--stats"]).output
    assert "busts, reason: changed" in table and "busts, section: tools" in table
    shown = runner.invoke(cli.app, ["inspect", KEY, "-C", str(root), "--request", records[changed_at].id])
    assert shown.exit_code == 0 and "cache bust: tools (changed)" in shown.output
    diff = runner.invoke(
        cli.app, ["inspect", KEY, "-C", str(root), "--request", records[changed_at].id, "--diff", "--json"]
    )
    assert json.loads(diff.output)["bust"] == {"section": "tools", "reason": "changed"}
    plain = runner.invoke(cli.app, ["inspect", KEY, "-C", str(root), "--request", records[-1].id])
    assert "cache bust: none" in plain.output
    as_json = runner.invoke(
        cli.app, ["inspect", KEY, "-C", str(root), "--request", records[changed_at].id, "--json"]
    )
    assert json.loads(as_json.output)["bust"] == {"section": "tools", "reason": "changed"}


async def test_a_restart_appends_a_config_change_is_config_and_an_agent_md_edit_is_changed(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path / "p", {"name": "desk"})
    (root / "Agent.md").write_text("You keep notes.", encoding="utf-8")

    async def turns(*texts: str) -> list[RequestRecord]:
        agent = ShipAgent.from_project(root, model=FunctionModel(_answer))  # a new process, each time
        for text in texts:
            assert (await agent.run(KEY, text)).success
        return agent.ledger(KEY)

    first = await turns("one", "two")
    # restarted, nothing changed: compared with the last record on disk, the request only appended
    again = await turns("three")
    assert [r.bust for r in again] == [None] * len(again)
    assert again[-1].config_hash == first[-1].config_hash
    # ship.json gains a tool module: the tools changed with the configuration
    module = f"bust_tools_{uuid.uuid4().hex[:8]}"
    (root / f"{module}.py").write_text(
        "from pydantic_ai.toolsets import FunctionToolset\n\n"
        "def weather(city: str) -> str:\n"
        '    """The weather in a city."""\n'
        '    return "sunny"\n\n'
        "toolset = FunctionToolset([weather])\n",
        encoding="utf-8",
    )
    (root / "ship.json").write_text(
        json.dumps({"name": "desk", "tools": {"modules": [module]}}), encoding="utf-8"
    )
    configured = (await turns("four"))[-1]
    assert configured.bust == {"section": "tools", "reason": "config"}
    assert configured.config_hash != again[-1].config_hash
    # Agent.md is read per request, not part of ship.json: an edit mid-chat is an unexplained change
    (root / "Agent.md").write_text("You keep notes. Be brief.", encoding="utf-8")
    records = await turns("five", "six")
    assert [r.bust for r in records[-2:]] == [{"section": "instructions", "reason": "changed"}, None]
    assert _stats(root)["busts"] == {
        "total": 2,
        "byReason": {"changed": 1, "config": 1},
        "bySection": {"instructions": 1, "tools": 1},
    }


# -- the prefix between compactions ------------------------------------------------------------------


def _sent(messages: list[ModelMessage]) -> list[Any]:
    """What a request sent, comparable message by message."""
    return list(ModelMessagesTypeAdapter.dump_python(messages, mode="json"))


async def test_the_prefix_is_byte_stable_between_compactions_and_each_compaction_is_one_bust(
    tmp_path: Path,
) -> None:
    received: list[list[Any]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        received.append(_sent(messages))
        return _answer(messages, info)

    root = _project(tmp_path / "p", COMPACTING)
    agent = ShipAgent.from_project(root, model=FunctionModel(model))
    for n in range(20):
        assert (await agent.run(KEY, f"note {n}: the {n}th fact")).success
    records = agent.ledger(KEY)
    assert len(records) == len(received) == 20

    compactions = [
        n
        for n, r in enumerate(records)
        if n and r.items[0].section == "summary" and r.items[0].source != records[n - 1].items[0].source
    ]
    assert len(compactions) >= 3  # the marks fold the history several times in 20 turns
    # the instructions and tools never change: a compaction rewrites only what follows them
    assert {r.prefix_hash for r in records} == {records[0].prefix_hash}
    assert len({(r.tools_hash, r.instructions_hash) for r in records}) == 1
    for n, record in enumerate(records[1:], 1):
        if n in compactions:
            assert record.bust == {"section": "summary", "reason": "compaction"}, n
            assert received[n][: len(received[n - 1])] != received[n - 1], n  # really not appended
        else:
            assert record.bust is None, (n, record.bust)
            # and what the ledger calls appending is what the model was sent: the previous
            # request, message for message, then more
            before = received[n - 1]
            assert received[n][: len(before)] == before, n
    stats = _stats(root)
    assert stats["busts"] == {
        "total": len(compactions),
        "byReason": {"compaction": len(compactions)},
        "bySection": {"summary": len(compactions)},
    }


# -- a provider's cached tokens ----------------------------------------------------------------------


def _tokens(block: Any) -> int:
    """The server's own token count of a request block (a message, the tool list): ~4 bytes each."""
    return len(json.dumps(block, sort_keys=True)) // 4 + 1


class PrefixCacheServer:
    """Chat Completions on 127.0.0.1 with a longest-prefix cache, as llama-server's slot keeps one.

    A request is its blocks in order (the tool list, then each message); the blocks it shares, from
    the first on, with the previous request are served from the cache and reported as
    ``usage.prompt_tokens_details.cached_tokens``. Each reply is recorded as ``(prompt, cached)``.
    """

    def __init__(self) -> None:
        self.reported: list[tuple[int, int]] = []
        self._previous: list[Any] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                raw = json.dumps(owner.reply(body)).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        blocks = [body.get("tools") or [], *body["messages"]]
        common = 0
        while common < min(len(blocks), len(self._previous)) and blocks[common] == self._previous[common]:
            common += 1
        self._previous = blocks
        prompt, cached = sum(map(_tokens, blocks)), sum(map(_tokens, blocks[:common]))
        self.reported.append((prompt, cached))
        last = body["messages"][-1]
        text = last["content"] if isinstance(last.get("content"), str) else "?"
        return {
            "id": f"chatcmpl-{len(self.reported)}",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"noted: {text[:40]}"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": 5,
                "total_tokens": prompt + 5,
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }

    @contextmanager
    def running(self) -> Iterator[PrefixCacheServer]:
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
            thread.join()


async def test_cached_tokens_a_real_openai_client_reports_reach_the_ledger_and_the_stats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(models, "ALLOW_MODEL_REQUESTS", True)  # to 127.0.0.1 only
    root = _project(tmp_path / "p", COMPACTING)
    with PrefixCacheServer().running() as server:
        model = OpenAIChatModel("local-model", provider=OpenAIProvider(base_url=server.url, api_key="none"))
        agent = ShipAgent.from_project(root, model=model)
        for n in range(12):
            assert (await agent.run(KEY, f"note {n}: the {n}th fact")).success
    records = agent.ledger(KEY)
    assert len(records) == len(server.reported) == 12
    assert [(r.input_tokens, r.cached_tokens) for r in records] == server.reported

    # the provider's cache agrees with the ledger: a request that only appended was served all of
    # the previous one from the cache; a bust (here: each compaction) was not
    busts = [n for n, r in enumerate(records) if r.bust]
    assert busts and all(records[n].bust == {"section": "summary", "reason": "compaction"} for n in busts)
    for n in range(1, len(records)):
        (previous, _), (_, cached) = server.reported[n - 1], server.reported[n]
        assert (cached < previous) if n in busts else (cached == previous), n

    prompt = sum(p for p, _ in server.reported)
    cached = sum(c for _, c in server.reported)
    stats = _stats(root)
    assert (stats["inputTokens"], stats["cachedTokens"]) == (prompt, cached)
    assert stats["providerReported"] == 12 and stats["cachedTokenShare"] == round(cached / prompt, 4)
    assert 0 < stats["cachedTokenShare"] < 1
    table = runner.invoke(cli.app, ["inspect", KEY, "-C", str(root), "--stats"]).output
    assert f"{cached:,}" in table and f"{prompt:,}" in table


# -- ledgers written before busts were kept ---------------------------------------------------------


async def test_ledger_lines_written_before_busts_still_read_and_new_turns_compare_with_them(
    tmp_path: Path,
) -> None:
    fixture = FIXTURES / "ledger_v2"  # version-2 lines, layout 1: no hashes, no bust, no configHash
    shutil.copytree(fixture / "ship", tmp_path / ".ship")
    shutil.copy(fixture / "ship.json", tmp_path / "ship.json")
    key = "web:user:old"
    expected = json.loads((fixture / "expected.json").read_text(encoding="utf-8"))
    agent = ShipAgent.from_project(tmp_path, model=FunctionModel(_answer))
    old = agent.ledger(key)
    assert [r.to_json() for r in old] == expected  # read back exactly as written, nothing added
    assert all(r.bust is None and not (r.tools_hash or r.instructions_hash or r.config_hash) for r in old)
    stats = ledger_stats(old)
    assert stats["busts"] == {"total": 0, "byReason": {}, "bySection": {}}
    assert stats["inputTokens"] == sum(r.input_tokens or 0 for r in old) > 0  # usage was kept then too
    shown = runner.invoke(cli.app, ["inspect", key, "-C", str(tmp_path), "--request", old[-1].id])
    assert shown.exit_code == 0 and "cache bust: not recorded" in shown.output

    assert (await agent.run(key, "after the upgrade")).success
    first_new = agent.ledger(key)[len(old)]
    assert first_new.tools_hash and first_new.config_hash
    # compared with the old record: no hashes there to compare, but the summary moved (layout 2)
    assert first_new.bust == {"section": "summary", "reason": "changed"}
    assert _stats(tmp_path, key)["busts"]["total"] == 1


async def test_a_history_budget_that_drops_old_messages_is_a_history_bust_each_time_it_drops_more(
    tmp_path: Path,
) -> None:
    def wordy(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(f"noted {last_user_text(messages)}" + " ok" * 30)])

    # a history budget far below the compaction marks: the plan drops the oldest messages instead
    bounds = {"maxHistoryTokens": 300, "compactAtTokens": 100_000, "inMemoryMaxMessages": 200}
    root = _project(tmp_path / "p", {"context": {"chatHistory": bounds}})
    agent = ShipAgent.from_project(root, model=FunctionModel(wordy))
    for n in range(8):
        assert (await agent.run(KEY, f"note {n} " + "word " * 20)).success
    records = agent.ledger(KEY)
    dropped = [sum(1 for i in r.items if i.edit == "dropped") for r in records]
    assert dropped[0] == 0 and dropped[-1] > 0  # the budget started dropping the oldest messages
    for n in range(1, len(records)):
        # a request that drops more than the one before does not start with it: nothing cached
        want = {"section": "history", "reason": "changed"} if dropped[n] > dropped[n - 1] else None
        assert records[n].bust == want, (n, dropped)
    assert _stats(root)["busts"]["bySection"] == {"history": sum(1 for r in records if r.bust)}


async def test_an_injection_is_a_bust_where_it_lands_and_again_on_the_turn_after_when_it_is_gone(
    tmp_path: Path,
) -> None:
    def load_rules() -> str:
        """Injects the house rules for this run."""
        current_tool_context().inject_system_message_once("RULES: cite sources.", fingerprint="rules")
        return "rules loaded"

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if last_user_text(messages).startswith("rules") and not has_tool_return(messages):
            return _call("load_rules", {})
        return _answer(messages, info)

    root = _project(tmp_path / "p")
    agent = ShipAgent.from_project(root, model=FunctionModel(model), toolsets=[FunctionToolset([load_rules])])
    for text in ("hello", "rules please", "after", "later"):
        assert (await agent.run(KEY, text)).success
    records = agent.ledger(KEY)
    injected = [any(i.section == "injections" for i in r.items) for r in records]
    assert injected == [False, False, True, False, False]  # the rules turn's second request
    assert [r.bust for r in records] == [
        None,
        None,
        {"section": "injections", "reason": "changed"},  # sent ahead of the history already sent
        {"section": "injections", "reason": "changed"},  # an injection lives for one run
        None,
    ]
