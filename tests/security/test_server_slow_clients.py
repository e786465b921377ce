"""Slow, idle, oversized and greedy clients are cut off while ``/healthz`` keeps answering.

Against a real ``shipagent serve`` process with short ``serve.limits`` (seconds, not the defaults'
tens of seconds, so the tests are quick). Raw sockets play the attackers; every wait is a bounded
loop with a generous deadline, and no assertion depends on how fast the machine is: a cut-off
only has to happen well before the deadline, never at a particular moment.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.server_attack import (
    Served,
    json_body,
    raw_request,
    read_until_closed,
    shipagent_serve,
    status_of,
)

LIMITS = {
    "headerTimeoutSeconds": 1,
    "bodyTimeoutSeconds": 1,
    "keepAliveSeconds": 1,
    "maxHeaderBytes": 8192,
}
CUT_OFF_WITHIN = 30.0
"""Seconds a test waits for the server to close a connection the limits say it must close."""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with shipagent_serve(tmp_path_factory.mktemp("slow"), {"limits": LIMITS}) as served:
        yield served


def _connect(served: Served, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source, 0))
    sock.settimeout(10)
    sock.connect(("127.0.0.1", served.port))
    return sock


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (reads what it sent first; never blocks long)."""
    sock.settimeout(0.2)
    try:
        while True:
            piece = sock.recv(65536)
            if not piece:
                return True
    except TimeoutError:
        return False
    except OSError:  # reset: closed too
        return True


def test_slow_header_clients_are_cut_off_while_healthz_answers(served: Served) -> None:
    attackers = [_connect(served) for _ in range(8)]
    for sock in attackers:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    open_ = list(attackers)
    cut: list[socket.socket] = []
    answered = 0
    deadline = time.monotonic() + CUT_OFF_WITHIN
    try:
        while open_ and time.monotonic() < deadline:
            for sock in list(open_):
                try:  # one more header byte now and then, as a slowloris client does
                    sock.sendall(b"X")
                except OSError:
                    open_.remove(sock)
                    cut.append(sock)
                    continue
                if _closed(sock):
                    open_.remove(sock)
                    cut.append(sock)
            answered += httpx.get(f"{served.url}/healthz", timeout=5).status_code == 200
        assert not open_, f"{len(open_)} slow-header connection(s) still open after {CUT_OFF_WITHIN} s"
        assert answered >= 1
        assert served.healthy()
    finally:
        for sock in attackers:
            sock.close()


