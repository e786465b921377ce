"""``shipagent check`` asks the model server once: a stopped server, a refused key and an unknown
model are errors in our words (exit 1); a healthy server passes; ``--offline`` asks nothing.

The servers are real HTTP servers on 127.0.0.1 (``http.server`` in a thread) and the real
``openai`` SDK talks to them, so connection errors, status codes and timeouts are the real ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.models.test import TestModel
from typer.testing import CliRunner

from shipagent.config import LlmConfig
from shipagent.hosts.cli import _app as cli
from shipagent.hosts.cli._probe import PROBES, ProbeReport, probe_model_server, shown_url
from tests.support.fake_openai import closed_port, completion

runner = CliRunner()
SHIPAGENT = str(Path(sys.executable).with_name("shipagent"))
KEY = "sk-probe-secret-4711"
Reply = tuple[int, dict[str, Any]] | str  # (status, JSON body) or "hang"


def models(*ids: str) -> tuple[int, dict[str, Any]]:
    return 200, {
        "object": "list",
        "data": [{"id": i, "object": "model", "created": 0, "owned_by": "x"} for i in ids],
    }


def failure(status: int, message: str, code: str | None = None) -> tuple[int, dict[str, Any]]:
    return status, {"error": {"message": message, "type": "invalid_request_error", "code": code}}


@dataclass
class Stub:
    """What the stub answers to ``GET /v1/models`` and ``POST /v1/chat/completions``; what it was asked."""

    list_reply: Reply
    chat_reply: Reply = field(default_factory=lambda: completion("p"))
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


@contextmanager
def stub_server(stub: Stub) -> Iterator[Stub]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def answer(self, reply: Reply) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            auth = self.headers.get("authorization") or ""
            stub.requests.append(
                {"method": self.command, "path": self.path, "auth": auth, "body": json.loads(body or b"null")}
            )
            if reply == "hang":
                stub.release.wait(30)
                return
            assert not isinstance(reply, str)
            status, data = reply
            if status in (401, 403):  # some servers echo what they were sent: it must not reach the user
                data = {"error": {"message": f"bad credentials: {auth}", "type": "auth", "code": None}}
            raw = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            self.answer(stub.list_reply if self.path == "/v1/models" else failure(404, "no route"))

        def do_POST(self) -> None:
            self.answer(stub.chat_reply if self.path == "/v1/chat/completions" else failure(404, "no route"))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    stub.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        stub.release.set()
        server.shutdown()
        server.server_close()


def project(root: Path, base_url: str, model: str = "m", **llm: Any) -> Path:
    ship = {
        "llm": {"provider": "openai-compatible", "model": model, "baseUrl": base_url, "apiKey": KEY, **llm}
    }
    (root / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    return root


def check(root: Path, *args: str) -> tuple[int, list[str]]:
    result = runner.invoke(cli.app, ["check", "-C", str(root), *args])
    assert "Traceback" not in result.output and KEY not in result.output, result.output
    return result.exit_code, result.output.splitlines()


def problem(lines: list[str], level: str = "error") -> tuple[str, str]:
    """The one ``error:`` line and the ``detail:`` line under it."""
    found = [i for i, line in enumerate(lines) if line.startswith(f"{level}: ")]
    assert len(found) == 1, lines
    detail = lines[found[0] + 1]
    assert detail.startswith("  detail: ") and len(detail) > len("  detail: "), lines
    return lines[found[0]], detail


@pytest.fixture(autouse=True)
def _no_ambient_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


# -- what fails -------------------------------------------------------------------------------------


def test_a_stopped_server_is_an_error_naming_the_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    code, lines = check(project(tmp_path, url))
    assert code == 1
    error, _ = problem(lines)
    assert error == (
        f"error: llm.baseUrl: cannot reach the model server at {url}: is it running, and is llm.baseUrl right?"
    )
    assert "1 problem(s) would make a turn fail" in lines


def test_a_rejected_key_is_an_error_and_the_key_is_never_printed(tmp_path: Path) -> None:
    with stub_server(Stub(failure(401, "unused"))) as stub:
        code, lines = check(project(tmp_path, stub.url))
    assert code == 1
    error, detail = problem(lines)
    assert error == (
        f"error: llm.apiKey: the model server at {stub.url} rejected the API key (HTTP 401): "
        "check llm.apiKey in ship.json (or the variable it names)"
    )
    assert "<apiKey>" in detail  # the server echoed the key; the detail line shows a placeholder
    assert [(r["method"], r["path"], r["auth"]) for r in stub.requests] == [
        ("GET", "/v1/models", f"Bearer {KEY}")
    ]  # one request, with the configured key


def test_a_key_from_the_environment_is_named_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with stub_server(Stub(failure(403, "unused"))) as stub:
        ship = {"llm": {"provider": "openai", "model": "m", "baseUrl": stub.url}}
        (tmp_path / "ship.json").write_text(json.dumps(ship))
        code, lines = check(tmp_path)
    assert code == 1
    error, _ = problem(lines)
    assert "refused this API key access (HTTP 403)" in error
    assert "check the environment variable OPENAI_API_KEY" in error


def test_an_unknown_model_is_an_error_with_the_closest_listed_one(tmp_path: Path) -> None:
    stub = Stub(
        models("qwen2.5-7b-instruct", "llama-3.1-8b"), failure(404, "The model `qwen-7b` does not exist.")
    )
    with stub_server(stub):
        code, lines = check(project(tmp_path, stub.url, model="qwen2.5-7b-instruc"))
    assert code == 1
    error, _ = problem(lines)
    assert error == (
        f"error: llm.model: the model server at {stub.url} has no model 'qwen2.5-7b-instruc' "
        f"(did you mean 'qwen2.5-7b-instruct'?): check llm.model against GET {stub.url}/models"
    )
    chat = stub.requests[1]
    assert (chat["method"], chat["path"]) == ("POST", "/v1/chat/completions")
    assert chat["body"]["model"] == "qwen2.5-7b-instruc" and chat["body"]["max_tokens"] == 1


def test_model_not_found_by_code_is_an_unknown_model_too(tmp_path: Path) -> None:
    stub = Stub(models("a"), failure(400, "no such model", code="model_not_found"))
    with stub_server(stub):
        code, lines = check(project(tmp_path, stub.url))
    assert code == 1 and "has no model 'm'" in problem(lines)[0]


def test_no_openai_api_at_the_url_names_the_base_url(tmp_path: Path) -> None:
    with stub_server(Stub(failure(404, "no route"), failure(404, "no route"))) as stub:
        code, lines = check(project(tmp_path, stub.url))
    assert code == 1
    error, _ = problem(lines)
    assert error.startswith(f"error: llm.baseUrl: no OpenAI-compatible API at {stub.url} (HTTP 404")
    assert "it usually ends in /v1" in error


def test_a_server_error_fails_the_check(tmp_path: Path) -> None:
    with stub_server(Stub((500, {"error": {"message": "out of memory"}}))) as stub:
        code, lines = check(project(tmp_path, stub.url))
    assert code == 1 and "failed GET /models (HTTP 500)" in problem(lines)[0]


def test_a_server_that_does_not_answer_times_out(tmp_path: Path) -> None:
    with stub_server(Stub("hang")) as stub:
        code, lines = check(project(tmp_path, stub.url), "--timeout", "0.5")
    assert code == 1
    error, _ = problem(lines)
    assert error.startswith(
        f"error: llm.baseUrl: the model server at {stub.url} did not answer GET /models within 0.5 s"
    )


def test_a_refused_one_token_request_is_a_warning(tmp_path: Path) -> None:
    """Server and key work, the model is not listed, and the server refuses the request for its own
    reasons (a 400 that is not about the model): the turn may work; say so without failing."""
    with stub_server(Stub(models("other"), failure(400, "max_tokens must be at least 16"))) as stub:
        code, lines = check(project(tmp_path, stub.url))
    assert code == 0
    warning, _ = problem(lines, "warning")
    assert f"the model server at {stub.url} refused a 1-token request to model 'm' (HTTP 400)" in warning


# -- what passes ------------------------------------------------------------------------------------


def test_a_listed_model_passes_with_one_request(tmp_path: Path) -> None:
    with stub_server(Stub(models("m", "n"))) as stub:
        code, lines = check(project(tmp_path, stub.url))
    assert code == 0, lines
    assert f"model server {stub.url}: reachable, API key accepted, model 'm' listed" in lines
    assert len(stub.requests) == 1 and not any(line.startswith("error:") for line in lines)


def test_an_ollama_style_latest_tag_counts_as_listed(tmp_path: Path) -> None:
    with stub_server(Stub(models("llama3:latest"))) as stub:
        code, lines = check(project(tmp_path, stub.url, model="llama3"))
    assert code == 0 and len(stub.requests) == 1, lines


def test_an_unlisted_model_that_answers_passes(tmp_path: Path) -> None:
    """llama.cpp lists its file name and answers to any model name."""
    with stub_server(Stub(models("/models/smollm2.gguf"))) as stub:
        code, lines = check(project(tmp_path, stub.url))
    assert code == 0, lines
    assert f"model server {stub.url}: reachable, API key accepted, model 'm' answers" in lines
    assert [r["method"] for r in stub.requests] == ["GET", "POST"]


def test_offline_asks_nothing(tmp_path: Path) -> None:
    with stub_server(Stub(failure(401, "unused"))) as stub:
        code, lines = check(project(tmp_path, stub.url), "--offline")
    assert code == 0, lines
    assert "model server: not probed (--offline)" in lines
    assert stub.requests == []
    code, lines = check(project(tmp_path, f"http://127.0.0.1:{closed_port()}/v1"), "--offline")
    assert code == 0, lines


def test_a_model_that_cannot_be_built_is_not_probed(tmp_path: Path) -> None:
    (tmp_path / "ship.json").write_text(json.dumps({"llm": {"model": "m", "provider": "openai-compatible"}}))
    code, lines = check(tmp_path)
    assert code == 1
    assert "model server: not probed (the model cannot be built)" in lines
    assert [line for line in lines if line.startswith("error: ")] == [
        'error: llm.baseUrl is not set: an openai-compatible provider needs the server\'s URL (e.g. "http://localhost:8000/v1")'
    ]


def test_the_test_model_is_not_probed(tmp_path: Path) -> None:
    (tmp_path / "ship.json").write_text(json.dumps({"llm": {"model": "test"}}))
    code, lines = check(tmp_path)
    assert code == 0 and "model server: not probed (a test model answers in-process)" in lines


def test_the_installed_command_probes_too(tmp_path: Path) -> None:
    """The console script, in its own process, from the project directory."""
    url = f"http://127.0.0.1:{closed_port()}/v1"
    project(tmp_path, url)
    result = subprocess.run([SHIPAGENT, "check"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"error: llm.baseUrl: cannot reach the model server at {url}" in result.stdout
    assert KEY not in result.stdout + result.stderr


# -- the probe as a library -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_local_provider_is_skipped_with_a_note_unless_it_registers_a_probe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    llm = LlmConfig(provider="local", model="smollm2")
    report = await probe_model_server(llm, TestModel())
    assert report.problems == [] and "not probed (provider local:" in report.note

    async def loaded(llm: LlmConfig, model: Any, timeout_seconds: float) -> ProbeReport:
        return ProbeReport(f"engine up within {timeout_seconds:g} s")

    monkeypatch.setitem(PROBES, "local", loaded)
    assert (await probe_model_server(llm, TestModel(), timeout_seconds=3)).note == "engine up within 3 s"


def test_urls_are_shown_without_credentials_or_query() -> None:
    assert shown_url("https://user:pw@example.com:8443/v1/?key=abc#x") == "https://example.com:8443/v1"
    assert shown_url("http://[::1]:8000/v1/") == "http://[::1]:8000/v1"


def test_without_base_url_the_advice_is_about_the_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No llm.baseUrl: the provider's own URL is right, so the advice is not to fix it (the SDK's
    OPENAI_BASE_URL stands in for a hosted API this machine cannot reach)."""
    url = f"http://127.0.0.1:{closed_port()}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    (tmp_path / "ship.json").write_text(json.dumps({"llm": {"model": "openai:gpt-5-mini"}}))
    code, lines = check(tmp_path)
    assert code == 1
    error, _ = problem(lines)
    assert error == (
        f"error: llm.model: cannot reach the model server at {url}: is this machine online? "
        "(set llm.baseUrl for another server)"
    )
