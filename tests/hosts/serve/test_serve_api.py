"""``shipagent.hosts.serve`` REST + SSE against a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import aconnect_sse, connect_sse

from shipagent import ShipAgent
from shipagent.hosts.serve import create_app
from tests.support.core import answer, has_tool_return, make_project, read_jsonl, tool_call, user_texts
from tests.support.serve import serving
from tests.support.stream import StreamScript

KEY = "web:alice"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, ShipAgent, StreamScript]]:
    script = StreamScript(chunk=3)
    agent = ShipAgent.from_project(make_project(tmp_path), model=script.model)
    with serving(create_app(agent)) as url:
        yield url, agent, script


def _events(client: httpx.Client, url: str, **body: Any) -> list[tuple[str, Any]]:
    with connect_sse(client, "POST", url, json=body) as source:
        assert source.response.headers["content-type"].startswith("text/event-stream")
        return [(e.event, json.loads(e.data)) for e in source.iter_sse()]


def test_post_message_returns_the_result_in_camel_case(server: tuple[str, ShipAgent, StreamScript]) -> None:
    url, agent, _ = server
    response = httpx.post(f"{url}/v1/chats/{KEY}/messages", json={"text": "hello"})
    assert response.status_code == 200
    body = response.json()
    assert body["success"] is True and body["output"] == "echo: hello"
    assert set(body) == {
        "success",
        "output",
        "requestId",
        "finishReason",
        "hadToolFailure",
        "toolCalls",
        "usage",
    }
    assert body["finishReason"] == "stop"
    assert body["usage"]["requests"] == 1 and body["usage"]["inputTokens"] > 0
    assert user_texts(agent.history(KEY)) == ["hello"]


def test_sse_one_event_per_run_event_and_done_last(server: tuple[str, ShipAgent, StreamScript]) -> None:
    url, _, script = server
    with httpx.Client() as client:
        events = _events(client, f"{url}/v1/chats/{KEY}/messages", text="stream this please")
        accept = client.post(
            f"{url}/v1/chats/{KEY}/messages",
            json={"text": "by header"},
            headers={"Accept": "text/event-stream"},
        )
    kinds = [kind for kind, _ in events]
    assert kinds.count("done") == 1 and kinds[-1] == "done"
    assert set(kinds[:-1]) == {"text_delta"} and len(kinds) > 3
    text = "".join(data["text"] for kind, data in events if kind == "text_delta")
    assert text == events[-1][1]["result"]["output"] == "echo: stream this please"
    assert accept.headers["content-type"].startswith("text/event-stream")
    assert "event: done" in accept.text
    assert script.streamed == [True, True]


def test_reads_transcript_pages_chats_and_context(server: tuple[str, ShipAgent, StreamScript]) -> None:
    url, agent, _ = server
    for key, text in (("web:bob", "b1"), (KEY, "a1"), (KEY, "a2"), (KEY, "a3")):
        assert httpx.post(f"{url}/v1/chats/{key}/messages", json={"text": text}).status_code == 200
        time.sleep(0.02)
    chats = httpx.get(f"{url}/v1/chats").json()
    assert [c["chatKey"] for c in chats["chats"]] == [KEY, "web:bob"]  # newest first
    page = httpx.get(f"{url}/v1/chats", params={"limit": 1}).json()
    assert [c["chatKey"] for c in page["chats"]] == [KEY] and page["nextOffset"] == 1
    page2 = httpx.get(f"{url}/v1/chats", params={"limit": 1, "offset": 1}).json()
    assert [c["chatKey"] for c in page2["chats"]] == ["web:bob"] and page2["nextOffset"] is None

    newest = httpx.get(f"{url}/v1/chats/{KEY}/transcript", params={"limit": 4}).json()
    assert [e["text"] for e in newest["entries"]] == ["a2", "echo: a2", "a3", "echo: a3"]  # newest last
    older = httpx.get(f"{url}/v1/chats/{KEY}/transcript", params={"before": newest["before"]}).json()
    assert [e["text"] for e in older["entries"]] == ["a1", "echo: a1"] and older["before"] is None
    unknown = httpx.get(f"{url}/v1/chats/web:nobody/transcript")
    assert unknown.status_code == 200 and unknown.json()["entries"] == []

    cleared = httpx.delete(f"{url}/v1/chats/{KEY}/context")
    assert cleared.json() == {"chatKey": KEY, "cleared": True}
    assert agent.history(KEY) == []
    assert len(httpx.get(f"{url}/v1/chats/{KEY}/transcript").json()["entries"]) == 6  # transcript kept


def test_context_files_list_and_page(server: tuple[str, ShipAgent, StreamScript]) -> None:
    url, agent, _ = server
    ref = agent.context_files.add_artifact(KEY, "line one\nline two\n" * 100, name="notes", source="test")
    listed = httpx.get(f"{url}/v1/chats/{KEY}/context-files").json()
    assert [f["id"] for f in listed["files"]] == [ref.id]
    page = httpx.get(f"{url}/v1/chats/{KEY}/context-files/{ref.id}", params={"offset": 9, "limit": 8}).json()
    assert page["content"] == "line two" and page["offset"] == 9 and page["nextOffset"] == 17
    missing = httpx.get(f"{url}/v1/chats/{KEY}/context-files/nope")
    assert missing.status_code == 404 and "nope" in missing.json()["error"]["message"]
    other = httpx.get(f"{url}/v1/chats/web:bob/context-files/{ref.id}")
    assert other.status_code == 404  # another chat's ids are not visible


@pytest.mark.parametrize(
    ("path", "body", "status", "kind", "words"),
    [
        (f"/v1/chats/{KEY}/messages", {}, 400, "invalid_request", "'text' must be a string (it is missing)"),
        (f"/v1/chats/{KEY}/messages", {"text": 5}, 400, "invalid_request", "(it is a int)"),
        (f"/v1/chats/{KEY}/messages", [1], 400, "invalid_request", "JSON object"),
        ("/v1/chats/a%00b/messages", {"text": "x"}, 400, "ChatKeyError", "control character"),
        (f"/v1/chats/{'k' * 600}/messages", {"text": "x"}, 400, "ChatKeyError", "limit is 512"),
        ("/v1/chat/completions", {"messages": []}, 400, "invalid_request", "non-empty list"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}]},
            400,
            "missing_chat_key",
            "X-Chat-Key header or the request's 'user' field",
        ),
    ],
)
def test_bad_requests_get_a_json_error_naming_what_is_wrong(
    server: tuple[str, ShipAgent, StreamScript], path: str, body: Any, status: int, kind: str, words: str
) -> None:
    url, _, script = server
    response = httpx.post(f"{url}{path}", json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["type"] == kind and words in error["message"]
    assert script.requests == []


def test_body_over_the_limit_is_413_and_nothing_runs(tmp_path: Path) -> None:
    make_project(tmp_path, {"serve": {"maxBodyBytes": 2048}})
    script = StreamScript()
    agent = ShipAgent.from_project(tmp_path, model=script.model)
    with serving(create_app(agent)) as url:
        big = httpx.post(f"{url}/v1/chats/{KEY}/messages", json={"text": "x" * 4000})

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted while reading
            yield b'{"text": "'
            for _ in range(10):
                yield b"y" * 500
            yield b'"}'

        chunked = httpx.post(
            f"{url}/v1/chats/{KEY}/messages",
            content=chunks(),
            headers={"Content-Type": "application/json"},
        )
        small = httpx.post(f"{url}/v1/chats/{KEY}/messages", json={"text": "x" * 1000})
    for response in (big, chunked):
        assert response.status_code == 413
        assert response.json()["error"]["type"] == "body_too_large"
        assert "2048" in response.json()["error"]["message"]
    assert small.status_code == 200 and len(script.requests) == 1


def test_unknown_route_and_method_are_json(server: tuple[str, ShipAgent, StreamScript]) -> None:
    url, _, _ = server
    assert httpx.get(f"{url}/v2/nothing").json()["error"]["type"] == "not_found"
    wrong = httpx.get(f"{url}/v1/chats/{KEY}/messages")
    assert wrong.status_code == 405 and wrong.json()["error"]["type"] == "method_not_allowed"
    health = httpx.get(f"{url}/healthz").json()
    assert health == {"status": "ok", "activeTurns": 0, "auth": False}
    assert httpx.get(url).status_code == 200  # the web page (or its placeholder)


def test_twenty_chats_five_turns_each_concurrently_keep_per_chat_order(tmp_path: Path) -> None:
    script = StreamScript(chunk=50, delay=0.001)
    agent = ShipAgent.from_project(make_project(tmp_path), model=script.model)
    with serving(create_app(agent)) as url:

        async def one_chat(client: httpx.AsyncClient, n: int) -> list[str]:
            outputs = []
            for turn in range(5):
                text = f"chat {n} turn {turn}"
                if turn % 2:
                    async with aconnect_sse(
                        client, "POST", f"{url}/v1/chats/web:{n}/messages", json={"text": text}
                    ) as source:
                        events = [e async for e in source.aiter_sse()]
                    outputs.append(json.loads(events[-1].data)["result"]["output"])
                else:
                    response = await client.post(f"{url}/v1/chats/web:{n}/messages", json={"text": text})
                    outputs.append(response.json()["output"])
            return outputs

        async def main() -> list[list[str]]:
            results: list[list[str]] = [[] for _ in range(20)]
            limits = httpx.Limits(max_connections=40)
            async with httpx.AsyncClient(timeout=60, limits=limits) as client:

                async def run(n: int) -> None:
                    results[n] = await one_chat(client, n)

                async with anyio.create_task_group() as group:
                    for n in range(20):
                        group.start_soon(run, n)
            return results

        results = anyio.run(main)
    for n in range(20):
        expected = [f"chat {n} turn {t}" for t in range(5)]
        assert results[n] == [f"echo: {t}" for t in expected]
        assert user_texts(agent.history(f"web:{n}")) == expected
        transcript = read_jsonl(agent.transcript.path(f"web:{n}"))
        assert [e["text"] for e in transcript if e["role"] == "user"] == expected


def test_turns_of_one_chat_queue_while_other_chats_run(tmp_path: Path) -> None:
    gate = threading.Event()

    def reply(messages, info, n):  # type: ignore[no-untyped-def]
        said = user_texts(messages)[-1]
        if said == "first":
            gate.wait(10)
        return answer(f"echo: {said}")

    script = StreamScript(reply)
    agent = ShipAgent.from_project(make_project(tmp_path), model=script.model)
    with serving(create_app(agent)) as url, httpx.Client(timeout=30) as client:
        done: list[str] = []

        def post(key: str, text: str) -> None:
            done.append(client.post(f"{url}/v1/chats/{key}/messages", json={"text": text}).json()["output"])

        first = threading.Thread(target=post, args=(KEY, "first"))
        first.start()
        deadline = time.monotonic() + 10
        while not script.requests and time.monotonic() < deadline:  # "first" holds the chat now
            time.sleep(0.01)
        second = threading.Thread(target=post, args=(KEY, "second"))
        second.start()
        post("web:other", "independent")  # another chat is not held up
        assert done == ["echo: independent"]
        gate.set()
        first.join(10)
        second.join(10)
    assert done[1:] == ["echo: first", "echo: second"]
    assert user_texts(agent.history(KEY)) == ["first", "second"]


def test_disconnect_mid_stream_cancels_the_turn_and_the_chat_stays_usable(tmp_path: Path) -> None:
    script = StreamScript(lambda m, i, n: answer("a long streamed answer " * 30), chunk=2, delay=0.02)
    agent = ShipAgent.from_project(make_project(tmp_path), model=script.model)
    with serving(create_app(agent)) as url:
        assert httpx.post(f"{url}/v1/chats/{KEY}/messages", json={"text": "before"}).status_code == 200
        history = user_texts(agent.history(KEY))
        messages = f"{url}/v1/chats/{KEY}/messages"
        with httpx.Client() as client, connect_sse(client, "POST", messages, json={"text": "gone"}) as source:
            for event in source.iter_sse():
                if event.event == "text_delta":
                    break  # the client leaves: the connection closes
        deadline = time.monotonic() + 10
        while httpx.get(f"{url}/healthz").json()["activeTurns"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert httpx.get(f"{url}/healthz").json()["activeTurns"] == 0  # the turn ended with the client
        sent = script.chunks_sent
        time.sleep(0.3)
        assert script.chunks_sent == sent  # and the model stream with it
        assert sent < len("a long streamed answer " * 30) // 2  # long before the answer was complete
        assert user_texts(agent.history(KEY)) == history
        script.delay = 0
        after = httpx.post(f"{url}/v1/chats/{KEY}/messages", json={"text": "after"})
    assert after.json()["success"]
    assert user_texts(agent.history(KEY)) == ["before", "after"]
    transcript = [e["text"] for e in read_jsonl(agent.transcript.path(KEY)) if e["role"] == "user"]
    assert transcript == ["before", "after"]


def _shell_script() -> StreamScript:
    def reply(messages, info, n):  # type: ignore[no-untyped-def]
        if has_tool_return(messages):
            return answer("finished")
        return tool_call("exec_shell", {"command": "echo approved > approved.txt"}, "c1")

    return StreamScript(reply)


def test_approval_round_trip_over_http(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    agent = ShipAgent.from_project(root, model=_shell_script().model)
    with serving(create_app(agent)) as url, httpx.Client(timeout=30) as client:
        seen: list[tuple[str, Any]] = []
        with connect_sse(client, "POST", f"{url}/v1/chats/{KEY}/messages", json={"text": "do it"}) as source:
            for event in source.iter_sse():
                data = json.loads(event.data)
                seen.append((event.event, data))
                if event.event == "approval_required":
                    assert data["tool"] == "exec_shell" and data["command"] == "echo approved > approved.txt"
                    bad = client.post(f"{url}/v1/approvals/{data['approvalId']}", json={"approve": "yes"})
                    assert bad.status_code == 400
                    ok = client.post(f"{url}/v1/approvals/{data['approvalId']}", json={"approve": True})
                    assert ok.json() == {"approvalId": data["approvalId"], "approved": True, "chatKey": KEY}
                    again = client.post(f"{url}/v1/approvals/{data['approvalId']}", json={"approve": True})
                    assert again.status_code == 404
    kinds = [kind for kind, _ in seen]
    assert kinds[:3] == ["tool_started", "approval_required", "tool_finished"]
    assert seen[2][1]["success"] is True
    assert (root / "approved.txt").read_text() == "approved\n"


def test_unanswered_or_non_streamed_approvals_are_refused(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"serve": {"approvalTimeoutSeconds": 0.2}})
    agent = ShipAgent.from_project(root, model=_shell_script().model)
    with serving(create_app(agent)) as url, httpx.Client(timeout=30) as client:
        events = _events(client, f"{url}/v1/chats/{KEY}/messages", text="do it")
        plain = client.post(f"{url}/v1/chats/web:plain/messages", json={"text": "do it"}).json()
    finished = next(data for kind, data in events if kind == "tool_finished")
    assert finished["success"] is False and "no answer within 0.2 s" in finished["summary"]
    assert plain["toolCalls"][0]["success"] is False
    assert "no approval callback" in plain["toolCalls"][0]["error"]
    assert not (root / "approved.txt").exists()