def test_a_slow_header_client_that_sent_a_request_line_hears_408(served: Served) -> None:
    with _connect(served) as sock:
        sock.sendall(b"GET /v1/chats HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        response = read_until_closed(sock, CUT_OFF_WITHIN)
    assert status_of(response) == 408
    assert "serve.limits.headerTimeoutSeconds" in json_body(response)["error"]["message"]


def test_idle_connections_are_closed(served: Served) -> None:
    silent = _connect(served)  # connects and never speaks
    kept = _connect(served)  # one request, then idles on keep-alive
    try:
        kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = kept.recv(65536)
        assert status_of(first) == 200
        assert read_until_closed(silent, CUT_OFF_WITHIN) == b""  # closed without a word
        read_until_closed(kept, CUT_OFF_WITHIN)
        assert served.healthy()
    finally:
        silent.close()
        kept.close()


def test_a_body_that_trickles_in_is_cut_off_with_408(served: Served) -> None:
    with _connect(served) as sock:
        head = (
            b"POST /v1/chats/web%3Aslow/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        )
        sock.sendall(head + b'{"text": ')
        response = read_until_closed(sock, CUT_OFF_WITHIN)
    assert status_of(response) == 408
    assert "serve.limits.bodyTimeoutSeconds" in json_body(response)["error"]["message"]
    assert served.transcript("web:slow") == []


def test_an_oversized_header_is_refused_without_reading_it_all(served: Served) -> None:
    with _connect(served) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
        sent = 0
        with contextlib.suppress(OSError):  # the server closes while we still send: that is the point
            while sent < 50 * 1024 * 1024:
                sock.sendall(b"a" * 65536)
                sent += 65536
        response = read_until_closed(sock, CUT_OFF_WITHIN)
    assert sent < 50 * 1024 * 1024, "the server read a 50 MB header"
    if response:  # the answer may be lost to the reset of a socket we were still writing to
        assert status_of(response) == 431
        assert b"serve.limits.maxHeaderBytes" in response
    # a header just over the limit, sent in one go: the answer names the limit
    big = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n"
    refused = raw_request(served.port, big, timeout=CUT_OFF_WITHIN)
    assert status_of(refused) == 431 and b"serve.limits.maxHeaderBytes" in refused
    # and one just under it is answered
    fits = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nX-Big: " + b"a" * 7000
    assert status_of(raw_request(served.port, fits + b"\r\n\r\n", timeout=CUT_OFF_WITHIN)) == 200
    assert served.healthy()


def test_connections_are_bounded_per_client_and_in_all(tmp_path_factory: pytest.TempPathFactory) -> None:
    limits = {"headerTimeoutSeconds": 60, "maxConnections": 6, "maxConnectionsPerClient": 4}
    with shipagent_serve(tmp_path_factory.mktemp("greedy"), {"limits": limits}) as served:
        held: list[socket.socket] = []
        try:
            held += [_connect(served) for _ in range(4)]
            extra = _connect(served)
            response = read_until_closed(extra, CUT_OFF_WITHIN)
            extra.close()
            assert status_of(response) == 503
            assert "maxConnectionsPerClient" in json_body(response)["error"]["message"]
            # another address (still loopback) gets the remaining two, then the total is reached
            held += [_connect(served, "127.0.0.2") for _ in range(2)]
            assert not any(_closed(s) for s in held[4:])  # those two were accepted and stay open
            third = _connect(served, "127.0.0.2")
            response = read_until_closed(third, CUT_OFF_WITHIN)
            third.close()
            assert status_of(response) == 503
            assert "maxConnections" in json_body(response)["error"]["message"]
        finally:
            for sock in held:
                sock.close()
        # the slots are free again once the hoarders leave
        deadline = time.monotonic() + CUT_OFF_WITHIN
        while not served.healthy():
            assert time.monotonic() < deadline, "the server did not take connections again"
            time.sleep(0.1)
        assert httpx.get(f"{served.url}/v1/chats", timeout=5).status_code == 200


def test_a_request_sent_in_pieces_with_a_large_body_is_answered(served: Served) -> None:
    """The head's size is counted up to its blank line, even when that line straddles two reads."""
    body = ('{"text": "' + "b" * 9000 + '"}').encode()  # over maxHeaderBytes: must not count
    head = (
        b"POST /v1/chats/web%3Apieces/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
    )
    with _connect(served) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for piece in (head[:-2], head[-2:] + body):
            sock.sendall(piece)
            time.sleep(0.05)  # separate reads on the server (not asserted: merged reads pass too)
        response = read_until_closed(sock, CUT_OFF_WITHIN)
    assert status_of(response) == 200, response[:300]
    assert json_body(response)["output"] == "echo: " + "b" * 9000


def test_idle_sockets_past_the_open_file_limit_lock_nobody_out(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """With 128 open files, 130 idle sockets from one address leave room for everyone else."""
    with shipagent_serve(tmp_path_factory.mktemp("fds"), open_files=128) as served:
        hoard: list[socket.socket] = []
        try:
            for _ in range(130):
                try:
                    hoard.append(_connect(served, "127.0.0.2"))
                except OSError:  # refused by the kernel's backlog: the server is not accepting
                    break
            # every one was accepted (none left waiting in the backlog), most were turned away
            assert len(hoard) == 130
            deadline = time.monotonic() + CUT_OFF_WITHIN
            while sum(_closed(s) for s in hoard if s.fileno() >= 0) < 60:
                assert time.monotonic() < deadline, "the server kept every idle socket"
            # another client still gets in while the hoarder holds what it was allowed
            response = httpx.get(f"{served.url}/healthz", timeout=10)
            assert response.status_code == 200
            assert httpx.get(f"{served.url}/v1/chats", timeout=10).status_code == 200
        finally:
            for sock in hoard:
                sock.close()
        assert "lowered to" in served.stderr() and "ulimit -n" in served.stderr()
