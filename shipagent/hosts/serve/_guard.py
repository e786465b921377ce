"""What a browser may make this server do: ``Host``, ``Origin`` and ``Content-Type`` rules, and CORS.

A key-less server trusts whoever can reach it, and a browser can reach loopback on behalf of any
page it shows. Three rules close that door:

- **Host.** A page on ``evil.example`` can point its own name at 127.0.0.1 (DNS rebinding) and then
  read this server's answers as same-origin. Without keys only a ``Host`` naming loopback (or one in
  ``serve.allowedHosts``) is answered. With keys a rebinding page has no key, so ``Host`` is checked
  only when ``serve.allowedHosts`` lists names.
- **Origin.** Browsers send ``Origin`` with every cross-origin request and every POST; a request
  whose ``Origin`` is not this server's own is refused before it reaches a route, unless the server
  has keys and ``serve.corsOrigins`` names that origin (then CORS is answered for it).
- **Content-Type.** A page may POST ``text/plain`` in ``no-cors`` mode without asking first; only
  ``application/json`` is accepted, and a cross-origin JSON POST needs a preflight that is refused.

Every response carries ``X-Content-Type-Options``, ``Referrer-Policy``, ``X-Frame-Options: DENY``
and a Content-Security-Policy that lets the web page load its own scripts and styles only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from urllib.parse import unquote_to_bytes, urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._auth import is_loopback

__all__ = ["CSP", "BrowserGuard", "host_name"]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""The page loads its three scripts and one stylesheet from ``/static`` and nothing else."""

SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"content-security-policy", CSP.encode()),
]
ALLOW_METHODS = "GET, POST, DELETE"
ALLOW_HEADERS = "Authorization, Content-Type, Accept, Idempotency-Key, X-Chat-Key"
EXPOSE_HEADERS = "X-Shipagent-Ignored"
HOST_EXEMPT = frozenset({"/healthz"})
"""Health probes name the instance by address (a load balancer, Kubernetes): no secrets there."""


_HOST = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9._-]+)(?::[0-9]{1,5})?")
"""``name[:port]`` or ``[v6]:port``: a bounded header, no nested quantifier, so matching is linear."""


def host_name(host: str) -> str:
    """``host[:port]`` without its port (``[::1]:8000`` → ``[::1]``), lower-cased.

    A value that is not a host and an optional port (``localhost:80@evil.com``, ``[::1]evil``)
    comes back whole, so it names no loopback address and no allowed host.
    """
    host = host.strip().lower()
    match = _HOST.fullmatch(host)
    return match.group(1) if match is not None else host


def _path_refusal(scope: Scope) -> str | None:
    """Why the request's path is not text: percent-escapes that decode to invalid UTF-8.

    Starlette would turn each bad byte into U+FFFD, so ``/v1/chats/web:%FF`` and
    ``/v1/chats/web:%FE`` (or an encoded lone surrogate, ``%ED%A0%80``) would name one same chat.
    """
    raw = scope.get("raw_path")
    if not isinstance(raw, bytes) or b"%" not in raw:
        return None
    try:
        unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"the request path is not UTF-8 once percent-decoded (byte {exc.start}); encode chat keys as UTF-8"
    return None


def _origin_netloc(origin: str) -> str | None:
    """The ``host[:port]`` of an ``Origin`` header, or ``None`` for ``null`` and garbage."""
    try:
        parts = urlsplit(origin)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return parts.netloc.lower()


def _default_port(netloc: str, scheme: str) -> str:
    """``netloc`` without an explicit default port (``host:443`` over https is ``host``)."""
    default = {"http": ":80", "https": ":443"}.get(scheme, "")
    return netloc[: -len(default)] if default and netloc.endswith(default) else netloc


class BrowserGuard:
    """ASGI middleware enforcing the rules in the module docstring before any route runs."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        keys: bool,
        allowed_hosts: Sequence[str] = (),
        cors_origins: Sequence[str] = (),
    ) -> None:
        self.app = app
        self.keys = keys
        self.allowed_hosts = frozenset(h.lower() for h in allowed_hosts)
        self.cors_origins = frozenset(o.lower().rstrip("/") for o in cors_origins) if keys else frozenset()

    # -- the rules -------------------------------------------------------------------------------

    def host_refusal(self, host: str | None) -> str | None:
        if host is None:
            return "the request has no Host header"
        if not self.keys or self.allowed_hosts:
            name = host_name(host)
            if is_loopback(name) or host.lower() in self.allowed_hosts or name in self.allowed_hosts:
                return None
            where = "loopback names or serve.allowedHosts" if not self.keys else "serve.allowedHosts"
            return f"Host {host!r} is not served here: this server answers only {where}"
        return None

    def origin_refusal(self, origin: str, host: str | None, scheme: str) -> str | None:
        """``None`` when ``origin`` is this server's own page or a listed CORS origin."""
        netloc = _origin_netloc(origin)
        if netloc is not None and host is not None:
            own = _default_port(host.lower(), scheme)
            theirs = _default_port(netloc, urlsplit(origin).scheme)
            if theirs == own or (theirs == host.lower()):
                return None
        if origin.lower().rstrip("/") in self.cors_origins:
            return None
        hint = (
            "add it to serve.corsOrigins to let its pages call this server"
            if self.keys
            else "a server without serve.apiKeys answers its own page only"
        )
        return f"Origin {origin!r} is not this server's own; {hint}"

    # -- ASGI ------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host")
        origin = headers.get("origin")
        method = scope["method"]
        if scope["path"] not in HOST_EXEMPT and (why := self.host_refusal(host)):
            await _refuse(send, 400, "host_not_allowed", why)
            return
        if why := _path_refusal(scope):
            await _refuse(send, 400, "invalid_path", why)
            return
        if origin is not None and (why := self.origin_refusal(origin, host, scope.get("scheme", "http"))):
            await _refuse(send, 403, "origin_not_allowed", why)
            return
        cors = origin is not None and origin.lower().rstrip("/") in self.cors_origins
        if method == "OPTIONS" and cors and "access-control-request-method" in headers:
            await _preflight(send, origin or "")
            return
        if method in ("POST", "PUT", "PATCH"):
            kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if kind != "application/json":
                got = f"'{kind}'" if kind else "none"
                await _refuse(
                    send,
                    415,
                    "unsupported_media_type",
                    f"send the body as 'Content-Type: application/json' (got {got})",
                )
                return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                out = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS:
                    if name.decode() not in out:
                        out.raw.append((name, value))
                if cors and origin is not None:
                    out["Access-Control-Allow-Origin"] = origin
                    out["Access-Control-Expose-Headers"] = EXPOSE_HEADERS
                    out.add_vary_header("Origin")
            await send(message)

        await self.app(scope, receive, with_headers)


async def _refuse(send: Send, status: int, kind: str, message: str) -> None:
    body = json.dumps({"error": {"type": kind, "message": message}}).encode() + b"\n"
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *SECURITY_HEADERS,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _preflight(send: Send, origin: str) -> None:
    headers = [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-allow-methods", ALLOW_METHODS.encode()),
        (b"access-control-allow-headers", ALLOW_HEADERS.encode()),
        (b"access-control-max-age", b"600"),
        (b"vary", b"Origin"),
        (b"content-length", b"0"),
        *SECURITY_HEADERS,
    ]
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})
