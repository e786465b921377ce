"""API keys for ``shipagent serve``: who may call, and which chats each caller may touch.

A key is a bearer secret with optional chat-key glob patterns (``web:*``). Checking a key compares
it against *every* configured key with :func:`hmac.compare_digest` over fixed-length digests, so
neither the time taken nor an early exit tells a caller how much of a guess was right. Keys never
leave this module: the access log and error texts name a key only by its position (``key #2``).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from ...config import ServeApiKey
from ...errors import ConfigError

__all__ = ["ApiKey", "Auth", "is_loopback"]


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One configured key: its position (for logs), digest, and chat-key patterns (``None``: all)."""

    index: int
    digest: bytes
    patterns: tuple[str, ...] | None

    def allows(self, chat_key: str) -> bool:
        """Whether this key may touch ``chat_key`` (glob match, case-sensitive)."""
        return self.patterns is None or any(fnmatchcase(chat_key, p) for p in self.patterns)

    @property
    def label(self) -> str:
        return f"key #{self.index + 1}"


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


def _as_key(index: int, item: ServeApiKey | Mapping[str, Any] | str) -> ApiKey:
    if isinstance(item, str):
        item = ServeApiKey(key=item)
    elif not isinstance(item, ServeApiKey):
        try:
            item = ServeApiKey.model_validate(item)
        except ValueError as exc:
            raise ConfigError(f"serve api_keys[{index}]: {exc}", path=f"serve.apiKeys[{index}]") from None
    patterns = tuple(item.chat_keys) if item.chat_keys is not None else None
    return ApiKey(index, _digest(item.key), patterns)


class Auth:
    """The configured keys; with none, every request is let through (loopback only)."""

    def __init__(self, keys: Sequence[ServeApiKey | Mapping[str, Any] | str]) -> None:
        self.keys = [_as_key(i, k) for i, k in enumerate(keys)]

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    def authenticate(self, authorization: str | None) -> ApiKey | None:
        """The key an ``Authorization: Bearer …`` header carries, or ``None`` when it matches none."""
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        digest = _digest(token.strip())
        found: ApiKey | None = None
        for key in self.keys:  # no early exit: every key is compared
            if hmac.compare_digest(digest, key.digest) and found is None:
                found = key
        return found


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (an address or ``localhost``) is on this machine only."""
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
