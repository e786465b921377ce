"""Compaction by a high and a low mark: how often it happens, when an idle chat compacts early,
and what a summary says it covers."""

from __future__ import annotations

import itertools
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.usage import RequestUsage

from shipagent import ShipAgent
from shipagent.agent._cache_policy import HOSTED_CACHE_TTL, cache_ttl, summarizes_with_model
from shipagent.config import parse_config
from shipagent.events import Compacted
from shipagent.window.compaction import is_summary, summary_compactions
from shipagent.window.marks import Marks, history_tokens

from ..support.core import ScriptedModel, answer, make_agent, make_project, render, user_texts

pytestmark = pytest.mark.anyio


def _marks(**chat_history: Any) -> dict[str, Any]:
    return {"context": {"chatHistory": chat_history}}


def _implied_compactions(turns: int, high: int, low: int) -> int:
    """How many compactions plain two-message turns make with marks ``high``/``low`` (messages).

    The history grows by 2 a turn; past ``high`` it becomes the summary plus the newest ``low``.
    """
    count, size = 0, 0
    for _ in range(turns):
        size += 2
        if size > high:
            count, size = count + 1, 1 + low
    return count


def test_the_implied_count_has_the_closed_form_the_docs_state() -> None:
    # one compaction, then one every ceil((high - low) / 2) turns: the arithmetic the docs use
    assert _implied_compactions(200, 40, 10) == 1 + (200 - 21) // 15
    assert _implied_compactions(200, 200, 20) == 1 + (200 - 101) // 90


async def test_a_200_turn_chat_compacts_as_often_as_the_marks_imply(tmp_path: Path) -> None:
    root = make_project(tmp_path, _marks(inMemoryMaxMessages=40, compactKeepLastMessages=10))
    scripted = ScriptedModel(lambda messages, info, n: answer(f"ok {n}"))
    agent = make_agent(root, scripted.model)
    compacted: list[Compacted] = []
    for n in range(200):
        async for event in agent.run_stream("chat", f"note {n}"):
            if isinstance(event, Compacted):
                compacted.append(event)
        assert len(agent.history("chat")) <= 40
    history = agent.history("chat")
    implied = _implied_compactions(200, 40, 10)
    assert len(compacted) == implied == summary_compactions(history[0])
    assert all(event.kept == 10 for event in compacted)
    # between compactions a turn only appends: each request starts with the previous one's messages
    sizes = [len(r) for r in scripted.requests]
    grows = sum(1 for a, b in itertools.pairwise(sizes) if b == a + 2)
    assert grows == 199 - implied


async def test_a_token_high_mark_compacts_before_the_message_mark(tmp_path: Path) -> None:
    ship = _marks(
        inMemoryMaxMessages=1000, compactKeepLastMessages=500, compactAtTokens=800, compactToTokens=200
    )
    root = make_project(tmp_path, ship)
    long = " ".join(f"word{j}" for j in range(40))
    scripted = ScriptedModel(lambda messages, info, n: answer(f"noted {n}"))
    agent = make_agent(root, scripted.model)
    compactions = 0
    for n in range(60):
        assert (await agent.run("chat", f"{n}: {long}")).success
        history = agent.history("chat")
        body = history[1:] if is_summary(history[0]) else history
        assert history_tokens(body) <= 800
        if summary_compactions(history[0]) > compactions:
            compactions += 1
            assert history_tokens(body) <= 200 or len(body) == 2  # the low mark, or the newest turn
    assert compactions >= 3


def _idle_agent(tmp_path: Path, ttl: float) -> tuple[ShipAgent, ScriptedModel]:
    ship = _marks(inMemoryMaxMessages=40, compactKeepLastMessages=4)
    ship["context"]["cache"] = {"ttlSeconds": ttl}
    scripted = ScriptedModel(lambda messages, info, n: answer(f"ok {n}"))
    return make_agent(make_project(tmp_path, ship), scripted.model), scripted


