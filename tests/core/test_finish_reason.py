"""An answer that was cut says so: ``finishReason`` through the Python API, the CLI and the server.

A scripted model stops its answers at the token limit (``finish_reason="length"``, whole and
streamed) or hangs mid-stream until ``llm.timeoutSeconds`` runs out. The cut answer is kept, in
the result and in the chat's history, and every host marks it: ``run`` and ``chat`` print a
marker, the REST result and the SSE ``done`` event carry ``finishReason``, and the
OpenAI-compatible endpoint answers ``finish_reason: "length"`` to the real ``openai`` SDK.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from pydantic_ai.messages import ModelResponse, TextPart
from typer.testing import CliRunner

from shipagent import ShipAgent
from shipagent.events import Done, TextDelta
from shipagent.hosts.cli import _app as cli
from shipagent.results import AgentResult
from tests.support.core import make_project, user_texts
from tests.support.cut import CUT_TEXT, CutScript
from tests.support.serve import serving

runner = CliRunner()


def _agent_from(monkeypatch: pytest.MonkeyPatch, script: CutScript) -> None:
    def factory(root: Path, *, model: Any = None, **kwargs: Any) -> ShipAgent:
        return ShipAgent.from_project(root, model=script.model, **kwargs)

    monkeypatch.setattr(cli, "agent_factory", factory)


def _keys(value: Any) -> Iterator[str]:
    """Every key of every object in a JSON document (tool inputs are the model's, not ours)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            if key != "input":
                yield from _keys(item)
    elif isinstance(value, list):
        for item in value:
            yield from _keys(item)


# ------------------------------------------------------------------ the command line


def test_run_prints_the_cut_answer_and_a_marker_naming_max_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_project(tmp_path, {"llm": {"maxTokens": 16}})
    _agent_from(monkeypatch, CutScript())
    result = runner.invoke(cli.app, ["run", "-C", str(tmp_path), "-k", "cli:cut", "tell me everything"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == CUT_TEXT  # stdout stays the answer alone
    assert "answer cut" in result.stderr and "llm.maxTokens = 16" in result.stderr
    transcript = (tmp_path / ".ship" / "chats" / "cli%3Acut" / "history.jsonl").read_text()
    assert [json.loads(line)["text"] for line in transcript.splitlines()] == ["tell me everything", CUT_TEXT]


def test_run_prints_no_marker_for_a_whole_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_project(tmp_path, {"llm": {"maxTokens": 16}})
    _agent_from(monkeypatch, CutScript("all of it", length=False))
    result = runner.invoke(cli.app, ["run", "-C", str(tmp_path), "hi"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "all of it" and "answer cut" not in result.stderr


def test_run_json_says_length_in_camel_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_project(tmp_path, {})
    _agent_from(monkeypatch, CutScript())
    result = runner.invoke(cli.app, ["run", "-C", str(tmp_path), "--json", "hi"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["finishReason"] == "length" and data["output"] == CUT_TEXT and data["success"] is True
    assert set(data) == {
        "success",
        "output",
        "requestId",
        "finishReason",
        "hadToolFailure",
        "toolCalls",
        "usage",
    }
    assert set(data["usage"]) == {"requests", "inputTokens", "outputTokens", "toolCalls"}
    assert all("_" not in key for key in _keys(data)), sorted(_keys(data))


def test_run_json_tool_calls_are_camel_case_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic_ai.messages import ToolCallPart

    from tests.support.stream import StreamScript

    def reply(messages: Any, info: Any, n: int) -> ModelResponse:
        if n == 1:
            return ModelResponse(parts=[ToolCallPart("skills_list", {}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("listed")])

    script = StreamScript(reply)

    def factory(root: Path, *, model: Any = None, **kwargs: Any) -> ShipAgent:
        return ShipAgent.from_project(root, model=script.model, **kwargs)

    monkeypatch.setattr(cli, "agent_factory", factory)
    make_project(tmp_path, {})
    result = runner.invoke(cli.app, ["run", "-C", str(tmp_path), "--json", "list skills"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [c["tool"] for c in data["toolCalls"]] == ["skills_list"]
    assert data["usage"]["toolCalls"] == 1 and data["finishReason"] == "stop"
    assert all("_" not in key for key in _keys(data)), sorted(_keys(data))


def test_chat_marks_a_cut_answer_under_the_streamed_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_project(tmp_path, {"llm": {"maxTokens": 16}})
    _agent_from(monkeypatch, CutScript())
    result = runner.invoke(cli.app, ["chat", "-C", str(tmp_path), "-k", "cli:t"], input="go on\n/exit\n")
    assert result.exit_code == 0, result.output
    text, marker, usage = (result.output.index(s) for s in (CUT_TEXT, "✂ answer cut", "tokens in"))
    assert text < marker < usage  # the answer, then the marker, then the usage line
    assert "llm.maxTokens = 16" in result.output


# ------------------------------------------------------------------ the server


@pytest.fixture
def cut_server(tmp_path: Path) -> Iterator[str]:
    make_project(tmp_path, {"name": "cut-agent"})
    agent = ShipAgent.from_project(tmp_path, model=CutScript().model)
    from shipagent.hosts.serve import create_app

    with serving(create_app(agent)) as url:
        yield url


def _sse(url: str, path: str, body: dict[str, Any]) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = []
    name = ""
    with httpx.stream(
        "POST", url + path, json=body, headers={"Accept": "text/event-stream"}, timeout=30
    ) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((name, json.loads(line.removeprefix("data: "))))
    return events


def test_rest_and_sse_carry_finish_reason_length(cut_server: str) -> None:
    whole = httpx.post(cut_server + "/v1/chats/web:a/messages", json={"text": "hi"}, timeout=30).json()
    assert whole["finishReason"] == "length" and whole["output"] == CUT_TEXT

    events = _sse(cut_server, "/v1/chats/web:b/messages", {"text": "hi", "stream": True})
    assert "".join(d["text"] for n, d in events if n == "text_delta") == CUT_TEXT
    (done,) = [d for n, d in events if n == "done"]
    assert done["result"]["finishReason"] == "length" and done["result"]["success"] is True


def test_openai_sdk_sees_finish_reason_length(cut_server: str) -> None:
    client = openai.OpenAI(base_url=f"{cut_server}/v1", api_key="unused", max_retries=0)
    completion = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], user="web:c"
    )
    assert completion.choices[0].finish_reason == "length"
    assert completion.choices[0].message.content == CUT_TEXT

    chunks = list(
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], user="web:d", stream=True
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == CUT_TEXT
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["length"]


# ------------------------------------------------------------------ cut by the time limit


async def _stream_turn(agent: ShipAgent, chat_key: str, text: str) -> tuple[str, AgentResult]:
    streamed = ""
    result: AgentResult | None = None
    async with aclosing(agent.run_stream(chat_key, text)) as events:
        async for event in events:
            if isinstance(event, TextDelta):
                streamed += event.text
            elif isinstance(event, Done):
                result = event.result
    assert result is not None
    return streamed, result


@pytest.mark.anyio
async def test_a_stream_cut_by_the_time_limit_keeps_what_arrived(tmp_path: Path) -> None:
    make_project(tmp_path, {"llm": {"timeoutSeconds": 2}})
    script = CutScript(length=False, hang_after=3)
    agent = ShipAgent.from_project(tmp_path, model=script.model)
    async with agent:
        streamed, result = await _stream_turn(agent, "web:slow", "a long story please")
        assert streamed == script.streamed_before_the_hang() != ""
        assert result.success and result.finish_reason == "timeout" and result.cut
        assert result.output == streamed  # the answer is what the user saw
        assert result.usage.requests == 1

        # kept in the chat's history, so "continue" means something to the model
        history = agent.history("web:slow")
        assert user_texts(history) == ["a long story please"]
        last = history[-1]
        assert isinstance(last, ModelResponse) and last.state == "interrupted"
        assert [p.content for p in last.parts if isinstance(p, TextPart)] == [streamed]

        script.hang_after = None  # the next answer comes whole
        _, after = await _stream_turn(agent, "web:slow", "continue")
        assert after.finish_reason == "stop"
        seen = script.requests[-1]
        assert any(
            isinstance(m, ModelResponse)
            and any(isinstance(p, TextPart) and p.content == streamed for p in m.parts)
            for m in seen
        ), "the model was not shown the answer the time limit cut"

    entries = (tmp_path / ".ship" / "chats" / "web%3Aslow" / "history.jsonl").read_text().splitlines()
    assert [json.loads(e)["text"] for e in entries][:2] == ["a long story please", streamed]


@pytest.mark.anyio
async def test_a_time_limit_before_any_text_still_fails_and_keeps_nothing(tmp_path: Path) -> None:
    make_project(tmp_path, {"llm": {"timeoutSeconds": 1}})
    agent = ShipAgent.from_project(tmp_path, model=CutScript(length=False, hang_after=0).model)
    async with agent:
        streamed, result = await _stream_turn(agent, "web:mute", "hello?")
        assert streamed == ""
        assert not result.success and result.finish_reason == "error" and not result.cut
        assert result.output.startswith("The run failed")
        assert agent.history("web:mute") == []


def test_the_sse_stream_of_a_timed_out_answer_ends_in_a_done_marked_timeout(tmp_path: Path) -> None:
    make_project(tmp_path, {"llm": {"timeoutSeconds": 2}})
    script = CutScript(length=False, hang_after=2)
    agent = ShipAgent.from_project(tmp_path, model=script.model)
    from shipagent.hosts.serve import create_app

    with serving(create_app(agent)) as url:
        events = _sse(url, "/v1/chats/web:sse/messages", {"text": "hi", "stream": True})
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        chunks = list(
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], user="web:oai", stream=True
            )
        )
    streamed = "".join(d["text"] for n, d in events if n == "text_delta")
    assert streamed == script.streamed_before_the_hang()
    (done,) = [d for n, d in events if n == "done"]
    assert done["result"]["finishReason"] == "timeout" and done["result"]["output"] == streamed
    # OpenAI's vocabulary has no time limit: a cut answer is "length" there
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["length"]


# ------------------------------------------------------------------ the pure parts


def test_finish_reason_of_reads_the_last_response() -> None:
    from pydantic_ai.messages import ModelRequest, UserPromptPart

    from shipagent.agent._streaming import finish_reason_of

    asked = ModelRequest(parts=[UserPromptPart("q")])

    def said(**fields: Any) -> ModelResponse:
        return ModelResponse(parts=[TextPart("a")], **fields)

    assert finish_reason_of([asked]) == "stop"
    assert finish_reason_of([asked, said()]) == "stop"  # the provider did not say
    assert finish_reason_of([asked, said(finish_reason="tool_call"), said()]) == "stop"
    for reason in ("stop", "length", "content_filter", "error"):
        assert finish_reason_of([asked, said(finish_reason=reason)]) == reason
    assert finish_reason_of([said(finish_reason="length"), asked, said()]) == "stop"  # only the last counts
    assert finish_reason_of([asked, said(state="interrupted")]) == "timeout"


def test_keep_cut_answer_keeps_only_the_text_of_the_interrupted_response() -> None:
    from pydantic_ai.messages import ModelRequest, ToolCallPart, UserPromptPart

    from shipagent.agent._streaming import keep_cut_answer

    asked = ModelRequest(parts=[UserPromptPart("q")])
    partial = ModelResponse(
        parts=[TextPart("half an "), ToolCallPart("exec_shell", '{"comm'), TextPart("answer")],
        state="incomplete",
    )
    # pydantic-ai recorded it: that record is replaced
    recorded = ModelResponse(parts=partial.parts, state="interrupted", run_id="r1")
    messages, text = keep_cut_answer([asked, recorded], partial)
    assert text == "half an answer"
    assert messages[0] is asked and len(messages) == 2
    kept = messages[1]
    assert isinstance(kept, ModelResponse) and kept.run_id == "r1" and kept.state == "interrupted"
    assert all(isinstance(p, TextPart) for p in kept.parts)
    # nobody recorded it: the partial response is appended
    messages, text = keep_cut_answer([asked], partial)
    assert text == "half an answer" and len(messages) == 2
    assert isinstance(messages[1], ModelResponse) and messages[1].state == "interrupted"
