"""Bad input gets a 400 naming what is wrong, never a 500 or a lost turn; streams always end.

A real uvicorn server on 127.0.0.1 serving ``create_app``; a scripted model echoes, breaks
mid-stream, or holds its answer until the test lets it go. Bodies are sent as raw bytes, so the
test controls exactly what is on the wire (a lone ``\\ud800`` escape, 1,000 brackets, 5,000 digits).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent import ShipAgent
from shipagent.hosts.serve import create_app
from tests.support.core import make_project
from tests.support.serve import serving

JSON = {"Content-Type": "application/json"}
RELEASE = threading.Event()
WAIT = 30.0
"""Seconds any loop here waits for the server before the test fails."""


def _said(messages: list[ModelMessage]) -> str:
    for part in reversed(messages[-1].parts):
        if isinstance(part, UserPromptPart):
            return str(part.content)
    return ""


def _respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("echo: " + _said(messages))])


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    said = _said(messages)
    yield "echo: "
    if said == "break":
        raise RuntimeError("the model broke mid-stream")
    if said == "hold":  # until the test releases it (bounded: a stuck test still ends)
        await asyncio.to_thread(RELEASE.wait, WAIT)
    yield said


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, ShipAgent]]:
    RELEASE.clear()
    model = FunctionModel(_respond, stream_function=_stream, model_name="scripted")
    agent = ShipAgent.from_project(make_project(tmp_path), model=model)
    with serving(create_app(agent)) as url:
        yield url, agent
    RELEASE.set()


def _user_texts(url: str, chat: str) -> list[str]:
    entries = httpx.get(f"{url}/v1/chats/{chat}/transcript").json()["entries"]
    return [e["text"] for e in entries if e.get("role") == "user"]


def _post(url: str, path: str, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(url + path, content=body, headers={**JSON, **headers}, timeout=WAIT)


def _sse(response: httpx.Response) -> list[tuple[str | None, str]]:
    """(event, data) pairs of an SSE body."""
    events = []
    for block in response.text.split("\n\n"):
        if not block.strip() or block.startswith(":"):
            continue
        event, data = None, ""
        for line in block.split("\n"):
            if line.startswith("event: "):
                event = line[len("event: ") :]
            elif line.startswith("data: "):
                data = line[len("data: ") :]
        events.append((event, data))
    return events


# -- malformed JSON ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 1000 + b"]" * 1000,
        b'{"text": "hi", "x": ' + b"[" * 1000 + b"]" * 1000 + b"}",
        b'{"text": "hi", "x": ' + b'{"a": ' * 1000 + b"1" + b"}" * 1000 + b"}",
    ],
    ids=["top-level", "inside-a-field", "objects"],
)
def test_json_nested_1000_deep_is_a_400(server: tuple[str, ShipAgent], body: bytes) -> None:
    url, _ = server
    for path in ("/v1/chats/web%3Adeep/messages", "/v1/chat/completions", "/v1/approvals/x"):
        response = _post(url, path, body)
        assert response.status_code == 400, (path, response.text)
        error = response.json()["error"]
        assert error["type"] == "invalid_json" and "deeper than" in error["message"]
    assert _user_texts(url, "web:deep") == []
    assert httpx.get(f"{url}/healthz").status_code == 200


@pytest.mark.parametrize(
    ("literal", "says"),
    [
        (b"9" * 5000, "5000 characters"),
        (b"-" + b"1" * 5000, "5001 characters"),
        (b"1." + b"5" * 5000, "5002"),
    ],
)
def test_a_5000_digit_number_is_a_400(server: tuple[str, ShipAgent], literal: bytes, says: str) -> None:
    url, _ = server
    response = _post(url, "/v1/chats/web%3Anum/messages", b'{"text": "hi", "n": ' + literal + b"}")
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_json" and says in response.json()["error"]["message"]
    assert _user_texts(url, "web:num") == []


@pytest.mark.parametrize("body", [b'{"text": NaN}', b'{"text": "a", "x": Infinity}', b'{"text": "\xff"}'])
def test_json_that_is_not_json_is_a_400(server: tuple[str, ShipAgent], body: bytes) -> None:
    url, _ = server
    response = _post(url, "/v1/chats/web%3Anan/messages", body)
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_json"


# -- lone surrogates --------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_a_lone_surrogate_in_text_is_a_400_naming_the_field(
    server: tuple[str, ShipAgent], stream: bool
) -> None:
    url, _ = server
    body = b'{"text": "half an emoji \\ud83d", "stream": ' + (b"true" if stream else b"false") + b"}"
    response = _post(url, "/v1/chats/web%3Asur/messages", body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_text" and error["field"] == "text" and "'text'" in error["message"]
    # nothing ran, nothing was lost: the chat's next turn runs and is saved
    assert _user_texts(url, "web:sur") == []
    whole = _post(url, "/v1/chats/web%3Asur/messages", b'{"text": "a whole emoji \\ud83d\\ude00"}')
    assert whole.status_code == 200 and whole.json()["output"] == "echo: a whole emoji \U0001f600"
    assert _user_texts(url, "web:sur") == ["a whole emoji \U0001f600"]


@pytest.mark.parametrize(
    ("messages", "field"),
    [
        (b'[{"role": "user", "content": "x\\udc00"}]', "messages[0].content"),
        (
            b'[{"role": "system", "content": "ok"}, {"role": "user", "content": "x\\ud800y"}]',
            "messages[1].content",
        ),
        (
            b'[{"role": "user", "content": [{"type": "text", "text": "\\ud800"}]}]',
            "messages[0].content[0].text",
        ),
    ],
)
def test_a_lone_surrogate_in_chat_completions_names_the_field(
    server: tuple[str, ShipAgent], messages: bytes, field: str
) -> None:
    url, _ = server
    body = b'{"model": "m", "user": "web:oai", "messages": ' + messages + b"}"
    response = _post(url, "/v1/chat/completions", body)
    assert response.status_code == 400
    assert response.json()["error"]["field"] == field
    assert _user_texts(url, "web:oai") == []


# -- every stream ends ------------------------------------------------------------------------------


def test_a_native_stream_ends_with_done_even_when_the_model_breaks(server: tuple[str, ShipAgent]) -> None:
    url, _ = server
    fine = _post(url, "/v1/chats/web%3As/messages", b'{"text": "fine", "stream": true}')
    assert _sse(fine)[-1][0] == "done"
    broken = _post(url, "/v1/chats/web%3As/messages", b'{"text": "break", "stream": true}')
    event, data = _sse(broken)[-1]
    assert event == "done" and json.loads(data)["result"]["success"] is False
    assert _user_texts(url, "web:s") == ["fine"]


def test_a_stream_whose_turn_crashes_ends_with_error(server: tuple[str, ShipAgent], tmp_path: Path) -> None:
    url, _ = server
    chats = tmp_path / ".ship" / "chats"
    chats.parent.mkdir(exist_ok=True)
    chats.write_text("a file where the chat stores' directory belongs: every commit fails\n")
    native = _post(url, "/v1/chats/web%3Acrash/messages", b'{"text": "hi", "stream": true}')
    assert native.status_code == 200
    event, data = _sse(native)[-1]
    assert event == "error" and json.loads(data)["error"]["type"] == "turn_failed"
    body = b'{"user": "web:crash", "stream": true, "messages": [{"role": "user", "content": "hi"}]}'
    openai = _post(url, "/v1/chat/completions", body)
    events = _sse(openai)
    assert events[-1][1] == "[DONE]"
    assert "error" in json.loads(events[-2][1])
    assert httpx.get(f"{url}/healthz").json()["activeTurns"] == 0


# -- Idempotency-Key without a durable queue --------------------------------------------------------


def test_a_reused_idempotency_key_is_a_409_and_runs_one_turn(server: tuple[str, ShipAgent]) -> None:
    url, _ = server
    first = _post(url, "/v1/chats/web%3Aidem/messages", b'{"text": "once"}', **{"Idempotency-Key": "k-1"})
    assert first.status_code == 200 and first.json()["requestId"] == "k-1"
    again = _post(url, "/v1/chats/web%3Aidem/messages", b'{"text": "once"}', **{"Idempotency-Key": "k-1"})
    assert again.status_code == 409
    assert again.json()["error"]["type"] == "idempotency_key_reused"
    assert "transcript" in again.json()["error"]["message"]
    streamed = _post(
        url,
        "/v1/chats/web%3Aidem/messages",
        b'{"text": "once", "stream": true}',
        **{"Idempotency-Key": "k-1"},
    )
    assert streamed.status_code == 409
    body = b'{"user": "web:idem", "messages": [{"role": "user", "content": "once"}]}'
    assert _post(url, "/v1/chat/completions", body, **{"Idempotency-Key": "k-1"}).status_code == 409
    assert _user_texts(url, "web:idem") == ["once"]
    fresh = _post(url, "/v1/chats/web%3Aidem/messages", b'{"text": "twice"}', **{"Idempotency-Key": "k-2"})
    assert fresh.status_code == 200


def test_a_key_in_use_is_a_409_and_a_turn_its_client_left_frees_it(server: tuple[str, ShipAgent]) -> None:
    url, _ = server
    path = f"{url}/v1/chats/web%3Ahold/messages"
    headers = {**JSON, "Idempotency-Key": "k-hold"}
    stream_body = b'{"text": "hold", "stream": true}'
    with (
        httpx.Client(timeout=WAIT) as client,
        client.stream("POST", path, content=stream_body, headers=headers) as first,
    ):
        assert first.status_code == 200
        lines = first.iter_lines()  # kept: a dropped iterator closes the response
        next(lines)  # the turn is running
        busy = httpx.post(path, content=b'{"text": "hold"}', headers=headers, timeout=WAIT)
        assert busy.status_code == 409, busy.text
        assert busy.json()["error"]["type"] == "idempotency_key_in_use"
        # the client left mid-stream: the turn is cancelled, nothing committed, the key is free
    deadline = time.monotonic() + WAIT
    while httpx.get(f"{url}/healthz").json()["activeTurns"]:
        assert time.monotonic() < deadline, "the abandoned turn did not stop"
        time.sleep(0.05)
    assert _user_texts(url, "web:hold") == []
    RELEASE.set()
    retry = httpx.post(path, content=b'{"text": "hold"}', headers=headers, timeout=WAIT)
    assert retry.status_code == 200 and retry.json()["requestId"] == "k-hold"
    assert _user_texts(url, "web:hold") == ["hold"]


def test_a_failed_turn_frees_its_idempotency_key(server: tuple[str, ShipAgent]) -> None:
    """A turn whose model failed committed nothing: retrying it with the same key runs it."""
    url, _ = server
    key = {"Idempotency-Key": "k-retry"}
    failed = _post(url, "/v1/chats/web%3Aretry/messages", b'{"text": "break", "stream": true}', **key)
    assert json.loads(_sse(failed)[-1][1])["result"]["success"] is False
    assert _user_texts(url, "web:retry") == []
    retried = _post(url, "/v1/chats/web%3Aretry/messages", b'{"text": "break"}', **key)
    assert retried.status_code == 200 and retried.json()["success"] is True
    assert _post(url, "/v1/chats/web%3Aretry/messages", b'{"text": "break"}', **key).status_code == 409
    assert _user_texts(url, "web:retry") == ["break"]
