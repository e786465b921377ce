"""Failures inside a run: context overflow retries, model errors, tool crashes."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai.exceptions import ModelContextWindowExceededError, ModelHTTPError
from pydantic_ai.messages import ModelMessage, ToolReturnPart

from shipagent import AgentResult, ShipAgent, StepEvent
from shipagent.agent._agent import MAX_OVERFLOW_RETRIES, is_context_overflow
from shipagent.window.compaction import is_summary
from tests.support.core import (
    ScriptedModel,
    answer,
    dump,
    has_tool_return,
    make_agent,
    make_project,
    render,
    tool_call,
    user_texts,
)

MARKS = {"context": {"chatHistory": {"inMemoryMaxMessages": 60, "compactKeepLastMessages": 30}}}
"""The marks these scenarios count with (a 60-message chat compacting to 30)."""


def overflow_error() -> ModelHTTPError:
    return ModelHTTPError(400, "m", body={"error": {"code": "context_length_exceeded"}})


class Switchable:
    """A model that answers normally, or overflows while the request has more than ``limit`` user texts."""

    def __init__(self) -> None:
        self.limit: int | None = None
        self.calls: list[list[ModelMessage]] = []
        self.scripted = ScriptedModel(self._reply)

    def _reply(self, messages, info, n):  # type: ignore[no-untyped-def]
        self.calls.append(messages)
        if self.limit is not None and len(user_texts(messages)) > self.limit:
            raise overflow_error()
        return answer(f"echo: {user_texts(messages)[-1]}")


def _files(root: Path) -> dict[str, bytes]:
    ship = root / ".ship"
    return {str(p.relative_to(ship)): p.read_bytes() for p in sorted(ship.rglob("*")) if p.is_file()}


def test_overflow_detection() -> None:
    assert is_context_overflow(overflow_error())
    assert is_context_overflow(ModelHTTPError(400, "m", body={"message": "maximum context length is 8192"}))
    # llama.cpp's server, as it answers a prompt longer than its context
    llama = {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": 8233, "n_ctx": 8192}
    assert is_context_overflow(ModelHTTPError(400, "m", body={"error": llama}))
    assert not is_context_overflow(ModelHTTPError(400, "m", body={"error": {"code": "invalid_request"}}))
    assert not is_context_overflow(ModelHTTPError(500, "m", body="context_length_exceeded? no, a 500"))
    assert not is_context_overflow(RuntimeError("context_length_exceeded"))


@pytest.mark.anyio
async def test_overflow_retries_with_a_compacted_history_then_succeeds(tmp_path: Path) -> None:
    root = make_project(tmp_path, MARKS)
    model = Switchable()
    agent = make_agent(root, model.scripted.model)
    for i in range(20):  # 40 messages: under the 60 bound, nothing compacted yet
        assert (await agent.run("k", f"m{i}")).success
    assert not is_summary(agent.history("k")[0])

    # From now on the provider rejects any request holding more than 5 user messages. The retries
    # keep the last 30>>1 = 15 messages (7 user texts + the new one: still too long), then the
    # last 30>>2 = 7 (3 user texts + the new one: fits).
    model.limit = 5
    model.calls.clear()
    events: list[StepEvent] = []
    result = await agent.run("k", "after overflow", on_step=events.append)
    assert result.success, result.output
    assert result.output == "echo: after overflow"
    assert len(model.calls) == 3
    assert [len(user_texts(c)) for c in model.calls] == [21, 8, 4]
    assert user_texts(model.calls[-1]) == ["m17", "m18", "m19", "after overflow"]

    history = agent.history("k")
    assert is_summary(history[0])
    assert user_texts(history) == ["m17", "m18", "m19", "after overflow"]
    assert [e.type for e in events] == ["assistant", "compaction", "done"]
    assert events[1].data == {"removed": 33, "kept": 7, "summarizer": "extract", "summaryId": "S0-32"}

    # The compaction was persisted: a new process rebuilds the same history.
    restarted = ShipAgent.from_project(root, model=model.scripted.model)
    assert dump(restarted.history("k")) == dump(history)
    # The summary is sent first on the next turn, and the next turn fits again.
    assert (await agent.run("k", "next")).success
    assert render(model.calls[-1])[0][2].startswith("[Summary of the earlier conversation: 33 older")


@pytest.mark.anyio
async def test_overflow_that_never_goes_away_fails_cleanly_with_history_intact(tmp_path: Path) -> None:
    root = make_project(tmp_path, MARKS)
    model = Switchable()
    agent = make_agent(root, model.scripted.model)
    for i in range(5):
        assert (await agent.run("k", f"m{i}")).success
    before_memory = dump(agent.history("k"))
    before_disk = _files(root)

    model.limit = 0  # every request overflows
    model.calls.clear()
    events: list[StepEvent] = []
    result = await agent.run("k", "too much", on_step=events.append)
    assert isinstance(result, AgentResult)
    assert result.success is False
    assert len(model.calls) == 1 + MAX_OVERFLOW_RETRIES == 4
    assert "no longer fits the model's context window" in result.output
    assert "after compacting 3 times" in result.output
    assert "history is unchanged" in result.output
    assert result.tool_calls == [] and result.request_id
    assert [(e.type, e.data.get("success")) for e in events] == [("done", False)]

    assert dump(agent.history("k")) == before_memory
    assert _files(root) == before_disk
    restarted = ShipAgent.from_project(root, model=model.scripted.model)
    assert dump(restarted.history("k")) == before_memory


@pytest.mark.anyio
async def test_overflow_on_a_new_chat_fails_cleanly(tmp_path: Path) -> None:
    model = Switchable()
    model.limit = 0
    agent = make_agent(make_project(tmp_path, MARKS), model.scripted.model)
    result = await agent.run("fresh", "hello")
    assert not result.success and len(model.calls) == 4
    assert agent.history("fresh") == []
    assert not (tmp_path / ".ship" / "chats").exists() or not any((tmp_path / ".ship" / "chats").iterdir())


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("error", "says", "attempts"),
    [
        (
            ModelHTTPError(500, "m", body={"error": {"message": "upstream exploded"}}),
            ["failed (HTTP 500)", "upstream exploded", "tried 2 times"],
            2,  # a server error may pass: retried llm.maxRetries (1) times
        ),
        (
            ModelHTTPError(401, "m", body={"error": {"message": "invalid api key"}}),
            ["rejected the API key (HTTP 401)", "OPENAI_API_KEY or llm.apiKey"],
            1,  # a wrong key does not get better by asking again
        ),
        (RuntimeError("connection reset by peer"), ["RuntimeError: connection reset by peer"], 1),
    ],
    ids=["http-500", "http-401", "runtime"],
)
async def test_model_error_is_a_failed_result_and_history_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception, says: list[str], attempts: int
) -> None:
    monkeypatch.setattr("shipagent.agent._retry.RETRY_BASE_DELAY", 0.0)
    root = make_project(tmp_path, MARKS)
    fail = {"on": False}

    def reply(messages, info, n):  # type: ignore[no-untyped-def]
        if fail["on"]:
            raise error
        return answer("fine")

    scripted = ScriptedModel(reply)
    agent = make_agent(root, scripted.model)
    assert (await agent.run("k", "first")).success
    before_memory, before_disk = dump(agent.history("k")), _files(root)
    calls_before = len(scripted.requests)

    fail["on"] = True
    result = await agent.run("k", "second")
    assert result.success is False
    assert result.output.startswith("The run failed: ")
    for fragment in says:
        assert fragment in result.output
    assert result.output.endswith("The chat's history is unchanged.")
    assert len(scripted.requests) == calls_before + attempts  # not an overflow: no compaction retry
    assert dump(agent.history("k")) == before_memory
    assert _files(root) == before_disk

    # The chat keeps working once the model does.
    fail["on"] = False
    assert (await agent.run("k", "third")).success
    assert user_texts(agent.history("k")) == ["first", "third"]


def explode(reason: str) -> str:
    raise ValueError(f"boom: {reason}")


def fine() -> str:
    return "all good"


def report_failure() -> dict[str, object]:
    return {"success": False, "error": "disk full"}


@pytest.mark.anyio
async def test_a_tool_that_raises_does_not_end_the_run(tmp_path: Path) -> None:
    def reply(messages, info, n):  # type: ignore[no-untyped-def]
        if n == 1:
            return tool_call("explode", {"reason": "no network"}, call_id="c1")
        if n == 2:
            return tool_call("fine", call_id="c2")
        if n == 3:
            return tool_call("report_failure", call_id="c3")
        assert has_tool_return(messages)
        return answer("I could not fetch it, but here is what I know.")

    scripted = ScriptedModel(reply)
    agent = make_agent(make_project(tmp_path, MARKS), scripted.model, [explode, fine, report_failure])
    steps: list[StepEvent] = []
    result = await agent.run("k", "fetch it", on_step=steps.append)

    assert result.success is True
    assert result.had_tool_failure is True
    assert [(r.tool, r.success) for r in result.tool_calls] == [
        ("explode", False),
        ("fine", True),
        ("report_failure", False),
    ]
    exploded, ok, reported = result.tool_calls
    assert exploded.input == {"reason": "no network"}
    assert exploded.error is not None and "ValueError: boom: no network" in exploded.error
    assert ok.output == "all good" and ok.error is None
    assert reported.error == "disk full"
    assert result.output.startswith("I could not fetch it, but here is what I know.")
    assert "Tool errors:" in result.output
    assert "- explode: explode failed: ValueError: boom: no network" in result.output
    assert "- report_failure: disk full" in result.output

    # The model saw the failure as data on its next request.
    [failure] = [p for m in scripted.requests[1] for p in m.parts if isinstance(p, ToolReturnPart)]
    assert failure.content == {"success": False, "error": "explode failed: ValueError: boom: no network"}
    assert [e.text for e in steps if e.type == "step_finish"] == [
        "explode: failed: explode failed: ValueError: boom: no network",
        "fine: done",
        "report_failure: failed: disk full",
    ]
    # The failed call is history like any other.
    assert len(agent.history("k")) == 8


def test_context_window_exceeded_error_class_is_an_overflow() -> None:
    assert is_context_overflow(ModelContextWindowExceededError(model_name="m", message="input too long"))


@pytest.mark.anyio
async def test_overflow_with_a_short_history_folds_all_of_it(tmp_path: Path) -> None:
    # 3 turns = 6 messages, fewer than any keep window: the retry folds the whole history into the
    # summary, and the request that fits is [summary, new user message].
    root = make_project(tmp_path, MARKS)
    model = Switchable()
    agent = make_agent(root, model.scripted.model)
    for i in range(3):
        assert (await agent.run("k", f"m{i}")).success
    model.limit = 1
    model.calls.clear()
    result = await agent.run("k", "now")
    assert result.success, result.output
    assert [len(user_texts(c)) for c in model.calls] == [4, 1]
    history = agent.history("k")
    assert is_summary(history[0]) and user_texts(history) == ["now"]
    assert "user: m0" in history[0].parts[0].content  # the folded turns live on in the summary
    assert dump(ShipAgent.from_project(root, model=model.scripted.model).history("k")) == dump(history)


@pytest.mark.anyio
async def test_on_step_may_be_async_and_its_exceptions_are_swallowed(tmp_path: Path) -> None:
    seen: list[str] = []

    async def async_steps(event: StepEvent) -> None:
        seen.append(event.type)

    def broken_steps(event: StepEvent) -> None:
        raise RuntimeError("the UI went away")

    agent = make_agent(make_project(tmp_path, MARKS), ScriptedModel().model)
    assert (await agent.run("k", "one", on_step=async_steps)).success
    assert seen == ["assistant", "done"]
    result = await agent.run("k", "two", on_step=broken_steps)
    assert result.success and result.output == "echo: two"
    assert user_texts(agent.history("k")) == ["one", "two"]
