"""The hosts' sections of ship.json: ``serve`` (the HTTP server) and ``durable`` (durable turns).

They are part of :class:`shipagent.config.ShipConfig` and exported from :mod:`shipagent.config`;
they live here so that the model of the whole file stays readable.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from ._config_base import ConfigModel as _Model

__all__ = ["DurableConfig", "ServeApiKey", "ServeConfig", "ServeLimits"]


class DurableConfig(_Model):
    """``durable``: run each turn as a DBOS workflow; see ``shipagent.hosts.durable``.

    ``database`` is ``"sqlite"`` (a system database at ``.ship/durable.sqlite``, one machine) or a
    ``postgresql://`` URL (usually ``"${DATABASE_URL}"``) shared by every worker of a cluster.
    """

    enabled: bool = False
    database: str = "sqlite"
    executor_id: str | None = None
    """Stable across restarts of one worker; default: the first ``<hostname>:<n>`` no live worker holds (see ``shipagent.hosts.durable``)."""
    recover_after_seconds: float = Field(default=30, gt=0)

    @field_validator("database")
    @classmethod
    def _known_database(cls, value: str) -> str:
        if value == "sqlite" or value.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
            return value
        raise ValueError('must be "sqlite" or a postgresql:// URL')

    @field_validator("executor_id")
    @classmethod
    def _usable_executor_id(cls, value: str | None) -> str | None:
        if value is not None and not (0 < len(value) <= 200 and value.isprintable()):
            raise ValueError("must be 1-200 printable characters")
        return value


class ServeApiKey(_Model):
    """``serve.apiKeys[]``: a bearer key for ``shipagent serve`` and the chats it may touch."""

    key: str = Field(min_length=16, repr=False)
    """The secret clients send as ``Authorization: Bearer …`` (write ``${WEB_KEY}``, not the key)."""
    chat_keys: list[str] | None = None
    """Glob patterns of chat keys this key may use (``["web:*"]``); omitted means every chat."""


class ServeConfig(_Model):
    """``serve``: the HTTP server (``shipagent serve``)."""

    api_keys: list[ServeApiKey] = Field(default_factory=list)
    """Without keys the server answers anyone who can reach it, so it binds to loopback only."""
    shutdown_grace_seconds: float = Field(default=30, ge=0)
    """On SIGTERM, how long running turns may go on before they are cancelled."""
    approval_timeout_seconds: float = Field(default=120, gt=0)
    """How long a streamed turn waits for ``POST /v1/approvals/{id}`` before it counts as refused."""
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    """Larger request bodies are refused with 413."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """``Host`` names answered besides loopback (``agent.example.com``, ``10.0.0.5:8000``): a
    browser page that rebinds its own name to this server's address is refused."""
    cors_origins: list[str] = Field(default_factory=list)
    """Origins (``https://app.example.com``) whose pages may call this server; needs ``apiKeys``."""
    limits: ServeLimits = Field(default_factory=lambda: ServeLimits())
    """How much a slow, idle or greedy client may hold (``shipagent serve`` only)."""

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, hosts: list[str]) -> list[str]:
        for host in hosts:
            if not host or "/" in host or any(c.isspace() for c in host):
                raise ValueError(f"{host!r} is not a host name (write agent.example.com or host:port)")
        return [h.lower() for h in hosts]

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        for origin in origins:
            scheme, sep, rest = origin.partition("://")
            if scheme not in ("http", "https") or not sep or not rest or "/" in rest:
                raise ValueError(f"{origin!r} is not an origin (write https://app.example.com, no path)")
        return [o.lower() for o in origins]


class ServeLimits(_Model):
    """``serve.limits``: bounds on what one connection or client may hold, so none locks others out."""

    max_header_bytes: int = Field(default=16 * 1024, ge=1024)
    """A request line plus headers larger than this is refused (400) and the connection closed."""
    header_timeout_seconds: float = Field(default=10, gt=0)
    """A request's line and headers must arrive within this time (idle new connections too)."""
    body_timeout_seconds: float = Field(default=30, gt=0)
    """A request's body must arrive within this time after its headers."""
    keep_alive_seconds: int = Field(default=30, ge=1)
    """An idle keep-alive connection is closed after this long without a new request."""
    max_connections: int = Field(default=512, ge=1)
    """Open connections in all; more are closed at once (lowered to fit the open-file limit)."""
    max_connections_per_client: int = Field(default=64, ge=0)
    """Open connections from one address; ``0``: no limit (behind a proxy every client is its address)."""
