"""Budgets per chat (``context.budgets``): every response counted, a chat over budget refused.

The turn that crosses a budget completes (its size is unknown before it runs); the next is
refused before anything runs: no model request, and the chat's history, transcript, ledger and
usage file stay byte for byte as they were. The clock is the agent's ``clock`` (a test moves it),
never the wall clock.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from shipagent import ShipAgent
from shipagent.agent._budgets import spend_of
from shipagent.config import ModelPrice
from shipagent.events import Done
from shipagent.store.usage import Spend, UsageFileError, UsageStore
from tests.support.core import make_project, user_texts
from tests.support.stream import StreamScript

pytestmark = pytest.mark.anyio
KEY = "api:chat:budget"
EVENING = datetime(2026, 3, 10, 21, 48, tzinfo=UTC)


class Metered:
    """A scripted model whose every answer reports ``input`` and ``output`` tokens."""

    def __init__(
        self, input_tokens: int = 600, output_tokens: int = 100, *, cached: int = 0, name: str = "script"
    ):
        self.calls = 0
        self.usage = RequestUsage(
            input_tokens=input_tokens, output_tokens=output_tokens, cache_read_tokens=cached
        )
        self.model = FunctionModel(self._reply, model_name=name)

    def _reply(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        return ModelResponse(parts=[TextPart(f"answer {self.calls}")], usage=self.usage)


def _agent(root: Path, model: Any, budgets: dict[str, Any], *, at: datetime = EVENING) -> ShipAgent:
    make_project(root, {"name": "budgeted", "context": {"budgets": budgets}})
    agent = ShipAgent.from_project(root, model=model)
    agent.clock = lambda: at
    return agent


def _chat_files(agent: ShipAgent, key: str = KEY) -> dict[str, bytes]:
    folder = agent.paths.chat_dir(key)
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


async def test_the_turn_that_crosses_the_budget_completes_and_the_next_is_refused_with_nothing_committed(
    tmp_path: Path,
) -> None:
    model = Metered(600, 100)  # 700 tokens a turn
    agent = _agent(tmp_path, model.model, {"tokensPerDay": 1000})

    first = await agent.run(KEY, "one")
    assert first.success and (await agent.usage(KEY)).day.use.tokens == 700
    second = await agent.run(KEY, "two")  # starts at 700 < 1000, ends at 1400: completes
    assert second.success and second.output == "answer 2"

    before = _chat_files(agent)
    ledger = agent.ledger(KEY)
    history = agent.history(KEY)
    assert {"history.jsonl", "messages.jsonl", "usage.json"} <= set(before)
    third = await agent.run(KEY, "three")

    assert not third.success and third.finish_reason == "budget"
    assert model.calls == 2  # no model request
    assert third.budget is not None
    assert (third.budget.setting, third.budget.used, third.budget.limit) == (
        "context.budgets.tokensPerDay",
        1400,
        1000,
    )
    assert third.budget.resets_at == datetime(2026, 3, 11, tzinfo=UTC)
    assert third.budget.retry_after == 2 * 3600 + 12 * 60
    assert third.output == (
        "This chat has used 1,400 of its 1,000 tokens for today (context.budgets.tokensPerDay); "
        "it resets at 00:00 UTC (in 2 h 12 min)."
    )
    assert _chat_files(agent) == before  # history, transcript, usage: byte for byte
    assert agent.ledger(KEY) == ledger and agent.history(KEY) == history
    assert user_texts(agent.history(KEY)) == ["one", "two"]
    assert third.to_json()["budget"]["retryAfterSeconds"] == 7920
    assert (await agent.usage(KEY)).refused == third.budget


async def test_a_new_utc_day_admits_again_and_the_month_keeps_counting(tmp_path: Path) -> None:
    model = Metered(600, 100)
    agent = _agent(tmp_path, model.model, {"tokensPerDay": 1000, "tokensPerMonth": 100_000})
    await agent.run(KEY, "one")
    await agent.run(KEY, "two")
    assert (await agent.run(KEY, "refused")).finish_reason == "budget"

    agent.clock = lambda: datetime(2026, 3, 10, 23, 59, 59, tzinfo=UTC)
    late = await agent.run(KEY, "still today")
    assert late.finish_reason == "budget" and late.budget is not None and late.budget.retry_after == 1

    agent.clock = lambda: datetime(2026, 3, 11, 0, 0, 1, tzinfo=UTC)
    morning = await agent.run(KEY, "a new day")
    assert morning.success and model.calls == 3
    report = await agent.usage(KEY)
    assert (report.day.use.period, report.day.use.tokens) == ("2026-03-11", 700)
    assert (report.month.use.period, report.month.use.tokens) == ("2026-03", 2100)
    assert report.refused is None
    assert [b["period"] for b in json.loads(agent.budgets.store.path(KEY).read_text())["days"]] == [
        "2026-03-10",
        "2026-03-11",
    ]


async def test_a_month_budget_names_the_month_and_waits_for_it_over_a_day_budget(tmp_path: Path) -> None:
    model = Metered(900, 100)
    agent = _agent(tmp_path, model.model, {"tokensPerDay": 500, "tokensPerMonth": 800})
    assert (await agent.run(KEY, "big")).success
    refused = await agent.run(KEY, "again")
    assert refused.budget is not None and refused.budget.setting == "context.budgets.tokensPerMonth"
    assert refused.budget.resets_at == datetime(2026, 4, 1, tzinfo=UTC)
    assert "resets on 2026-04-01 at 00:00 UTC (in 21 d 2 h)" in refused.output


async def test_cost_budgets_use_the_price_in_ship_json(tmp_path: Path) -> None:
    # 400 input tokens (200 of them cached) and 100 output tokens a turn:
    # (200 x 1000 + 200 x 100 + 100 x 2000) / 1e6 = 0.42
    model = Metered(400, 100, cached=200)
    price = {"inputPerMillion": 1000, "outputPerMillion": 2000, "cachedInputPerMillion": 100}
    agent = _agent(tmp_path, model.model, {"costPerDay": 1.0, "prices": {"script": price}})
    for text in ("one", "two", "three"):  # 0.42, 0.84, then 1.26: the third crosses and completes
        assert (await agent.run(KEY, text)).success
    refused = await agent.run(KEY, "four")
    assert refused.finish_reason == "budget" and model.calls == 3
    assert refused.budget is not None and refused.budget.setting == "context.budgets.costPerDay"
    assert refused.budget.used == pytest.approx(1.26)
    assert "has spent 1.26 of its 1 for today (context.budgets.costPerDay)" in refused.output
    day = (await agent.usage(KEY)).day
    assert day.cost == pytest.approx(1.26) and day.use.cached_input_tokens == 600
    assert day.to_json()["budgets"]["cost"]["remaining"] == 0


async def test_an_unknown_price_leaves_tokens_only(tmp_path: Path) -> None:
    model = Metered(600, 100, name="a-model-nobody-prices")
    agent = _agent(tmp_path, model.model, {"costPerDay": 0.000001, "tokensPerDay": 2000})
    assert (await agent.run(KEY, "one")).success
    assert (await agent.run(KEY, "two")).success  # the cost budget does not apply
    report = await agent.usage(KEY)
    assert report.day.cost is None and report.refused is None
    assert "price unknown" in report.day.line()
    assert report.day.to_json()["budgets"]["cost"]["used"] is None
    assert (await agent.run(KEY, "three")).success  # 1400 < 2000
    assert (await agent.run(KEY, "four")).budget is not None  # the tokens budget still does


def test_pydantic_ais_price_data_prices_a_model_ship_json_does_not_list() -> None:
    usage = RequestUsage(input_tokens=1000, output_tokens=500)
    response = ModelResponse(parts=[TextPart("x")], usage=usage, model_name="gpt-4o")
    spend = spend_of(response, {})
    assert spend.cost is not None and spend.cost > 0
    assert spend.cost == float(response.cost().total_price)
    own = ModelPrice(input_per_million=1, output_per_million=1)
    assert spend_of(response, {"gpt-4o": own}).cost == pytest.approx(1500 / 1e6)  # ship.json's wins
    assert spend_of(response, {"gpt-4o": own}, ["openai:gpt-4o"]).cost == pytest.approx(1500 / 1e6)
    unknown = ModelResponse(parts=[TextPart("x")], usage=usage, model_name="not-a-model")
    assert spend_of(unknown, {}).cost is None


async def test_a_failed_turn_counts_the_tokens_its_requests_spent(tmp_path: Path) -> None:
    calls: list[int] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(1)
        if len(calls) == 1:
            from pydantic_ai.messages import ToolCallPart

            return ModelResponse(
                parts=[ToolCallPart("no_such_tool", {}, tool_call_id="c1")],
                usage=RequestUsage(input_tokens=300, output_tokens=20),
            )
        raise ModelHTTPError(400, "script", body={"error": "refused by the provider"})

    agent = _agent(tmp_path, FunctionModel(reply, model_name="script"), {"tokensPerDay": 100_000})
    result = await agent.run(KEY, "go")
    assert not result.success and agent.history(KEY) == []
    day = (await agent.usage(KEY)).day
    assert (day.use.requests, day.use.tokens) == (1, 320)


async def test_a_streamed_turn_counts_what_the_run_reports(tmp_path: Path) -> None:
    script = StreamScript(chunk=3)
    agent = _agent(tmp_path, script.model, {"tokensPerMonth": 10**9})
    results = []
    for text in ("stream one", "stream two"):
        async for event in agent.run_stream(KEY, text):
            if isinstance(event, Done):
                results.append(event.result)
    assert all(r.success for r in results) and all(script.streamed)
    month = (await agent.usage(KEY)).month
    assert month.use.tokens == sum(r.usage.input_tokens + r.usage.output_tokens for r in results) > 0
    assert month.use.requests == 2


async def test_a_corrupt_usage_file_is_an_error_naming_it_not_a_lost_chat(tmp_path: Path) -> None:
    model = Metered(600, 100)
    agent = _agent(tmp_path, model.model, {"tokensPerDay": 1000})
    assert (await agent.run(KEY, "one")).success
    path = agent.budgets.store.path(KEY)
    path.write_text('{"version": 1, "days": [{"period": 5}]}', encoding="utf-8")

    refused = await agent.run(KEY, "two")
    assert not refused.success and refused.finish_reason == "error" and model.calls == 1
    assert str(path) in refused.output and "days[0]" in refused.output
    with pytest.raises(UsageFileError) as caught:
        await agent.usage(KEY)
    assert caught.value.path == path
    assert path.read_text(encoding="utf-8") == '{"version": 1, "days": [{"period": 5}]}'  # kept as found
    assert user_texts(agent.history(KEY)) == ["one"]  # the chat is all there

    path.unlink()  # what the message says to do
    assert (await agent.run(KEY, "three")).success


async def test_without_budgets_a_corrupt_file_is_left_alone_and_turns_run(tmp_path: Path) -> None:
    model = Metered(600, 100)
    agent = _agent(tmp_path, model.model, {})
    path = agent.budgets.store.path(KEY)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\xff not json")
    assert (await agent.run(KEY, "one")).success
    assert path.read_bytes() == b"\xff not json"


def test_a_replayed_response_is_counted_once(tmp_path: Path) -> None:
    from shipagent.chatkeys import ShipPaths

    store = UsageStore(ShipPaths(tmp_path))
    spend = Spend(100, 0, 10, None)
    for _ in range(2):  # a durable worker runs the recorded turn again after a crash
        store.add(KEY, spend, day="2026-03-10", month="2026-03", turn=("r1", 1))
    usage = store.add(KEY, spend, day="2026-03-10", month="2026-03", turn=("r1", 2))
    assert usage.day("2026-03-10").requests == 2 and usage.turns == {"r1": 2}
    assert usage.day("2026-03-10").unpriced == 2 and not usage.day("2026-03-10").priced


async def test_a_delegations_usage_counts_into_the_chat_that_delegated(tmp_path: Path) -> None:
    model = Metered(600, 100)
    agent = _agent(tmp_path, model.model, {"tokensPerDay": 1000})
    meter = agent.budgets.turn()
    assert await meter.admit(f"{KEY}#delegate:t1", "d1") is None
    await meter.counted(
        ModelResponse(parts=[TextPart("x")], usage=RequestUsage(input_tokens=5, output_tokens=5))
    )
    assert (await agent.usage(KEY)).day.use.tokens == 10
    assert not agent.budgets.store.path(f"{KEY}#delegate:t1").exists()


def test_the_clock_must_be_aware(tmp_path: Path) -> None:
    agent = _agent(tmp_path, Metered().model, {"tokensPerDay": 10})
    agent.clock = lambda: EVENING.replace(tzinfo=None)
    with pytest.raises(ValueError, match="aware"):
        agent.run_sync(KEY, "naive")


def test_reset_durations_read_to_the_minute() -> None:
    from shipagent.results import BudgetRefusal

    def text(seconds: int) -> str:
        at = EVENING + timedelta(seconds=seconds)
        return BudgetRefusal("context.budgets.tokensPerDay", "tokens", "day", 5, 1, at, seconds).message()

    assert text(59).endswith("(in 1 min).") and text(3600).endswith("(in 1 h).")
    assert text(3 * 86400 + 17 * 3600 + 5).endswith("(in 3 d 17 h).")  # rounded up to the minute, then cut


async def test_a_turn_whose_client_left_mid_stream_counts_what_was_streamed(tmp_path: Path) -> None:
    from contextlib import aclosing

    from shipagent.events import TextDelta

    script = StreamScript(chunk=2, delay=0.05)
    agent = _agent(tmp_path, script.model, {"tokensPerDay": 10**6})
    async with aclosing(agent.run_stream(KEY, "a long question that streams a long echo")) as events:
        async for event in events:
            if isinstance(event, TextDelta):
                break  # the client leaves: the turn is cancelled, nothing of it is committed
    assert agent.history(KEY) == [] and len(script.requests) == 1
    day = (await agent.usage(KEY)).day
    assert day.use.requests == 1 and day.use.input_tokens > 0
