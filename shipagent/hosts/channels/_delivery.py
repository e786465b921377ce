"""Delivery with retries: a send that fails for a passing reason is tried again with backoff.

Flood control says how long to wait (``retry_after``) and that wait is honoured exactly; other
transient failures (network) wait 0.5 s, 1 s, 2 s, … up to ``attempts`` tries. A permanent
failure is raised at once. Formatted text the platform cannot parse goes again as plain text.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from ._types import MarkupRejected, TransientSendError

__all__ = ["retrying", "with_plain_fallback"]

log = logging.getLogger("shipagent.hosts.channels")
T = TypeVar("T")


async def retrying(operation: Callable[[], Awaitable[T]], *, attempts: int = 5, base_delay: float = 0.5) -> T:
    """``operation()``, tried up to ``attempts`` times while it raises :class:`TransientSendError`."""
    for attempt in range(1, attempts + 1):
        try:
            return await operation()
        except TransientSendError as exc:
            if attempt == attempts:
                raise
            delay = exc.retry_after if exc.retry_after is not None else base_delay * 2 ** (attempt - 1)
            log.warning("channel send failed (%s); retrying in %.1f s", exc, delay)
            await anyio.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


async def with_plain_fallback(send: Callable[[bool], Awaitable[T]]) -> tuple[T, bool]:
    """``send(formatted=True)``, or ``send(False)`` if the markup was rejected; says which went."""
    try:
        return await retrying(lambda: send(True)), True
    except MarkupRejected as exc:
        log.info("formatted text was rejected (%s); sending it plain", exc)
        return await retrying(lambda: send(False)), False
