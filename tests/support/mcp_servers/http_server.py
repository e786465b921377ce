"""A streamable-HTTP MCP server on 127.0.0.1, run in a background thread by the tests.

Its tool names are the awkward ones real servers use: ``weather.get:current`` (a ``.`` and a
``:``, which OpenAI rejects) and an 80-character name (over OpenAI's 64). ``create_event`` has a
nested object, an enum, required and optional fields and descriptions, so a test can prove the
schema reaches the model whole. ``picture`` and ``attachment`` return an image and an embedded
resource; ``fail`` returns ``isError``; ``sleep`` outlives a short per-call timeout.

When started with a ``token``, every request must carry ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Literal

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp_types import (
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    TextContent,
)
from pydantic import BaseModel, Field
from starlette.types import ASGIApp, Receive, Scope, Send

from tests.support.net import free_port

LONG_TOOL_NAME = "summarize_quarterly_revenue_by_region_and_product_line_including_forecasts_v2024"
assert len(LONG_TOOL_NAME) == 80, len(LONG_TOOL_NAME)

PNG_BYTES = b"\x89PNG\r\n\x1a\n" + b"\x00" * 92  # 100 bytes; only the size and mime matter


class Attendee(BaseModel):
    email: str = Field(description="Where the invitation goes")
    optional: bool = False


class Location(BaseModel):
    room: str
    floor: int | None = None


def build_server() -> MCPServer:
    server = MCPServer("ship-test-http")

    @server.tool(name="weather.get:current")
    def weather(city: str, units: Literal["metric", "imperial"] = "metric") -> str:
        """Current weather for a city."""
        return f"{city}: 21 degrees ({units})"

    @server.tool(name=LONG_TOOL_NAME)
    def long_named(region: str) -> str:
        """A tool whose name is 80 characters long."""
        return f"revenue for {region}: 42"

    @server.tool()
    def create_event(
        title: Annotated[str, Field(description="What the event is called")],
        start: Annotated[str, Field(description="ISO 8601 start time")],
        attendees: list[Attendee],
        location: Location,
        priority: Literal["low", "normal", "high"] = "normal",
    ) -> str:
        """Create a calendar event."""
        return f"created {title} at {start} with {len(attendees)} attendee(s) in {location.room}"

    @server.tool()
    def picture() -> CallToolResult:
        """A tiny PNG followed by a caption."""
        return CallToolResult(
            content=[
                ImageContent(type="image", data=base64.b64encode(PNG_BYTES).decode(), mime_type="image/png"),
                TextContent(type="text", text="a very small picture"),
            ]
        )

    @server.tool()
    def attachment() -> CallToolResult:
        """An embedded binary resource."""
        blob = base64.b64encode(b"%PDF-1.7" + b"\x00" * 2040).decode()
        return CallToolResult(
            content=[
                EmbeddedResource(
                    type="resource",
                    resource=BlobResourceContents(
                        uri="file:///reports/q3.pdf", blob=blob, mime_type="application/pdf"
                    ),
                )
            ]
        )

    @server.tool()
    def fail(message: str) -> CallToolResult:
        """Always an error result."""
        return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)

    @server.tool()
    async def sleep(seconds: float) -> str:
        """Sleep, then answer."""
        await anyio.sleep(seconds)
        return f"slept {seconds}"

    return server


class _RequireBearer:
    """ASGI middleware: 401 unless ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != self.expected:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await self.app(scope, receive, send)


@contextmanager
def running_http_server(
    *, token: str | None = None, port: int | None = None, sse: bool = False
) -> Iterator[str]:
    """Serve :func:`build_server` on 127.0.0.1 in a thread; yield its ``/mcp`` (or ``/sse``) URL."""
    server_app = build_server()
    app: ASGIApp = server_app.sse_app() if sse else server_app.streamable_http_app()
    if token is not None:
        app = _RequireBearer(app, token)
    port = port or free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="mcp-test-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test MCP HTTP server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/{'sse' if sse else 'mcp'}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
