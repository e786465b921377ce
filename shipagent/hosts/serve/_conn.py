"""Connections a slow, idle or greedy client cannot hoard: uvicorn options plus a protocol guard.

uvicorn bounds some of this itself, and those options are used: ``h11_max_incomplete_event_size``
caps a request's line plus headers (the ``httptools`` parser has no such cap, so the ``h11``
protocol is chosen), ``timeout_keep_alive`` closes a connection idle between requests, and
``limit_concurrency`` answers 503 past a number of running requests. What uvicorn does not bound
happens before any ASGI code runs, so no middleware can see it:

- a connection that sends nothing, or its headers one byte every few seconds (its keep-alive timer
  starts only after a first response, and is stopped by the first byte of the next request);
- a body that trickles in after its headers;
- how many connections are open in all, and from one address (each holds a file descriptor; at the
  process's limit nobody else can connect).

:func:`guarded_protocol` makes a subclass of uvicorn's public ``H11Protocol`` (passed as
``http=``) that adds exactly these. It overrides only the ``asyncio.Protocol`` methods and
``send_400_response``, and reads only the protocol's public attributes (``conn``, ``client``,
``transport``, ``loop``) and h11's documented connection state (``their_state``,
``our_state``); the tests in ``tests/security`` fail if a uvicorn upgrade changes any of it. The
rules: a request's head must arrive within
``serve.limits.headerTimeoutSeconds`` of its first byte (or of the connection opening), its body
within ``bodyTimeoutSeconds`` of its head (a connection answered before its body was in is closed
at the next byte of that body), and a connection over ``maxConnections`` or
``maxConnectionsPerClient`` is answered 503 and closed at once. Each timeout ends with a ``408``
when the client had started a request, and a plain close when it had sent nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..._hosts_config import ServeLimits
from ...config import ServeConfig

__all__ = ["RESERVED_FDS", "effective_connection_limits", "guarded_protocol", "uvicorn_options"]

log = logging.getLogger("shipagent.hosts.serve")
WARN_EVERY = 10.0
RESERVED_FDS = 64
"""File descriptors kept for everything but client sockets (stores, MCP pipes, the database)."""


@dataclass
class _Book:
    """Open connections of one server, in all and per client address."""

    limits: ServeLimits
    max_connections: int
    max_per_client: int
    total: int = 0
    per_client: Counter[str] = field(default_factory=Counter)
    refused: int = 0
    """Connections refused since the last warning (one warning per :data:`WARN_EVERY` s, not a flood)."""
    warned_at: float = -WARN_EVERY


def _raw_response(status: int, reason: str, kind: str, message: str) -> bytes:
    body = json.dumps({"error": {"type": kind, "message": message}}).encode() + b"\n"
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class GuardedH11Protocol(H11Protocol):
    """``H11Protocol`` with a head and a body deadline and connection counts (see the module)."""

    book: ClassVar[_Book]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard_timer: asyncio.TimerHandle | None = None
        self.guard_phase: str | None = None
        self.guard_head_bytes = 0
        self.guard_tail = b""
        self.guard_counted: str | None = None

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        book = self.book
        client = self.client[0] if self.client else "-"
        book.total += 1
        book.per_client[client] += 1
        self.guard_counted = client
        per_client = book.max_per_client
        if book.total > book.max_connections:
            self.guard_refuse("too many open connections (serve.limits.maxConnections)")
        elif per_client and book.per_client[client] > per_client:
            self.guard_refuse(
                f"too many open connections from {client} (serve.limits.maxConnectionsPerClient)"
            )
        else:
            self.guard_arm("head")

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:  # these bytes are (part of) a request's head
            # h11's own cap applies only while a head is incomplete; one read can hold a whole
            # oversized head (asyncio reads up to 256 KiB), so the head's size is checked here
            seen = self.guard_tail + data  # the blank line may straddle two reads
            end = seen.find(b"\r\n\r\n")
            self.guard_head_bytes += len(data) if end < 0 else end + 4 - len(self.guard_tail)
            self.guard_tail = seen[-3:]
            if self.guard_head_bytes > self.book.limits.max_header_bytes:
                self.guard_too_large()
                return
        super().data_received(data)
        self.guard_follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard_cancel()
        if self.guard_counted is not None:
            book = self.book
            book.total -= 1
            book.per_client[self.guard_counted] -= 1
            if book.per_client[self.guard_counted] <= 0:
                del book.per_client[self.guard_counted]
            self.guard_counted = None
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        if self.guard_head_bytes > self.book.limits.max_header_bytes:
            self.guard_too_large()
        else:
            super().send_400_response(msg)

    # -- the guard -------------------------------------------------------------------------------

    def guard_follow(self) -> None:
        """Arm the deadline that fits where the request now is (h11's view of the client)."""
        if self.transport.is_closing():
            self.guard_cancel()
            return
        state = self.conn.their_state
        if state is h11.IDLE:
            if self.guard_phase != "head":
                self.guard_arm("head")
        elif state is h11.SEND_BODY:
            if self.conn.our_state in (h11.DONE, h11.MUST_CLOSE):
                # Answered before the body was in (a 413, a 401): the rest is read only to be
                # thrown away, at the speed the client sends (gigabytes a second on one core).
                self.guard_cancel()
                self.transport.close()
                return
            self.guard_head_bytes, self.guard_tail = 0, b""
            if self.guard_phase != "body":
                self.guard_arm("body")
        else:  # the request is in: the app has it, no deadline of ours applies
            self.guard_cancel()
            self.guard_head_bytes, self.guard_tail = 0, b""

    def guard_arm(self, phase: str) -> None:
        self.guard_cancel()
        limits = self.book.limits
        delay = limits.header_timeout_seconds if phase == "head" else limits.body_timeout_seconds
        self.guard_phase = phase
        self.guard_timer = self.loop.call_later(delay, self.guard_expired, phase)

    def guard_cancel(self) -> None:
        if self.guard_timer is not None:
            self.guard_timer.cancel()
        self.guard_timer = None
        self.guard_phase = None

    def guard_expired(self, phase: str) -> None:
        self.guard_timer = None
        if self.transport.is_closing():
            return
        state = self.conn.their_state
        limits = self.book.limits
        if phase == "head" and state is h11.IDLE:
            if self.guard_head_bytes:
                message = (
                    "the request's line and headers did not arrive within "
                    f"{limits.header_timeout_seconds:g} s (serve.limits.headerTimeoutSeconds)"
                )
                self.transport.write(_raw_response(408, "Request Timeout", "request_timeout", message))
            self.transport.close()
        elif phase == "body" and state is h11.SEND_BODY:
            if self.conn.our_state is h11.SEND_RESPONSE:  # the app has not answered yet
                message = (
                    "the request's body did not arrive within "
                    f"{limits.body_timeout_seconds:g} s (serve.limits.bodyTimeoutSeconds)"
                )
                self.transport.write(_raw_response(408, "Request Timeout", "request_timeout", message))
            self.transport.close()
        else:
            self.guard_phase = None
            self.guard_follow()

    def guard_too_large(self) -> None:
        self.guard_cancel()
        limit = self.book.limits.max_header_bytes
        message = f"the request's line and headers are over {limit} bytes (serve.limits.maxHeaderBytes)"
        reason = "Request Header Fields Too Large"
        self.transport.write(_raw_response(431, reason, "headers_too_large", message))
        self.transport.close()

    def guard_refuse(self, why: str) -> None:
        book = self.book
        book.refused += 1
        if self.loop.time() - book.warned_at >= WARN_EVERY:
            log.warning("refused %d connection(s): %s", book.refused, why)
            book.refused, book.warned_at = 0, self.loop.time()
        message = f"{why}; retry later"
        self.transport.write(_raw_response(503, "Service Unavailable", "too_many_connections", message))
        self.transport.close()


def guarded_protocol(
    limits: ServeLimits, max_connections: int | None = None, per_client: int | None = None
) -> type[H11Protocol]:
    """A fresh ``H11Protocol`` subclass with its own connection counts, for one server."""
    book = _Book(
        limits,
        max_connections or limits.max_connections,
        limits.max_connections_per_client if per_client is None else per_client,
    )
    return type("ShipagentH11Protocol", (GuardedH11Protocol,), {"book": book})


def effective_connection_limits(limits: ServeLimits) -> tuple[int, int]:
    """``(maxConnections, maxConnectionsPerClient)`` lowered to fit the open-file limit.

    A process allowed 128 files cannot hold 512 sockets: past its limit ``accept`` fails and
    nobody gets in. The total is lowered to leave :data:`RESERVED_FDS` free, and then one client
    may hold at most half of it, so a single address never takes every slot.
    """
    total, per_client = limits.max_connections, limits.max_connections_per_client
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or total <= soft - RESERVED_FDS:
        return total, per_client
    total = max(1, soft - RESERVED_FDS)
    if per_client == 0 or per_client > total // 2:
        per_client = max(1, total // 2)
    log.warning(
        "serve.limits lowered to %d connections (%d per client): the open-file limit (ulimit -n) is %d",
        total,
        per_client,
        soft,
    )
    return total, per_client


def uvicorn_options(settings: ServeConfig) -> dict[str, Any]:
    """The ``uvicorn.Config`` keyword arguments that apply ``settings.limits``."""
    limits = settings.limits
    connections, per_client = effective_connection_limits(limits)
    return {
        "http": guarded_protocol(limits, connections, per_client),
        "h11_max_incomplete_event_size": limits.max_header_bytes,
        "timeout_keep_alive": limits.keep_alive_seconds,
        # a backstop for requests still running on closed connections; connections are the
        # guard's (uvicorn counts this request's own connection, hence the + 1)
        "limit_concurrency": connections + 1,
    }
