"""Variants of the browser and input attacks that go around the first checks.

Against a real key-less ``shipagent serve``: ``Host`` values that *contain* a loopback name without
being one, an ``Origin`` of ``null`` (a sandboxed iframe, a ``data:`` page), media types that only
start like JSON, and chat keys whose percent-escapes are not UTF-8 (an encoded lone surrogate). A
refused request commits no turn; an honest variant (``application/json; charset=utf-8``) works.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from tests.support.server_attack import Served, json_body, raw_request, shipagent_serve, status_of

BODY = json.dumps({"text": "drive me"}).encode()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with shipagent_serve(tmp_path_factory.mktemp("redteam-server")) as served:
        yield served


def _post(served: Served, path: str, *, host: str | None = None, **headers: str) -> bytes:
    lines = {"Host": host or f"127.0.0.1:{served.port}", "Content-Type": "application/json", **headers}
    head = "".join(f"{name}: {value}\r\n" for name, value in lines.items())
    request = f"POST {path} HTTP/1.1\r\n{head}Content-Length: {len(BODY)}\r\nConnection: close\r\n\r\n"
    return raw_request(served.port, request.encode("latin-1") + BODY)


@pytest.mark.parametrize(
    ("host", "chat"),
    [
        ("localhost:80@evil.example", "web:at-sign"),
        ("[::1]evil.example", "web:after-bracket"),
        ("localhost.", "web:trailing-dot"),
        ("127.0.0.1.nip.io", "web:nip-io"),
        ("[::ffff:7f00:1]x", "web:mapped"),
    ],
)
def test_a_host_that_only_contains_a_loopback_name_is_refused(served: Served, host: str, chat: str) -> None:
    response = _post(served, f"/v1/chats/{chat}/messages", host=host)
    assert status_of(response) == 400, response
    assert json_body(response)["error"]["type"] == "host_not_allowed"
    assert served.transcript(chat) == []


def test_an_origin_of_null_is_refused(served: Served) -> None:
    response = _post(served, "/v1/chats/web:null-origin/messages", Origin="null")
    assert status_of(response) == 403, response
    assert served.transcript("web:null-origin") == []


def test_json_with_a_charset_is_json_and_a_json_lookalike_is_not(served: Served) -> None:
    ok = _post(
        served, "/v1/chats/web:charset/messages", **{"Content-Type": "application/json; charset=utf-8"}
    )
    assert status_of(ok) == 200, ok
    for kind in ("application/json-patch+json", "text/plain; application/json", "application/jsonx"):
        refused = _post(served, "/v1/chats/web:lookalike/messages", **{"Content-Type": kind})
        assert status_of(refused) == 415, (kind, refused)
    assert served.transcript("web:lookalike") == []


@pytest.mark.parametrize("escaped", ["%ED%A0%80", "%FF", "%C3"])
def test_a_chat_key_that_is_not_utf8_is_refused(served: Served, escaped: str) -> None:
    """Each would become U+FFFD, so different keys would share one chat."""
    response = _post(served, f"/v1/chats/web:x{escaped}/messages")
    assert status_of(response) == 400, response
    error = json_body(response)["error"]
    assert error["type"] == "invalid_path" and "UTF-8" in error["message"]
    chats = served.root / ".ship" / "chats"
    assert not chats.exists() or not any("%EF%BF%BD" in p.name for p in chats.iterdir())


def test_a_body_streamed_on_after_its_413_is_cut_off(served: Served) -> None:
    """A chunked body past ``maxBodyBytes`` gets its 413; the rest must not be read (and thrown away)
    for as long as the client cares to send it, a core's worth of work for the body timeout."""
    head = (
        f"POST /v1/chats/web:flood/messages HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    piece = b"a" * 65536
    chunk = b"%x\r\n" % len(piece) + piece + b"\r\n"
    sent, cap, cut = 0, 2 * 1024**3, False
    deadline = time.monotonic() + 60
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(head.encode())
        try:
            while sent < cap and time.monotonic() < deadline:
                sock.sendall(chunk)
                sent += len(piece)
        except OSError:  # reset or broken pipe: the server closed the connection
            cut = True
    assert cut, f"the server read {sent} bytes of a body it had already refused"
    assert sent < cap // 4
    assert served.healthy()
    assert served.transcript("web:flood") == []
