"""A minimal event bus for the injector's lifecycle events.

The injector only needs something with ``emit(event_name, payload)``; :class:`EventBus` is the
simple in-process one, for tests, logging and dashboards. A listener that raises is logged and
ignored: observing a session must never be able to break its preparation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["EventBus", "EventListener", "EventSink"]

log = logging.getLogger(__name__)

EventListener = Callable[[str, dict[str, Any]], None]
"""Receives ``(event_name, payload)``."""


class EventSink(Protocol):
    """Anything the injector can report to."""

    def emit(self, event_name: str, payload: dict[str, Any]) -> None:
        """Deliver one event."""
        ...


class EventBus:
    """Delivers events to the listeners subscribed to their name (or to ``"*"`` for all)."""

    def __init__(self) -> None:
        self._listeners: dict[str, list[EventListener]] = {}

    def subscribe(self, event_name: str, listener: EventListener) -> Callable[[], None]:
        """Call ``listener`` for every ``event_name`` event (``"*"``: every event).

        Returns:
            A function that removes this subscription again.
        """
        self._listeners.setdefault(event_name, []).append(listener)

        def unsubscribe() -> None:
            listeners = self._listeners.get(event_name, [])
            if listener in listeners:
                listeners.remove(listener)

        return unsubscribe

    def emit(self, event_name: str, payload: dict[str, Any]) -> None:
        """Deliver ``payload`` to the listeners of ``event_name``, then to the ``"*"`` listeners."""
        for listener in [*self._listeners.get(event_name, ()), *self._listeners.get("*", ())]:
            try:
                listener(event_name, payload)
            except Exception:
                log.exception("listener for %s failed", event_name)
