"""Turns of one chat key never interleave; turns of different chat keys run concurrently."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.support.core import make_agent, make_project, render, user_texts


@pytest.mark.anyio
async def test_two_runs_on_one_key_serialise(tmp_path: Path) -> None:
    log: list[tuple[str, str, float]] = []
    seen: dict[str, list[str]] = {}

    async def model_fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        text = user_texts(messages)[-1]
        seen[text] = user_texts(messages)
        log.append(("start", text, time.monotonic()))
        await anyio.sleep(0.15)  # a slow model: plenty of time for the other run to sneak in
        log.append(("end", text, time.monotonic()))
        return ModelResponse(parts=[TextPart(f"reply to {text}")])

    agent = make_agent(make_project(tmp_path), FunctionModel(model_fn))
    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.run, "same", "first")
        await anyio.sleep(0.01)
        tg.start_soon(agent.run, "same", "second")

    assert [(kind, text) for kind, text, _ in log] == [
        ("start", "first"),
        ("end", "first"),
        ("start", "second"),
        ("end", "second"),
    ]
    first_end = log[1][2]
    second_start = log[2][2]
    assert second_start >= first_end
    # The second run saw the first one committed, so the history is one clean sequence.
    assert seen["second"] == ["first", "second"]
    assert render(agent.history("same")) == [
        ("request", "user-prompt", "first"),
        ("response", "text", "reply to first"),
        ("request", "user-prompt", "second"),
        ("response", "text", "reply to second"),
    ]


@pytest.mark.anyio
async def test_two_runs_on_two_keys_overlap(tmp_path: Path) -> None:
    started = {"alpha": anyio.Event(), "beta": anyio.Event()}
    log: list[tuple[str, str]] = []

    async def model_fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        me = user_texts(messages)[-1]
        other = "beta" if me == "alpha" else "alpha"
        log.append(("start", me))
        started[me].set()
        # Each run waits inside its model call until the other run is inside its own: this only
        # completes if the two turns really run at the same time.
        with anyio.fail_after(5):
            await started[other].wait()
        log.append(("end", me))
        return ModelResponse(parts=[TextPart(f"{me} done")])

    agent = make_agent(make_project(tmp_path), FunctionModel(model_fn))
    results = {}

    async def run(key: str) -> None:
        results[key] = await agent.run(f"chat:{key}", key)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "alpha")
            tg.start_soon(run, "beta")

    assert all(r.success for r in results.values()), results
    assert {kind for kind, _ in log[:2]} == {"start"}  # both started before either finished
    assert render(agent.history("chat:alpha"))[-1] == ("response", "text", "alpha done")
    assert render(agent.history("chat:beta"))[-1] == ("response", "text", "beta done")


@pytest.mark.anyio
async def test_many_runs_on_one_key_keep_every_turn_in_order(tmp_path: Path) -> None:
    async def model_fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await anyio.lowlevel.checkpoint()
        return ModelResponse(parts=[TextPart(f"reply {user_texts(messages)[-1]}")])

    root = make_project(tmp_path)
    agent = make_agent(root, FunctionModel(model_fn))
    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(agent.run, "busy", f"m{i}")
    history = agent.history("busy")
    assert len(history) == 20
    # Requests and replies alternate and every reply answers the request just before it.
    rendered = render(history)
    for request, reply in zip(rendered[::2], rendered[1::2], strict=True):
        assert request[1] == "user-prompt" and reply[2] == f"reply {request[2]}"
    assert sorted(user_texts(history)) == sorted(f"m{i}" for i in range(10))
    assert user_texts(make_agent(root, FunctionModel(model_fn)).history("busy")) == user_texts(history)
