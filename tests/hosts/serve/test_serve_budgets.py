"""A chat over its budget over HTTP: 429 with ``Retry-After`` on both APIs, and ``GET .../usage``.

The native API is driven with httpx, the OpenAI-compatible one with the real ``openai`` SDK, both
against the real app under uvicorn; the agent's clock is fixed, so the reset times are exact.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCalls, FunctionModel
from pydantic_ai.usage import RequestUsage

from shipagent import ShipAgent
from shipagent.hosts.serve import create_app
from tests.support.core import make_project, user_texts
from tests.support.serve import serving

KEY = "web:budgeted"
EVENING = datetime(2026, 3, 10, 21, 48, tzinfo=UTC)


class Script:
    """Answers with 700 tokens of usage a request, whole or streamed; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.model = FunctionModel(self._reply, stream_function=self._stream, model_name="script")

    def _reply(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        usage = RequestUsage(input_tokens=600, output_tokens=100)
        return ModelResponse(parts=[TextPart(f"answer {self.calls}")], usage=usage)

    async def _stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        self.calls += 1
        yield f"streamed {self.calls}"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, ShipAgent, Script]]:
    script = Script()
    make_project(tmp_path, {"name": "budgeted", "context": {"budgets": {"tokensPerDay": 1000}}})
    agent = ShipAgent.from_project(tmp_path, model=script.model)
    agent.clock = lambda: EVENING
    with serving(create_app(agent)) as url:
        yield url, agent, script


def _post(url: str, text: str, **body: Any) -> httpx.Response:
    return httpx.post(f"{url}/v1/chats/{KEY}/messages", json={"text": text, **body}, timeout=30)


def _spend_the_budget(url: str) -> None:
    for text in ("one", "two"):  # 700, then 1400 tokens: the second crosses 1000 and completes
        response = _post(url, text)
        assert response.status_code == 200 and response.json()["success"]


def test_rest_refuses_with_429_retry_after_and_the_budget_named(
    served: tuple[str, ShipAgent, Script],
) -> None:
    url, agent, script = served
    _spend_the_budget(url)

    refused = _post(url, "three")
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == str(2 * 3600 + 12 * 60)
    error = refused.json()["error"]
    assert error["type"] == "budget_exceeded"
    assert (error["budget"], error["used"], error["limit"]) == ("context.budgets.tokensPerDay", 1400, 1000)
    assert error["resetsAt"] == "2026-03-11T00:00:00Z" and error["period"] == "day"
    assert "context.budgets.tokensPerDay" in error["message"] and error["requestId"]

    streamed = _post(url, "four", stream=True)  # refused before an event stream starts
    assert streamed.status_code == 429 and streamed.json()["error"]["type"] == "budget_exceeded"
    assert script.calls == 2
    assert user_texts(agent.history(KEY)) == ["one", "two"]


def test_get_usage_shows_use_against_budget(served: tuple[str, ShipAgent, Script]) -> None:
    url, _, _ = served
    fresh = httpx.get(f"{url}/v1/chats/{KEY}/usage", timeout=30).json()
    assert fresh["day"]["tokens"] == 0 and fresh["refused"] is None
    _spend_the_budget(url)

    usage = httpx.get(f"{url}/v1/chats/{KEY}/usage", timeout=30)
    assert usage.status_code == 200
    report = usage.json()
    day, month = report["day"], report["month"]
    assert (day["period"], day["tokens"], day["inputTokens"], day["outputTokens"]) == (
        "2026-03-10",
        1400,
        1200,
        200,
    )
    assert day["budgets"]["tokens"] == {
        "setting": "context.budgets.tokensPerDay",
        "limit": 1000,
        "used": 1400,
        "remaining": 0,
    }
    assert day["budgets"]["cost"] is None and day["cost"] is None  # no budget, no price
    assert day["resetsAt"] == "2026-03-11T00:00:00Z" and month["resetsAt"] == "2026-04-01T00:00:00Z"
    assert month["tokens"] == 1400 and month["budgets"]["tokens"] is None
    assert report["refused"]["budget"] == "context.budgets.tokensPerDay"


def test_a_corrupt_usage_file_is_a_500_naming_it(served: tuple[str, ShipAgent, Script]) -> None:
    url, agent, _ = served
    _spend_the_budget(url)
    path = agent.budgets.store.path(KEY)
    path.write_text("not json", encoding="utf-8")
    response = httpx.get(f"{url}/v1/chats/{KEY}/usage", timeout=30)
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["type"] == "usage_unreadable" and str(path) in error["message"]


def test_the_openai_sdk_gets_a_rate_limit_error_naming_the_budget(
    served: tuple[str, ShipAgent, Script],
) -> None:
    url, _, script = served
    _spend_the_budget(url)
    sent: list[httpx.Request] = []
    hooks = {"request": [sent.append]}
    client = openai.OpenAI(
        base_url=f"{url}/v1", api_key="unused", max_retries=3, http_client=httpx.Client(event_hooks=hooks)
    )
    messages: Any = [{"role": "user", "content": "over"}]

    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="m", messages=messages, user=KEY)
    error = caught.value
    assert error.status_code == 429 and error.code == "budget_exceeded" and error.type == "budget_exceeded"
    assert error.response.headers["retry-after"] == "7920"
    assert isinstance(error.body, dict) and error.body["budget"] == "context.budgets.tokensPerDay"
    assert error.body["resetsAt"] == "2026-03-11T00:00:00Z"
    assert len(sent) == 1  # a Retry-After of hours: the SDK does not retry

    with pytest.raises(openai.RateLimitError):
        stream = client.chat.completions.create(model="m", messages=messages, user=KEY, stream=True)
        list(stream)
    assert script.calls == 2  # neither the refused turns nor any retry reached the model


def test_a_refused_post_changes_no_file_of_the_chat(served: tuple[str, ShipAgent, Script]) -> None:
    url, agent, _ = served
    _spend_the_budget(url)
    folder = agent.paths.chat_dir(KEY)
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    assert _post(url, "refused").status_code == 429
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before
    assert json.loads(before["usage.json"])["days"][0]["requests"] == 2
