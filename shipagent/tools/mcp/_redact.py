"""Keep secrets out of logs, failure reasons and ``shipagent mcp list``.

ship.json is expanded before anyone sees it, so by the time a server fails, a token that came from
``${GITHUB_TOKEN}`` is an ordinary string inside a URL, a header, an env value or an error message
from the HTTP stack. We collect the strings that may be secret — every value a ``${VAR}`` in the
project's config files refers to, every ``env`` and ``headers`` value, URL passwords and query
values — and replace them wherever they occur in text we print.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from ..._env import merged_environment
from ...config import McpHttpServer, McpServerConfig

__all__ = ["MASK", "Redactor", "install_log_redaction", "safe_url"]

MASK = "***"
_MIN_SECRET_LENGTH = 4  # shorter values ("1", "on") are not secrets and would mangle every message
_VAR_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")
_CONFIG_FILES = ("ship.json", ".ship/mcp/mcp.json")
_LOGGER_PREFIXES = ("httpx", "httpx2", "httpcore", "mcp", "fastmcp")
"""Libraries that log request URLs and commands (``HTTP Request: POST https://…?key=…`` at INFO)."""


def safe_url(url: str) -> str:
    """``url`` without user info, query or fragment (where tokens travel)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _url_secrets(url: str) -> list[str]:
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    found = [value for _, value in parse_qsl(parts.query)]
    if parts.password:
        found.append(parts.password)
    return found


class Redactor:
    """Replaces known secret values in text with ``***``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        unique = {s for s in secrets if len(s) >= _MIN_SECRET_LENGTH}
        # Longest first, so a secret that contains another is masked whole.
        self._secrets = sorted(unique, key=len, reverse=True)

    @classmethod
    def for_project(cls, project_root: Path, servers: Iterable[McpServerConfig]) -> Redactor:
        """Collect the secrets of ``servers`` and of every ``${VAR}`` in the project's config files."""
        env = merged_environment(project_root)
        secrets: list[str] = []
        for name in _CONFIG_FILES:
            path = project_root / name
            try:
                text = path.read_text(encoding="utf-8") if path.is_file() else ""
            except (OSError, UnicodeDecodeError):
                continue
            secrets.extend(env[var] for var in _VAR_REF.findall(text) if var in env)
        for server in servers:
            if isinstance(server, McpHttpServer):
                secrets.extend(server.headers.values())
                secrets.extend(_url_secrets(server.url))
            else:
                secrets.extend(server.env.values())
        return cls(secrets)

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def __call__(self, text: str) -> str:
        """``text`` with every known secret replaced by ``***``."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text


class _RedactingFilter(logging.Filter):
    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self._redact = redact

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = self._redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


def install_log_redaction(redact: Redactor) -> Callable[[], None]:
    """Mask secrets in what the HTTP and MCP libraries log; returns the function that undoes it.

    httpx logs every request URL at INFO and the MCP client logs the endpoint it connects to, so a
    token in a URL query would reach any log a user configures. A filter on those loggers rewrites
    the record before any handler sees it. Logger filters apply to records logged on that exact
    logger, so every existing logger under the libraries' names gets one.
    """
    if not redact:
        return lambda: None
    names = {"httpx", "httpx2", "mcp.client.streamable_http", "mcp.client.sse", "mcp.client.stdio"}
    names |= {name for name in logging.root.manager.loggerDict if name.split(".", 1)[0] in _LOGGER_PREFIXES}
    flt = _RedactingFilter(redact)
    loggers = [logging.getLogger(name) for name in sorted(names)]
    for logger in loggers:
        logger.addFilter(flt)

    def uninstall() -> None:
        for logger in loggers:
            logger.removeFilter(flt)

    return uninstall
