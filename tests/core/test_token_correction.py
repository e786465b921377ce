"""Token-count correction: provider input_tokens recorded and used for the next budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from shipagent import ShipAgent
from shipagent.window.tokens import TokenCalibration

pytestmark = pytest.mark.anyio
KEY = "api:chat:c"
FILLER = " ".join(f"word{j}" for j in range(300))  # ~600 tokens per answer


def _agent(root: Path, reported: int | None) -> ShipAgent:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        usage = (
            RequestUsage(input_tokens=reported, cache_read_tokens=reported // 4)
            if reported
            else RequestUsage()
        )
        return ModelResponse(parts=[TextPart("answer " + FILLER)], usage=usage)

    root.mkdir()
    # compaction by count only: the budget is what edits these requests
    history = {"maxHistoryTokens": 3000, "compactAtTokens": 10**6}
    (root / "ship.json").write_text(json.dumps({"context": {"chatHistory": history}}))
    return ShipAgent.from_project(root, model=FunctionModel(model))


async def test_a_model_that_counts_more_tokens_gets_a_smaller_budget_next_time(tmp_path: Path) -> None:
    heavy = _agent(tmp_path / "heavy", 1_000_000)  # the provider counts far more than o200k does
    plain = _agent(tmp_path / "plain", None)  # FunctionModel's own (lower) estimate: no correction
    for agent in (heavy, plain):
        for n in range(4):
            assert (await agent.run(KEY, f"question {n}")).success
    first, second, _, fourth = heavy.ledger(KEY)
    # recorded: our estimate and the provider's count (filled in when the turn ended)
    assert first.ratio == 1.0 and first.budget["total"] == 3000
    assert (first.input_tokens, first.cached_tokens) == (1_000_000, 250_000) and first.estimate > 0
    # corrected, bounded: the next request is budgeted at half
    assert second.ratio == TokenCalibration.MAX_RATIO and second.budget["total"] == 1500
    assert fourth.ratio == TokenCalibration.MAX_RATIO
    assert any(i.edit != "whole" for i in fourth.items)  # ~1,850 tokens no longer fit whole in 1,500
    plain_fourth = plain.ledger(KEY)[3]
    assert plain_fourth.ratio == 1.0 and all(i.edit == "whole" for i in plain_fourth.items)


def test_calibration_is_bounded_and_pairs_a_request_with_a_later_response_only() -> None:
    calibration = TokenCalibration()
    assert calibration.ratio("m") == 1.0
    calibration.expect("chat", "m", 1000, sent_messages=3)
    assert calibration.settle("chat", 5000, position=1) is None  # an older response: not this one
    assert calibration.settle("chat", 1200, position=3) == (1000, 1.2)
    assert calibration.ratio("m") == 1.2
    assert calibration.settle("chat", 1200, position=5) is None  # settled once
    calibration.expect("chat", "m", 1000, sent_messages=1)
    assert calibration.settle("chat", 500, position=1) == (1000, 1.0)  # fewer tokens: never below 1
    assert calibration.observe("m", 100, 10_000) == TokenCalibration.MAX_RATIO
