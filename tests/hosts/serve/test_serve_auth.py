"""API keys scoped to chat-key globs, the loopback rule, and keys kept out of logs."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import connect_sse
from typer.testing import CliRunner

from shipagent import ConfigError, ShipAgent
from shipagent.hosts.cli import _app as cli
from shipagent.hosts.serve import Auth, create_app
from tests.support.core import answer, has_tool_return, make_project, tool_call
from tests.support.serve import serving
from tests.support.stream import StreamScript

K_ALL = "all-chats-key-0123456789"
K_WEB = "web-only-key-0123456789ab"
K_TG = "telegram-key-0123456789abc"
KEYS: list[Any] = [
    {"key": K_ALL},
    {"key": K_WEB, "chatKeys": ["web:*"]},
    {"key": K_TG, "chatKeys": ["telegram:*"]},
]


def _bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, ShipAgent]]:
    def reply(messages, info, n):  # type: ignore[no-untyped-def]
        said = str(messages[-1].parts[-1].content) if messages else ""
        if "shell" in said and not has_tool_return(messages):
            return tool_call("exec_shell", {"command": "echo hi"}, "c1")
        return answer("ok")

    agent = ShipAgent.from_project(make_project(tmp_path), model=StreamScript(reply).model)
    with serving(create_app(agent, api_keys=KEYS)) as url:
        yield url, agent


ENDPOINTS = [
    ("POST", "/v1/chats/{chat}/messages", {"text": "hi"}),
    ("GET", "/v1/chats/{chat}/transcript", None),
    ("DELETE", "/v1/chats/{chat}/context", None),
    ("GET", "/v1/chats/{chat}/context-files", None),
    ("GET", "/v1/chats/{chat}/context-files/a123", None),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "user": "{chat}"}),
]


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
def test_auth_matrix(server: tuple[str, ShipAgent], method: str, path: str, body: Any) -> None:
    url, _ = server
    chat = "web:alice"
    target = url + path.format(chat=chat)
    payload = json.loads(json.dumps(body).replace("{chat}", chat)) if body else None
    with httpx.Client(timeout=30) as client:

        def call(key: str | None) -> httpx.Response:
            return client.request(method, target, json=payload, headers=_bearer(key))

        for key in (None, "wrong-key-0123456789abcdef", K_WEB[:-1]):
            denied = call(key)
            assert denied.status_code == 401, (key, denied.text)
            assert denied.headers["www-authenticate"] == "Bearer"
            assert denied.json()["error"]["type"] == "unauthorized"
        other = call(K_TG)
        assert other.status_code == 403 and "may not use chat 'web:alice'" in other.json()["error"]["message"]
        for key in (K_WEB, K_ALL):
            allowed = call(key)
            assert allowed.status_code in (200, 404), allowed.text  # 404: that context file does not exist
            assert allowed.status_code == 200 or allowed.json()["error"]["type"] == "not_found"


def test_listing_is_filtered_by_the_keys_patterns(server: tuple[str, ShipAgent]) -> None:
    url, _ = server
    for chat in ("web:alice", "web:bob", "telegram:chat:42", "api:x"):
        posted = httpx.post(f"{url}/v1/chats/{chat}/messages", json={"text": "hi"}, headers=_bearer(K_ALL))
        assert posted.status_code == 200

    def listed(key: str | None) -> Any:
        response = httpx.get(f"{url}/v1/chats", headers=_bearer(key))
        return response.json() if response.status_code == 200 else response.status_code

    assert sorted(c["chatKey"] for c in listed(K_WEB)["chats"]) == ["web:alice", "web:bob"]
    assert [c["chatKey"] for c in listed(K_TG)["chats"]] == ["telegram:chat:42"]
    assert len(listed(K_ALL)["chats"]) == 4
    assert listed(None) == 401 and listed("nope-nope-nope-nope") == 401
    assert httpx.get(f"{url}/v1/models").status_code == 401
    assert httpx.get(f"{url}/v1/models", headers=_bearer(K_TG)).status_code == 200
    assert httpx.get(f"{url}/healthz").json()["auth"] is True  # health needs no key


def test_only_the_key_that_started_a_turn_may_answer_its_approval(server: tuple[str, ShipAgent]) -> None:
    url, _ = server
    answers: dict[str, int] = {}
    with httpx.Client(timeout=30) as client:
        messages = f"{url}/v1/chats/web:alice/messages"
        with connect_sse(
            client, "POST", messages, json={"text": "shell please"}, headers=_bearer(K_WEB)
        ) as source:
            for event in source.iter_sse():
                if event.event == "approval_required":
                    approval = f"{url}/v1/approvals/{json.loads(event.data)['approvalId']}"
                    for name, key in (("none", None), ("all", K_ALL), ("tg", K_TG), ("web", K_WEB)):
                        response = client.post(approval, json={"approve": False}, headers=_bearer(key))
                        answers[name] = response.status_code
    assert answers == {"none": 401, "all": 403, "tg": 403, "web": 200}


def test_without_keys_only_loopback_clients_are_answered(tmp_path: Path) -> None:
    agent = ShipAgent.from_project(make_project(tmp_path), model=StreamScript().model)
    app = create_app(agent)

    async def ask(client_host: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=app, client=(client_host, 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return await client.get("/v1/chats")

    remote = anyio.run(ask, "192.0.2.7")
    local = anyio.run(ask, "127.0.0.1")
    assert remote.status_code == 403 and "answers local clients only" in remote.json()["error"]["message"]
    assert local.status_code == 200


def test_serve_refuses_a_public_host_without_keys(tmp_path: Path) -> None:
    make_project(tmp_path, {"llm": {"model": "test"}})
    result = CliRunner().invoke(cli.app, ["serve", "-C", str(tmp_path), "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert "refusing to listen on 0.0.0.0 without API keys" in result.output
    assert "serve.apiKeys" in result.output


def test_keys_come_from_ship_json_with_variables_and_short_keys_are_rejected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEB_KEY", K_WEB)
    make_project(tmp_path, {"serve": {"apiKeys": [{"key": "${WEB_KEY}", "chatKeys": ["web:*"]}]}})
    agent = ShipAgent.from_project(tmp_path, model=StreamScript().model)
    key = Auth(agent.config.serve.api_keys).authenticate(f"Bearer {K_WEB}")
    assert key is not None and key.allows("web:x") and not key.allows("api:x")
    assert K_WEB not in repr(agent.config)
    make_project(tmp_path, {"serve": {"apiKeys": [{"key": "short"}]}})
    with pytest.raises(ConfigError, match=r"serve\.apiKeys\[0\]\.key"):
        ShipAgent.from_project(tmp_path)


def test_authenticate_compares_every_key_and_accepts_only_bearer() -> None:
    auth = Auth(KEYS)
    assert auth.authenticate(f"Bearer {K_TG}").index == 2  # type: ignore[union-attr]
    assert auth.authenticate(f"bearer {K_ALL}").index == 0  # type: ignore[union-attr]
    for header in (None, "", K_ALL, f"Basic {K_ALL}", "Bearer ", f"Bearer {K_ALL}x"):
        assert auth.authenticate(header) is None


def test_access_log_has_one_line_per_request_and_never_a_key(
    server: tuple[str, ShipAgent], caplog: pytest.LogCaptureFixture
) -> None:
    url, _ = server
    caplog.set_level(logging.INFO, logger="shipagent.hosts.serve")
    httpx.post(f"{url}/v1/chats/web:alice/messages", json={"text": "secret body"}, headers=_bearer(K_WEB))
    httpx.get(f"{url}/v1/chats?limit=5", headers=_bearer(K_ALL))
    httpx.get(f"{url}/v1/chats", headers=_bearer("a-wrong-key-that-must-not-be-logged"))

    def access_lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "shipagent.hosts.serve.access"]

    deadline = time.monotonic() + 30  # a line is written as its response ends, maybe after the client has it
    while len(access_lines()) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = access_lines()
    assert len(lines) == 3
    assert lines[0].startswith("127.0.0.1 POST /v1/chats/web:alice/messages 200 ")
    assert " GET /v1/chats 200 " in lines[1] and " GET /v1/chats 401 " in lines[2]
    everything = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (K_WEB, K_ALL, "a-wrong-key-that-must-not-be-logged", "secret body"):
        assert secret not in everything


def test_check_reports_who_serve_would_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_project(tmp_path, {"llm": {"model": "test"}})
    plain = CliRunner().invoke(cli.app, ["check", "-C", str(tmp_path)])
    assert "serve: no API keys (serve.apiKeys): `shipagent serve` listens on loopback only" in plain.output
    monkeypatch.setenv("WEB_KEY", K_WEB)
    keys = [{"key": "${WEB_KEY}", "chatKeys": ["web:*"]}, {"key": K_ALL}]
    make_project(tmp_path, {"llm": {"model": "test"}, "serve": {"apiKeys": keys}})
    keyed = CliRunner().invoke(cli.app, ["check", "-C", str(tmp_path)])
    assert "serve: 2 API key(s) for chats *, web:*" in keyed.output
    assert K_WEB not in keyed.output and K_ALL not in keyed.output


def test_serve_keys_are_in_the_ship_json_schema() -> None:
    from shipagent import ShipConfig

    schema = ShipConfig.model_json_schema(by_alias=True)
    serve = schema["$defs"]["ServeConfig"]["properties"]
    assert set(serve) == {
        "apiKeys",
        "shutdownGraceSeconds",
        "approvalTimeoutSeconds",
        "maxBodyBytes",
        "allowedHosts",
        "corsOrigins",
        "limits",
    }
    assert schema["properties"]["serve"]["$ref"].endswith("/ServeConfig")
