"""Model requests against a real local HTTP server through the real openai SDK: announced retries,
one deadline for the whole request, and failures that say what to change (URL, key, variable)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import models

from shipagent import ShipAgent, StepEvent
from shipagent.agent._explain import scrub
from shipagent.agent.models import build_model
from shipagent.config import LlmConfig
from shipagent.errors import ConfigError
from tests.support.fake_openai import closed_port, completion, error, fake_openai

pytestmark = pytest.mark.anyio
INTERNALS = ("OpenAIProvider(", "Agent('test')", "ModelConnectionError", "ModelHTTPError", "cancel scope")


@pytest.fixture(autouse=True)
def local_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests talk to a server on 127.0.0.1 only; retries wait no time."""
    monkeypatch.setattr(models, "ALLOW_MODEL_REQUESTS", True)
    monkeypatch.setattr("shipagent.agent._retry.RETRY_BASE_DELAY", 0.0)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def project(root: Path, url: str, **llm: Any) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    config = {"llm": {"model": "m", "provider": "openai-compatible", "baseUrl": url, **llm}}
    (root / "ship.json").write_text(json.dumps(config), encoding="utf-8")
    return root


async def run(root: Path, text: str = "hi") -> tuple[Any, list[StepEvent]]:
    events: list[StepEvent] = []
    agent = ShipAgent.from_project(root)
    async with agent:
        result = await agent.run("api:chat:a", text, on_step=events.append)
    return result, events


async def test_a_503_is_retried_once_with_a_retry_event_and_the_turn_succeeds(tmp_path: Path) -> None:
    with fake_openai([error(503, "overloaded"), completion("hello")]) as server:
        result, events = await run(project(tmp_path, server.url))
    assert result.success and result.output == "hello"
    assert len(server.requests) == 2  # ours: 1 + llm.maxRetries; the SDK's own retries are off
    retries = [e for e in events if e.type == "retry"]
    assert len(retries) == 1
    assert retries[0].data["attempt"] == 1 and retries[0].data["of"] == 1
    assert "HTTP 503" in retries[0].text and "retry 1 of 1" in retries[0].text


async def test_max_retries_zero_sends_once_and_the_failure_names_the_url(tmp_path: Path) -> None:
    with fake_openai([error(503, "overloaded")]) as server:
        result, events = await run(project(tmp_path, server.url, maxRetries=0))
    assert not result.success and len(server.requests) == 1
    assert [e.type for e in events] == ["done"]
    assert f"The model server at {server.url}/ failed (HTTP 503)" in result.output
    assert not any(word in result.output for word in INTERNALS)


async def test_a_wrong_key_is_not_retried_and_says_which_variable(tmp_path: Path) -> None:
    with fake_openai([error(401, "Incorrect API key provided")]) as server:
        result, _ = await run(project(tmp_path, server.url, apiKey="sk-wrong", maxRetries=3))
    assert len(server.requests) == 1
    assert "rejected the API key (HTTP 401)" in result.output
    assert "OPENAI_API_KEY or llm.apiKey" in result.output
    assert "sk-wrong" not in result.output


async def test_no_server_names_the_url_and_the_key_to_change(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    result, events = await run(project(tmp_path, url))
    assert not result.success
    assert f"Cannot reach the model server at {url}/" in result.output
    assert "Check llm.baseUrl in ship.json" in result.output
    assert "(tried 2 times)" in result.output
    assert not any(word in result.output for word in INTERNALS)
    assert [e.type for e in events] == ["retry", "done"]
    assert "no connection" in events[0].text


async def test_timeout_seconds_bounds_the_whole_request_retries_included(tmp_path: Path) -> None:
    with fake_openai(["hang", "hang", "hang", "hang"]) as server:
        started = time.monotonic()
        result, _ = await run(project(tmp_path, server.url, timeoutSeconds=1, maxRetries=3))
        elapsed = time.monotonic() - started
    assert not result.success
    assert "did not answer within 1 s, retries included" in result.output
    assert "llm.timeoutSeconds" in result.output
    # one deadline for all attempts: not 4 x 1 s, and nowhere near the SDK's default of 600 s
    assert elapsed < 3.5, elapsed


def test_bare_model_override_keeps_provider_base_url_and_key() -> None:
    llm = LlmConfig(model="a", provider="openai-compatible", base_url="http://127.0.0.1:9/v1", api_key="k1")
    model = build_model(llm, "b")
    assert model.model_name == "b"
    assert model.base_url == "http://127.0.0.1:9/v1/"
    assert model.wrapped.client.api_key == "k1"  # type: ignore[attr-defined]
    prefixed = build_model(LlmConfig(model="a", provider="openai-compatible", base_url="http://x/v1"), "test")
    assert prefixed.model_name == "test"


@pytest.mark.parametrize(
    ("llm", "says", "key"),
    [
        (
            {"model": "openai:gpt-5-mini"},
            "needs an API key: set the environment variable OPENAI_API_KEY (or llm.apiKey in ship.json)",
            "llm.apiKey",
        ),
        (
            {"model": "gpt-5-mini", "provider": "openai"},
            "set the environment variable OPENAI_API_KEY",
            "llm.apiKey",
        ),
        (
            {"model": "deepseek:deepseek-chat"},
            "set the environment variable DEEPSEEK_API_KEY",
            "llm.apiKey",
        ),
        ({"model": "opneai:gpt-5"}, "unknown provider 'opneai' (did you mean 'openai'?)", "llm.model"),
        ({"model": "gpt-5", "provider": "antropic"}, "did you mean 'anthropic'?", "llm.provider"),
        ({"model": "m", "provider": "openai-compatible"}, "llm.baseUrl is not set", "llm.baseUrl"),
        ({"model": "gpt-5"}, "names no provider: write it as 'provider:gpt-5'", "llm.model"),
        ({}, "llm.model is not set", "llm.model"),
    ],
)
def test_model_mistakes_name_what_to_change(
    monkeypatch: pytest.MonkeyPatch, llm: dict[str, Any], says: str, key: str
) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    with pytest.raises(ConfigError) as caught:
        build_model(LlmConfig.model_validate(llm))
    assert says in str(caught.value)
    assert caught.value.path == key
    assert not any(word in str(caught.value) for word in INTERNALS)


def test_scrub_removes_library_internals() -> None:
    assert scrub("Cancelled via cancel scope 7f3a9c12e0") == "cancelled"
    text = (
        "Set the `OPENAI_API_KEY` environment variable or pass it via `OpenAIProvider(api_key=...)` to use "
        "the OpenAI provider. To try Pydantic AI without an API key, use the built-in test model: `Agent('test')`."
    )
    cleaned = scrub(text)
    assert "OPENAI_API_KEY" in cleaned and "OpenAIProvider(" not in cleaned and "Agent('test')" not in cleaned


def test_the_command_line_shows_each_retry_on_stderr(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from shipagent.hosts.cli import _app as cli

    with fake_openai([error(502, "bad gateway"), completion("hello")]) as server:
        result = CliRunner().invoke(cli.app, ["run", "-C", str(project(tmp_path, server.url)), "hi"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "hello\n"
    assert "model request failed (HTTP 502); retry 1 of 1" in result.stderr
