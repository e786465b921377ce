"""A browser page elsewhere cannot drive a key-less ``shipagent serve``; the page itself is locked down.

Against a real ``shipagent serve`` process (key-less, on 127.0.0.1): a page served from another
origin, in a real chromium, POSTs a turn in ``no-cors`` mode as ``text/plain`` (no preflight) and as
JSON (preflight), and no turn is committed; a rebinding ``Host`` is refused; the server's own page
gets ``X-Frame-Options`` and a Content-Security-Policy under which it still works, with no
violation reported. With keys, ``serve.corsOrigins`` opens CORS to the listed origin only.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel

from shipagent import ShipAgent
from shipagent.errors import ConfigError
from shipagent.hosts.serve import create_app
from tests.support.core import make_project
from tests.support.serve import serving
from tests.support.server_attack import Served, json_body, raw_request, shipagent_serve, status_of
from tests.support.web import launch_chromium

CHAT = "web:victim"
KEY = "k-cors-0123456789abcdef"

ATTACK_PAGE = """<!doctype html><meta charset=utf-8><title>evil</title>
<script>
window.attack = async (target) => {
  const url = target + "/v1/chats/web%3Avictim/messages";
  const out = {};
  try {
    await fetch(url, {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"},
                      body: JSON.stringify({text: "no-cors text/plain"})});
    out.noCors = "sent";
  } catch (e) { out.noCors = "failed: " + e.message; }
  try {
    const r = await fetch(url, {method: "POST", headers: {"Content-Type": "application/json"},
                                body: JSON.stringify({text: "cors json"})});
    out.cors = "status " + r.status;
  } catch (e) { out.cors = "failed: " + e.message; }
  return out;
};
</script>"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with shipagent_serve(tmp_path_factory.mktemp("browser")) as served:
        yield served


