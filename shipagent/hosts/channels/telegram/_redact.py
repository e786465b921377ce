"""Keeping the bot token out of logs.

The Bot API puts the token in every URL (``/bot<token>/getUpdates``), and httpx logs each request's
URL at INFO; PTB's debug logs carry URLs too. A filter on those loggers rewrites any record holding
the token before a handler sees it, whatever handlers the application installed.
"""

from __future__ import annotations

import logging

__all__ = ["TokenFilter"]

_PREFIXES = ("httpx", "httpcore", "telegram")


class TokenFilter(logging.Filter):
    """Replaces ``token`` with ``<token>`` in every record of the HTTP and PTB loggers."""

    def __init__(self, token: str) -> None:
        super().__init__("shipagent-token-redaction")
        self.token = token
        self._installed: list[logging.Logger] = []

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # a malformed record is not ours to fix
            return True
        if self.token in text:
            record.msg = text.replace(self.token, "<token>")
            record.args = None
        if record.exc_text and self.token in record.exc_text:
            record.exc_text = record.exc_text.replace(self.token, "<token>")
        return True

    def clean(self, text: str) -> str:
        """``text`` without the token."""
        return text.replace(self.token, "<token>")

    def install(self) -> None:
        """Attach to every existing logger of httpx, httpcore and PTB (they exist once imported)."""
        names = [n for n in logging.root.manager.loggerDict if n.split(".")[0] in _PREFIXES]
        for name in {*names, *_PREFIXES}:
            logger = logging.getLogger(name)
            logger.addFilter(self)
            self._installed.append(logger)

    def remove(self) -> None:
        """Detach from every logger :meth:`install` attached to."""
        for logger in self._installed:
            logger.removeFilter(self)
        self._installed.clear()
