"""People's names, looked up by ``open_id`` through Feishu's contact API, kept for a while.

Why: Feishu's message events and card callbacks carry who wrote (the ``open_id``, ``ou_…``) but no
name, so without a lookup the model sees ids and a refused approval says "Only ou_… can answer
this". ``GET /open-apis/contact/v3/users/:user_id?user_id_type=open_id`` (lark-oapi's
``contact.v3.user.get``) gives the name; it needs the app scope ``contact:user.base:readonly``.

The lookup never fails a turn: without the scope, for a person outside the app's contact range,
or when Feishu does not answer, the name is the ``open_id`` (said once in the log, not per
message). Names are kept per ``open_id`` (at most :data:`KEEP` of them, each for :data:`TTL`
seconds, a failed lookup for :data:`RETRY` seconds), so a busy chat asks once per person, and a
renamed person shows the new name within the hour. The call is blocking (lark-oapi uses
``requests``), so it runs in a worker thread, and a message waits for it at most :data:`WAIT`
seconds (the event is acknowledged only once it is recorded, so a hung lookup must not hold it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread

from ...._cache import BoundedCache

__all__ = ["KEEP", "RETRY", "TTL", "WAIT", "Names"]

log = logging.getLogger("shipagent.hosts.channels.feishu")

KEEP = 2048
"""At most this many names are kept (the least recently used goes first)."""
TTL = 3600.0
"""A name is asked again after this many seconds."""
RETRY = 600.0
"""After a failed lookup, the ``open_id`` stands in for the name this many seconds."""
WAIT = 5.0
"""A lookup slower than this is given up (the ``open_id`` stands in)."""
SCOPE = "contact:user.base:readonly"


class Names:
    """``await names.of(open_id)``: the person's name, or the ``open_id`` when Feishu will not say."""

    def __init__(
        self,
        client: Any,
        clean: Callable[[str], str],
        *,
        keep: int = KEEP,
        ttl: float = TTL,
        wait: float = WAIT,
    ) -> None:
        self._client = client
        self._clean = clean  # hides the app secret in what is logged
        self._ttl = ttl
        self._wait = wait
        self._known: BoundedCache[str, tuple[str, float]] = BoundedCache(keep)  # open_id -> (name, until)
        self._warned = False
        self.lookups = 0
        """How many times Feishu was asked (a cached name asks nothing)."""

    async def of(self, open_id: str) -> str:
        if not open_id.startswith("ou_"):
            return open_id
        now = time.monotonic()
        kept = self._known.peek(open_id)
        if kept is not None and kept[1] > now:
            self._known.get(open_id)  # a name in use is the last to go
            return kept[0]
        name: str = ""
        problem: str | None = f"no answer within {self._wait:g} s"
        with anyio.move_on_after(self._wait):
            name, problem = await anyio.to_thread.run_sync(self._ask, open_id, abandon_on_cancel=True)
        if problem is not None and not self._warned:
            self._warned = True
            log.warning(
                "feishu: people are named by open_id, the contact API refused: %s (the app needs "
                "the scope %s; said once)",
                self._clean(problem),
                SCOPE,
            )
        self._known[open_id] = (name or open_id, now + (self._ttl if name else RETRY))
        return name or open_id

    def _ask(self, open_id: str) -> tuple[str, str | None]:
        """On a worker thread: (the name, ``None``) or (``""``, what went wrong)."""
        from lark_oapi.api.contact.v3 import GetUserRequest  # type: ignore[import-untyped]

        self.lookups += 1
        request = GetUserRequest.builder().user_id(open_id).user_id_type("open_id").build()
        try:
            response = self._client.contact.v3.user.get(request)
        except Exception as exc:  # a lookup never fails the turn
            return "", f"{type(exc).__name__}: {exc}"
        if not response.success():
            return "", f"{response.code} {response.msg}"
        user = response.data.user if response.data is not None else None
        name = str(getattr(user, "name", None) or "").strip()
        return (name, None) if name else ("", "the answer had no name")