def _last_time(messages: list[ModelMessage]) -> Any:
    return messages[-1].timestamp


async def test_an_idle_chat_compacts_on_its_first_turn_after_the_ttl_and_not_before(tmp_path: Path) -> None:
    agent, scripted = _idle_agent(tmp_path, 600)
    for n in range(10):  # 20 messages: past the low mark (4) by more than a quarter of the gap
        assert (await agent.run("chat", f"note {n}")).success
    last = _last_time(agent.history("chat"))
    agent.chats.now = lambda: last + timedelta(seconds=599)  # the cache is still warm
    assert (await agent.run("chat", "still warm")).success
    assert not is_summary(agent.history("chat")[0])
    assert len(scripted.requests[-1]) == 21  # the whole history went out, appended to

    last = _last_time(agent.history("chat"))
    agent.chats.now = lambda: last + timedelta(seconds=601)  # idle past the TTL: the cache is cold
    events: list[Any] = [e async for e in agent.run_stream("chat", "after lunch")]
    history = agent.history("chat")
    assert is_summary(history[0]) and summary_compactions(history[0]) == 1
    assert any(isinstance(e, Compacted) for e in events)
    # the request that turn sent was already compacted: summary, the 4 newest, the new text
    sent = scripted.requests[-1]
    assert render(sent)[0][2].startswith("[Summary of the earlier conversation: 18 older messages")
    assert user_texts(sent) == ["note 9", "still warm", "after lunch"]
    # and the compaction is on disk: a new process sees the same history
    restarted = ShipAgent.from_project(tmp_path, model=scripted.model)
    assert [m.parts for m in restarted.history("chat")] == [m.parts for m in history]


async def test_a_cache_that_never_expires_never_compacts_early(tmp_path: Path) -> None:
    agent, _scripted = _idle_agent(tmp_path, 0)
    for n in range(10):
        assert (await agent.run("chat", f"note {n}")).success
    last = _last_time(agent.history("chat"))
    agent.chats.now = lambda: last + timedelta(days=30)
    assert (await agent.run("chat", "a month later")).success
    assert not is_summary(agent.history("chat")[0])


async def test_a_short_idle_chat_is_not_compacted_for_a_message_or_two(tmp_path: Path) -> None:
    agent, _scripted = _idle_agent(tmp_path, 60)
    for n in range(4):  # 8 messages: past the low mark (4), but not by a quarter of the gap (9)
        assert (await agent.run("chat", f"note {n}")).success
    last = _last_time(agent.history("chat"))
    agent.chats.now = lambda: last + timedelta(hours=2)
    assert (await agent.run("chat", "later")).success
    assert not is_summary(agent.history("chat")[0])


async def test_a_summary_says_which_turns_and_dates_it_covers(tmp_path: Path) -> None:
    root = make_project(tmp_path, _marks(inMemoryMaxMessages=8, compactKeepLastMessages=2))
    agent = make_agent(root, ScriptedModel(lambda messages, info, n: answer("ok")).model)
    for n in range(5):
        assert (await agent.run("chat", f"note {n}")).success
    history = agent.history("chat")
    text = str(history[0].parts[0].content)
    first = history[0].metadata["shipagent"]["from"]  # type: ignore[index]
    assert "[It covers 4 turns, " in text and f", {first} to " in text and text.count("(UTC)") == 1
    for n in range(6):  # a second compaction folds the first summary in: the count goes on
        assert (await agent.run("chat", f"more {n}")).success
    text = str(agent.history("chat")[0].parts[0].content)
    assert f"turns, {first} to " in text
    assert "[It covers 4 turns" not in text


def _config(llm: dict[str, Any], **context: Any) -> Any:
    return parse_config({"llm": llm, "context": context})