@pytest.fixture
def attacker_origin() -> Iterator[str]:
    """A second web server on 127.0.0.1 (another port: another origin) serving the attack page."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = ATTACK_PAGE.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_page_on_another_origin_commits_no_turn(served: Served, attacker_origin: str) -> None:
    with sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            page = browser.new_page()
            page.goto(attacker_origin + "/")
            outcome = page.evaluate("(target) => window.attack(target)", served.url)
        finally:
            browser.close()
    # no-cors hides the answer from the page, and the JSON request's preflight is refused
    assert outcome["noCors"] == "sent" and outcome["cors"].startswith("failed"), outcome
    assert served.transcript(CHAT) == []
    assert served.healthy()


def test_no_cors_text_plain_post_is_refused_and_commits_nothing(served: Served, attacker_origin: str) -> None:
    url = f"{served.url}/v1/chats/{CHAT}/messages"
    forged = httpx.post(
        url,
        content=b'{"text": "forged"}',
        headers={"Content-Type": "text/plain;charset=UTF-8", "Origin": attacker_origin},
    )
    assert forged.status_code == 403
    assert forged.json()["error"]["type"] == "origin_not_allowed"
    assert attacker_origin in forged.json()["error"]["message"]
    # the same body without an Origin (curl, a script): still refused for its Content-Type
    plain = httpx.post(url, content=b'{"text": "plain"}', headers={"Content-Type": "text/plain"})
    assert plain.status_code == 415
    assert plain.json()["error"]["type"] == "unsupported_media_type"
    assert "application/json" in plain.json()["error"]["message"]
    form = httpx.post(url, data={"text": "form"})
    assert form.status_code == 415
    preflight = httpx.options(
        url, headers={"Origin": attacker_origin, "Access-Control-Request-Method": "POST"}
    )
    assert preflight.status_code == 403 and "access-control-allow-origin" not in preflight.headers
    assert served.transcript(CHAT) == []
    # the server's own page (same origin) still posts turns
    own = httpx.post(url, json={"text": "mine"}, headers={"Origin": served.url})
    assert own.status_code == 200 and own.json()["output"] == "echo: mine"
    assert [e.get("text") for e in served.transcript(CHAT) if e.get("role") == "user"] == ["mine"]
    httpx.delete(f"{served.url}/v1/chats/{CHAT}/context")


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:{port}", "127.0.0.1.nip.io:{port}", "10.0.0.1"]
)
def test_a_foreign_host_is_refused(served: Served, host: str) -> None:
    header = host.format(port=served.port)
    request = f"GET /v1/chats HTTP/1.1\r\nHost: {header}\r\nConnection: close\r\n\r\n".encode()
    response = raw_request(served.port, request)
    assert status_of(response) == 400
    error = json_body(response)["error"]
    assert error["type"] == "host_not_allowed" and header in error["message"]


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST", "[::1]:{port}"])
def test_loopback_host_names_are_answered(served: Served, host: str) -> None:
    header = host.format(port=served.port)
    request = f"GET /v1/chats HTTP/1.1\r\nHost: {header}\r\nConnection: close\r\n\r\n".encode()
    assert status_of(raw_request(served.port, request)) == 200


def test_the_page_gets_frame_and_content_security_headers(served: Served) -> None:
    page = httpx.get(served.url + "/")
    assert page.status_code == 200
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["x-content-type-options"] == "nosniff"
    csp = {
        d.split()[0]: d.split()[1:] for d in page.headers["content-security-policy"].split(";") if d.strip()
    }
    assert csp["default-src"] == ["'none'"]
    assert csp["script-src"] == ["'self'"] and csp["style-src"] == ["'self'"]
    assert csp["frame-ancestors"] == ["'none'"] and csp["connect-src"] == ["'self'"]
    for directive in csp.values():  # nothing from elsewhere, no inline code
        assert not any(s.startswith(("http", "'unsafe")) or s == "*" for s in directive)


def test_the_page_works_under_its_policy_and_cannot_be_framed(served: Served, attacker_origin: str) -> None:
    with sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            page = browser.new_page()
            page.add_init_script(
                "window.__violations = [];"
                "document.addEventListener('securitypolicyviolation',"
                " (e) => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));"
            )
            page.goto(served.url + "/")
            # (locators, not wait_for_function: the policy forbids the eval that one needs)
            expect(page.locator("#agent-name")).to_have_text("attacked-agent")
            page.fill("#input", "hello under CSP")
            page.press("#input", "Enter")
            expect(page.locator("#messages")).to_contain_text("echo: hello under CSP")
            assert page.evaluate("window.__violations") == []
            # framed by another origin: the browser refuses to render it
            framer = browser.new_page()
            framer.goto(attacker_origin + "/")
            framer.set_content(f'<iframe id="f" src="{served.url}/"></iframe>')  # waits for the frame
            children = framer.main_frame.child_frames
            assert len(children) == 1
            assert not children[0].evaluate("!!document.getElementById('agent-name')")
        finally:
            browser.close()


def _echo_agent(root: Path, serve: dict[str, Any]) -> ShipAgent:
    def respond(messages: Any, info: Any) -> ModelResponse:
        return ModelResponse(parts=[TextPart("ok")])

    return ShipAgent.from_project(make_project(root, {"serve": serve}), model=FunctionModel(respond))


def test_with_keys_cors_is_answered_for_listed_origins_only(tmp_path: Path) -> None:
    listed = "https://app.example.com"
    agent = _echo_agent(tmp_path, {"apiKeys": [{"key": KEY}], "corsOrigins": [listed]})
    with serving(create_app(agent)) as url:
        messages = f"{url}/v1/chats/web%3Acors/messages"
        ok = httpx.options(
            messages,
            headers={
                "Origin": listed,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
        assert ok.status_code == 204
        assert ok.headers["access-control-allow-origin"] == listed
        allowed = {h.strip().lower() for h in ok.headers["access-control-allow-headers"].split(",")}
        assert {"authorization", "content-type"} <= allowed
        assert "POST" in ok.headers["access-control-allow-methods"]
        other = httpx.options(
            messages, headers={"Origin": "https://other.example", "Access-Control-Request-Method": "POST"}
        )
        assert other.status_code == 403 and "corsOrigins" in other.json()["error"]["message"]
        turn = httpx.post(
            messages, json={"text": "hi"}, headers={"Origin": listed, "Authorization": f"Bearer {KEY}"}
        )
        assert turn.status_code == 200 and turn.headers["access-control-allow-origin"] == listed
        assert "origin" in turn.headers["vary"].lower()
        # the listed origin still needs a key, and still needs JSON
        keyless = httpx.post(messages, json={"text": "hi"}, headers={"Origin": listed})
        assert keyless.status_code == 401
        text = httpx.post(
            messages,
            content=b"hi",
            headers={"Origin": listed, "Authorization": f"Bearer {KEY}", "Content-Type": "text/plain"},
        )
        assert text.status_code == 415
        # with keys and no serve.allowedHosts, any Host name reaches the key check
        renamed = httpx.get(f"{url}/v1/chats", headers={"Host": "agent.example.com"})
        assert renamed.status_code == 401


def test_allowed_hosts_are_answered_and_others_are_not(tmp_path: Path) -> None:
    agent = _echo_agent(tmp_path, {"allowedHosts": ["agent.internal"]})
    with serving(create_app(agent)) as url:
        port = url.rsplit(":", 1)[1]
        named = httpx.get(f"{url}/v1/chats", headers={"Host": f"agent.internal:{port}"})
        assert named.status_code == 200
        other = httpx.get(f"{url}/v1/chats", headers={"Host": "agent.internal.evil.example"})
        assert other.status_code == 400 and "serve.allowedHosts" in other.json()["error"]["message"]
        # a health probe by address is answered whatever the Host
        assert httpx.get(f"{url}/healthz", headers={"Host": "10.1.2.3:8000"}).status_code == 200


def test_cors_origins_without_keys_is_a_config_error(tmp_path: Path) -> None:
    agent = _echo_agent(tmp_path, {"corsOrigins": ["https://app.example.com"]})
    with pytest.raises(ConfigError) as caught:
        create_app(agent)
    assert caught.value.path == "serve.corsOrigins"
    with pytest.raises(ConfigError) as bad:
        _echo_agent(
            tmp_path / "bad", {"apiKeys": [{"key": KEY}], "corsOrigins": ["https://app.example.com/path"]}
        )
    assert bad.value.path == "serve.corsOrigins" and "https://app.example.com/path" in str(bad.value)
