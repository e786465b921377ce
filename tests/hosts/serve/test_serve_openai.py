"""The real ``openai`` SDK against ``/v1/chat/completions`` under uvicorn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import openai
import pytest
from pydantic_ai.messages import ModelResponse

from shipagent import ShipAgent
from shipagent.hosts.serve import create_app
from tests.support.core import make_project, user_texts
from tests.support.serve import serving
from tests.support.stream import StreamScript

CONVERSATION = [
    {"role": "system", "content": "You are a pirate."},
    {"role": "user", "content": "earlier question"},
    {"role": "assistant", "content": "earlier answer"},
    {"role": "user", "content": "the real question"},
]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, ShipAgent, StreamScript]]:
    script = StreamScript(chunk=3)
    make_project(tmp_path, {"name": "pirate-agent"})
    agent = ShipAgent.from_project(tmp_path, model=script.model)
    with serving(create_app(agent)) as url:
        yield url, agent, script


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def test_sync_sdk_non_streamed(served: tuple[str, ShipAgent, StreamScript]) -> None:
    url, agent, script = served
    raw = _client(url).chat.completions.with_raw_response.create(
        model="anything-goes", messages=CONVERSATION, user="web:alice"
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "echo: the real question"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.model == "anything-goes"  # echoed back
    usage = completion.usage
    assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert raw.headers["x-shipagent-ignored"] == "system-message"
    # only the last user message is the turn; shipagent keeps its own history
    assert user_texts(agent.history("web:alice")) == ["the real question"]
    assert "You are a pirate." not in str(script.requests[0])


def test_sync_sdk_streamed(served: tuple[str, ShipAgent, StreamScript]) -> None:
    url, agent, _ = served
    stream = _client(url).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "stream me"}],
        stream=True,
        extra_headers={"X-Chat-Key": "web:bob"},
    )
    chunks = list(stream)
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) > 2 and "".join(pieces) == "echo: stream me"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert user_texts(agent.history("web:bob")) == ["stream me"]


def test_header_chat_key_wins_over_user(served: tuple[str, ShipAgent, StreamScript]) -> None:
    url, agent, _ = served
    _client(url).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        user="web:from-user-field",
        extra_headers={"X-Chat-Key": "web:from-header"},
    )
    assert user_texts(agent.history("web:from-header")) == ["hi"]
    assert agent.history("web:from-user-field") == []


def test_async_sdk_plain_and_streamed_keep_one_history(served: tuple[str, ShipAgent, StreamScript]) -> None:
    url, agent, _ = served

    async def main() -> tuple[str | None, str]:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        first = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "one"}], user="web:async"
        )
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "two"}], user="web:async", stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        await client.close()
        return first.choices[0].message.content, text

    first, second = anyio.run(main)
    assert (first, second) == ("echo: one", "echo: two")
    assert user_texts(agent.history("web:async")) == ["one", "two"]


def test_models_lists_the_agent_by_name(served: tuple[str, ShipAgent, StreamScript]) -> None:
    url, _, _ = served
    assert [m.id for m in _client(url).models.list()] == ["pirate-agent"]


def test_missing_chat_key_is_a_clear_sdk_error(served: tuple[str, ShipAgent, StreamScript]) -> None:
    url, _, script = served
    with pytest.raises(openai.BadRequestError) as caught:
        _client(url).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert "X-Chat-Key header or the request's 'user' field" in str(caught.value)
    assert script.requests == []


def test_a_failed_turn_is_an_sdk_error_streamed_or_not(tmp_path: Path) -> None:
    def broken(messages, info, n) -> ModelResponse:  # type: ignore[no-untyped-def]
        raise RuntimeError("the provider is down")

    agent = ShipAgent.from_project(make_project(tmp_path), model=StreamScript(broken).model)
    with serving(create_app(agent)) as url:
        client = _client(url)
        with pytest.raises(openai.APIStatusError) as plain:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], user="u")
        with pytest.raises(openai.APIError) as streamed:
            list(
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}], user="u", stream=True
                )
            )
    assert plain.value.status_code == 502 and "the provider is down" in str(plain.value)
    assert "the provider is down" in str(streamed.value)
    assert agent.history("u") == []