@pytest.mark.parametrize(
    ("llm", "model_in_code", "ttl", "model_summary"),
    [
        ({"provider": "openai", "model": "gpt-5-mini"}, False, HOSTED_CACHE_TTL, True),
        ({"provider": "anthropic", "model": "claude-sonnet-4-5"}, False, HOSTED_CACHE_TTL, True),
        (
            {"provider": "openai-compatible", "model": "m", "baseUrl": "http://127.0.0.1:8080/v1"},
            False,
            0,
            False,
        ),
        (
            {"provider": "openai-compatible", "model": "m", "baseUrl": "http://localhost:11434/v1"},
            False,
            0,
            False,
        ),
        (
            {"provider": "openai-compatible", "model": "m", "baseUrl": "https://api.example.com/v1"},
            False,
            300,
            True,
        ),
        ({"provider": "local"}, False, 0, False),
        ({}, True, 0, False),  # a model passed in code: shipagent cannot tell whose cache it has
    ],
)
def test_cache_ttl_and_summarizer_defaults_follow_the_provider(
    llm: dict[str, Any], model_in_code: bool, ttl: float, model_summary: bool
) -> None:
    config = _config(llm)
    assert cache_ttl(config, model_in_code=model_in_code) == ttl
    assert summarizes_with_model(config, model_in_code=model_in_code) is model_summary


def test_configured_ttl_and_summarizer_win() -> None:
    config = _config({"provider": "local"}, cache={"ttlSeconds": 90}, chatHistory={"summarizer": "model"})
    assert cache_ttl(config, model_in_code=False) == 90
    assert summarizes_with_model(config, model_in_code=False)
    config = _config({"provider": "openai", "model": "gpt-5-mini"}, chatHistory={"summarizer": "extract"})
    assert not summarizes_with_model(config, model_in_code=False)


def test_marks_are_past_when_either_count_is() -> None:
    marks = Marks(high_messages=4, low_messages=2, high_tokens=50, low_tokens=10)
    assert not marks.over([])
    assert Marks(2, 1).over([answer("a"), answer("b"), answer("c")])
    assert marks.over([answer(" ".join(f"w{j}" for j in range(80)))])


async def test_after_one_overflow_the_chat_compacts_before_the_window_again(tmp_path: Path) -> None:
    # The model's window is smaller than anything ship.json says: the first overflow teaches it.
    window = 2600
    overflows: list[int] = []

    def reply(messages: list[ModelMessage], info: Any, n: int) -> Any:
        size = history_tokens(messages)
        if size > window:
            overflows.append(size)
            raise ModelHTTPError(
                400, "m", body={"error": {"type": "exceed_context_size_error", "n_ctx": window}}
            )
        return answer(f"noted {n}")

    agent = make_agent(make_project(tmp_path), ScriptedModel(reply).model)
    words = " ".join(f"w{j}" for j in range(60))
    for n in range(80):
        assert (await agent.run("chat", f"{n}: {words}")).success
    assert len(overflows) == 1  # once, then every compaction came first
    assert summary_compactions(agent.history("chat")[0]) >= 3


async def test_the_provider_count_of_a_full_window_compacts_and_nothing_earlier(tmp_path: Path) -> None:
    # ship.json names the window (2,048) and the answer's room (48): 2,000 for the prompt. The
    # provider counts 100 prompt tokens more each turn (a template we cannot count ourselves).
    ship = {"llm": {"maxTokens": 48}, "context": {"budget": {"maxTokens": 2048}}}

    def reply(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
        said = len(user_texts(messages))
        return ModelResponse(
            parts=[TextPart("ok")], usage=RequestUsage(input_tokens=100 * said, output_tokens=10)
        )

    agent = make_agent(make_project(tmp_path, ship), ScriptedModel(reply).model)
    first = None
    for n in range(1, 25):
        assert (await agent.run("chat", f"note {n}")).success
        if first is None and is_summary(agent.history("chat")[0]):
            first = n
    # turn 17 reported 1,700 + 10 > 85 % of 2,000: its commit compacts; turn 16 (1,610) did not
    assert first == 17
