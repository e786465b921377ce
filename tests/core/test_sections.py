"""Sectioned budgets: evict before mangling, each section by its own policy."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

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
from pydantic_ai.toolsets import FunctionToolset

from shipagent import ShipAgent, current_tool_context
from shipagent.window.budget import Budget, plan_request, render_prior
from shipagent.window.compaction import summary_message
from shipagent.window.placement import build_items
from shipagent.window.sections import message_tokens, render_item
from tests.support.core import render

pytestmark = pytest.mark.anyio
KEY = "telegram:chat:7"
# ~1 MB of multi-byte text: CJK, emoji and ASCII on every line
ONE_MB = "".join(f"{i:06d} 日志条目 🎯 naïve café — ok\n" for i in range(40_000))[:680_000]


def _project(root: Path, ship: dict[str, Any] | None = None) -> Path:
    (root / "ship.json").write_text(json.dumps(ship or {}), encoding="utf-8")
    return root


def _returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [
        p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)
    ]


async def test_paging_a_1mb_multibyte_file_in_one_run_gets_every_page_whole(tmp_path: Path) -> None:
    """The §1 defect: from about the 8th page on, every result (the newest too) used to be cut."""
    requests: list[list[ModelMessage]] = []
    pages: list[dict[str, Any]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        requests.append(list(messages))
        if len(requests) == 1:
            return ModelResponse(
                parts=[ToolCallPart("context_read", {"id": ref.id, "offset": 0, "limit": 65536})]
            )
        newest = _returns(messages)[-1]
        page = json.loads(newest.model_response_str())  # must be valid JSON, never a head+tail cut
        pages.append(page)
        if page["done"]:
            return ModelResponse(parts=[TextPart("read it all")])
        args = {"id": ref.id, "offset": page["nextOffset"], "limit": 65536}
        return ModelResponse(parts=[ToolCallPart("context_read", args, tool_call_id=f"p{len(pages)}")])

    # 64k tokens: pages of ~16k tokens (a quarter), so the file takes ~20 requests (pydantic-ai's
    # default limit is 50 per run) and the budget holds only three pages at once.
    ship = {"context": {"chatHistory": {"maxHistoryTokens": 64000}}}
    agent = ShipAgent.from_project(_project(tmp_path, ship), model=FunctionModel(model))
    assert 1_000_000 < len(ONE_MB.encode()) < 1_100_000
    ref = agent.context_files.add_artifact(KEY, ONE_MB, name="big log", source="test")
    result = await agent.run(KEY, "read the whole log")
    assert result.success, result.output
    assert len(pages) > 12  # many pages: far more than the budget holds at once
    assert "".join(p["content"] for p in pages).encode() == ONE_MB.encode()
    assert all(p["success"] for p in pages)
    for request in requests[1:]:
        returns = _returns(request)
        # every older page is either whole JSON or an elided stub saying how to re-read it
        for part in returns[:-1]:
            text = part.model_response_str()
            if text.startswith("[shipagent elided"):
                assert "call context_read({" in text and '"offset":' in text
            else:
                json.loads(text)
        assert "shipagent cut" not in "".join(p.model_response_str() for p in returns)
    last = requests[-1]
    assert sum(message_tokens(m) for m in last) <= 64000
    elided = [p for p in _returns(last) if p.model_response_str().startswith("[shipagent elided")]
    assert len(elided) >= len(pages) - 5
    # the ledger shows each edit: older pages elided (with how to re-read them), the newest whole
    records = agent.ledger(KEY)
    assert len(records) == len(requests)
    final = records[-1]
    results = [i for i in final.items if i.section == "toolResults" and i.source != "turn:0"]
    assert results[-1].edit == "whole" and results[-1].tokens > 1000  # the newest page, whole
    hints = [h for i in results if i.edit == "elided" for h in i.hints.values()]
    assert len(hints) == len(elided) and all('"offset":' in h for h in hints)
    assert not any(i.edit == "cut" for r in records for i in r.items)


def inject_huge() -> str:
    current_tool_context().inject_system_message_once("RULES-HEAD " + "rule " * 50_000, fingerprint="huge")
    return "injected"


async def test_a_huge_injection_shrinks_only_the_injections_section(tmp_path: Path) -> None:
    sent: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.append(list(messages))
        last = messages[-1]
        users = [p for p in last.parts if isinstance(p, UserPromptPart)]
        if isinstance(last, ModelRequest) and users and "inject" in str(users[-1].content):
            return ModelResponse(parts=[ToolCallPart("inject_huge", {})])
        if _returns([last]):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[TextPart("reply " + "words " * 300)])

    ship = {"context": {"budget": {"maxTokens": 40000, "sections": {"injections": 0.05}}}}
    agent = ShipAgent.from_project(
        _project(tmp_path, ship), model=FunctionModel(model), toolsets=[FunctionToolset([inject_huge])]
    )
    for i in range(4):
        assert (await agent.run(KEY, f"turn {i} " + "text " * 300)).success
    history = agent.history(KEY)
    assert (await agent.run(KEY, "inject now")).success
    request = sent[-1]
    rendered = render(request)
    injected = [t for _, kind, t in rendered if kind == "system-prompt" and t.startswith("RULES-HEAD")]
    assert len(injected) == 1 and "shipagent cut" in injected[0]
    from shipagent.window.tokens import count_tokens

    assert count_tokens(injected[0]) <= 2000 + 60  # 5% of 40000 (plus the cut marker)
    # everything else arrived whole: the whole history, the user's text, the tool result
    assert rendered[0][2] == injected[0]  # system injections lead (there is no summary yet)
    assert rendered[1 : 1 + len(render(history))] == render(history)
    assert ("request", "user-prompt", "inject now") in rendered
    assert ("request", "tool-return", "inject_huge -> injected") in rendered
    assert not any("shipagent cut" in t or "left out" in t for _, kind, t in rendered if "RULES" not in t)


def _history(pairs: int, rng: random.Random) -> list[ModelMessage]:
    out: list[ModelMessage] = [summary_message(3, "earlier")]
    for i in range(pairs):
        filler = " ".join(f"w{j}" for j in range(rng.randint(5, 400)))
        out.append(ModelRequest(parts=[UserPromptPart(f"u{i} {filler}")]))
        calls = rng.randint(0, 3)
        if calls:
            out.append(
                ModelResponse(parts=[ToolCallPart("t", {}, tool_call_id=f"c{i}.{k}") for k in range(calls)])
            )
            out.append(
                ModelRequest(
                    parts=[ToolReturnPart("t", f"r {filler}", tool_call_id=f"c{i}.{k}") for k in range(calls)]
                )
            )
        out.append(ModelResponse(parts=[TextPart(f"a{i} {filler}")]))
    return out


def test_history_never_loses_a_tool_pair_whatever_the_budget() -> None:
    rng = random.Random(13)
    for trial in range(60):
        history = _history(rng.randint(3, 25), rng)
        current = [ModelRequest(parts=[UserPromptPart("now")])]
        caps = {"history": rng.randint(200, 6000)} if trial % 2 else {}
        budget = Budget(rng.randint(400, 9000), caps)
        prior, injected, run = build_items(history, None, [], current)
        plan = plan_request(prior, injected, run, budget, lambda part, call: "again")
        sent = render_prior(prior)
        calls = {p.tool_call_id for m in sent for p in m.parts if isinstance(p, ToolCallPart)}
        returns = {p.tool_call_id for m in sent for p in m.parts if isinstance(p, ToolReturnPart)}
        assert calls == returns, (trial, budget)
        # dropped = the oldest, a contiguous prefix of the body; the summary goes last
        edits = [i.edit for i in prior[1:]]
        assert edits == sorted(edits, key=lambda e: e != "dropped"), trial
        if prior[0].edit == "dropped":
            assert all(e == "dropped" for e in edits)
        assert render_item(run[0]) == current[0]
        if "history" in caps:
            assert sum(i.tokens for i in prior) <= caps["history"] or all(
                i.edit == "dropped" for i in prior[1:]
            )
        assert plan.section_tokens().get("turn", 0) > 0


def lookup(n: int) -> str:
    """A result of ~2,000 tokens (under the spill threshold, so it is sent whole)."""
    return f"RESULT-{n} " + " ".join(f"fact{n}x{j}" for j in range(500))


async def test_an_elided_result_of_another_tool_is_kept_as_a_context_file(tmp_path: Path) -> None:
    sent: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.append(list(messages))
        n = len(_returns(messages[-1:]))
        done = sum(1 for p in _returns(messages))
        if done < 4:
            return ModelResponse(parts=[ToolCallPart("lookup", {"n": done}, tool_call_id=f"l{done}")])
        return ModelResponse(parts=[TextPart(f"ok {n}")])

    ship = {"context": {"chatHistory": {"maxHistoryTokens": 8000}}}
    agent = ShipAgent.from_project(
        _project(tmp_path, ship), model=FunctionModel(model), toolsets=[FunctionToolset([lookup])]
    )
    assert (await agent.run(KEY, "look things up")).success
    returns = [p.model_response_str() for p in _returns(sent[-1])]
    assert returns[-1] == lookup(3)  # the newest whole
    stub = returns[0]
    assert stub.startswith("[shipagent elided this earlier result of `lookup` (call l0)")
    ref_id = stub.split("context_read(id='")[1].split("'")[0]
    assert agent.context_files.read(KEY, ref_id, 0, 65536).content == lookup(0)
    # each result is kept once per run, however many requests elide it
    assert len(agent.context_files.list(KEY, kind="artifact")) == sum(
        1 for r in returns if r.startswith("[shipagent elided")
    )


def test_budget_config_keys_and_errors() -> None:
    from shipagent.config import parse_config
    from shipagent.errors import ConfigError

    config = parse_config(
        {
            "context": {
                "budget": {
                    "maxTokens": 100000,
                    "reserveOutput": 8000,
                    "sections": {"injections": 0.1, "history": 30000, "toolResults": 0.5},
                },
                "ledger": {"keepRequests": 50, "enabled": False},
            }
        }
    )
    budget = config.context.budget
    assert (budget.max_tokens, budget.reserve_output) == (100000, 8000)
    assert budget.sections.model_dump(exclude_none=True, by_alias=True) == {
        "injections": 0.1,
        "history": 30000,
        "toolResults": 0.5,
    }
    assert (config.context.ledger.keep_requests, config.context.ledger.enabled) == (50, False)
    defaults = parse_config({}).context
    assert (defaults.budget.max_tokens, defaults.budget.reserve_output) == (None, 4000)
    assert (defaults.ledger.enabled, defaults.ledger.keep_requests) == (True, 1000)
    with pytest.raises(ConfigError) as err:
        parse_config({"context": {"budget": {"sections": {"toolResult": 0.5}}}})
    assert "context.budget.sections.toolResult" in str(err.value) and "toolResults" in str(err.value)
    with pytest.raises(ConfigError) as err:
        parse_config({"context": {"budget": {"sections": {"history": -1}}}})
    assert "context.budget.sections.history" in str(err.value)
