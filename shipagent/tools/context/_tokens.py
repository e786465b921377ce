"""Session tokens: a secret per agent session that provider tools can check.

A provider tool's backend (a daemon, a web service) needs to know that a call comes from a live
session of a given agent. The token is that proof: 256 bits from :mod:`secrets`, known to the
session (``current_tool_context().session_token``) and to this store, and worthless once revoked.
"""

from __future__ import annotations

import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = ["SessionToken", "SessionTokenStore"]

_TOKEN = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class SessionToken:
    """One issued token and whom it belongs to."""

    token: str
    agent_name: str
    session_id: str | None
    created_at: datetime


class SessionTokenStore:
    """Issues, checks and revokes session tokens (in memory: tokens die with the process).

    One session holds one token: generating again for the same agent and session id revokes the
    earlier token, so re-preparing a chat's context does not pile up live secrets.
    """

    def __init__(self) -> None:
        self._by_token: dict[str, SessionToken] = {}
        self._by_session: dict[tuple[str, str], str] = {}

    def generate(self, agent_name: str, session_id: str | None = None) -> str:
        """Issue a new 64-character lowercase hex token for ``agent_name``'s session."""
        token = secrets.token_hex(32)
        if session_id is not None:
            previous = self._by_session.get((agent_name, session_id))
            if previous is not None:
                self._by_token.pop(previous, None)
            self._by_session[(agent_name, session_id)] = token
        self._by_token[token] = SessionToken(token, agent_name, session_id, datetime.now(UTC))
        return token

    def validate(self, token: str | None) -> SessionToken | None:
        """The live token record for ``token``, or ``None`` if it is malformed, unknown or revoked."""
        if not isinstance(token, str) or not _TOKEN.fullmatch(token):
            return None
        record = self._by_token.get(token)
        # compare_digest keeps the final comparison constant-time even though the lookup is hashed
        if record is None or not hmac.compare_digest(record.token, token):
            return None
        return record

    def revoke(self, agent_name: str) -> int:
        """Revoke every token of ``agent_name``; returns how many were live."""
        doomed = [t for t, record in self._by_token.items() if record.agent_name == agent_name]
        for token in doomed:
            del self._by_token[token]
        for key in [k for k in self._by_session if k[0] == agent_name]:
            del self._by_session[key]
        return len(doomed)

    def __len__(self) -> int:
        return len(self._by_token)
