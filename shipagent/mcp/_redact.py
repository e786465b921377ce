"""Keep secrets out of logs, failure reasons and ``shipagent mcp list``.

ship.json is expanded before anyone sees it, so by the time a server fails, a token that came from
``${GITHUB_TOKEN}`` is an ordinary string inside a URL, a header, an env value or an error message
from the HTTP stack. We collect the strings that may be secret — every value a ``${VAR}`` in the
project's config files refers to, every ``env`` and ``headers`` value, URL passwords and query
values — and replace them wherever they occur in text we print.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from .._env import merged_environment
from ..config import McpHttpServer, McpServerConfig

__all__ = ["MASK", "Redactor", "safe_url"]

MASK = "***"
_MIN_SECRET_LENGTH = 4  # shorter values ("1", "on") are not secrets and would mangle every message
_VAR_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")
_CONFIG_FILES = ("ship.json", ".ship/mcp/mcp.json")


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

    def __call__(self, text: str) -> str:
        """``text`` with every known secret replaced by ``***``."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text
