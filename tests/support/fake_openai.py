"""A real HTTP server on 127.0.0.1 speaking just enough of the OpenAI chat-completions API.

Each request takes the next scripted reply: ``(status, body)`` or ``"hang"`` (accept, never answer).
The real ``openai`` SDK talks to it, so retries, timeouts and error mapping are the real ones.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = tuple[int, dict[str, Any]] | str


def completion(text: str) -> tuple[int, dict[str, Any]]:
    return 200, {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


def error(status: int, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"error": {"message": message, "type": "server_error", "code": None}}


class FakeOpenAI:
    def __init__(self, replies: list[Reply]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.stop = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                owner.requests.append(
                    {"path": self.path, "auth": self.headers.get("authorization"), "body": body}
                )
                reply = owner.replies.pop(0) if owner.replies else completion("(no more replies)")
                if reply == "hang":
                    owner.stop.wait(30)
                    return
                assert not isinstance(reply, str)
                status, data = reply
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@contextmanager
def fake_openai(replies: list[Reply]) -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI(replies)
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.stop.set()
        fake.server.shutdown()
        fake.server.server_close()


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    time.sleep(0.01)
    return port
