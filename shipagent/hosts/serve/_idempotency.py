"""``Idempotency-Key`` without a durable queue: a key runs at most one turn; a reuse is a 409.

The key becomes the turn's request id. In durable mode the queue keys turns by it, so a retry
joins the turn already queued. A plain server has no such record, and running the same key twice
gave two turns with one request id. Replaying the first answer would need every result kept (and a
stream cannot be replayed), so a plain server **refuses a reused key with 409** while it remembers
it, and says where the first turn's answer is (the chat's transcript). A turn that committed
nothing (it failed, its client left mid-stream, it raised) releases its key, so the natural
retry, the same request after a dropped connection or a provider error, runs.

The memory is this process's (the last :data:`REMEMBERED` keys); a restart forgets it. Use
durable mode when retries must be exactly-once across restarts.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from types import TracebackType

from ..._cache import BoundedCache
from ...events import Done, RunEvent
from ...results import AgentResult
from ._wire import ApiError

__all__ = ["REMEMBERED", "Claim", "IdempotencyKeys"]

REMEMBERED = 10_000


class Claim:
    """One turn's hold on its key: kept when the turn committed, released otherwise."""

    def __init__(self, keys: IdempotencyKeys | None, key: str | None) -> None:
        self._keys = keys
        self._key = key
        self._settled = keys is None or key is None

    def ran(self) -> None:
        """The turn reached its result: the key stays used."""
        if not self._settled and self._keys is not None and self._key is not None:
            self._keys.finished(self._key)
        self._settled = True

    def release(self) -> None:
        """The turn did not run to its end: the key may be used again."""
        if not self._settled and self._keys is not None and self._key is not None:
            self._keys.forget(self._key)
        self._settled = True

    def settle(self, result: AgentResult) -> AgentResult:
        """Keep the key if ``result`` is a committed turn, release it if the turn failed."""
        self.ran() if result.success else self.release()
        return result

    async def watch(self, events: AsyncGenerator[RunEvent, None]) -> AsyncGenerator[RunEvent, None]:
        """``events`` of a streamed turn, settling the key by its :class:`Done` (released if none)."""
        try:
            async with aclosing(events) as stream:
                async for event in stream:
                    if isinstance(event, Done):
                        self.settle(event.result)
                    yield event
        finally:
            self.release()  # no Done: the turn raised or its consumer left; nothing was committed

    def __enter__(self) -> Claim:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.ran() if kind is None else self.release()


class IdempotencyKeys:
    """Keys seen by this process: ``running`` or ``done``, the least recently written forgotten first."""

    def __init__(self, enabled: bool, remembered: int = REMEMBERED) -> None:
        self.enabled = enabled
        self._seen: BoundedCache[str, str] = BoundedCache(remembered)

    @property
    def remembered(self) -> int:
        """How many keys are kept (the oldest goes first beyond it)."""
        return self._seen.max_size

    def claim(self, key: str | None, scope: str) -> Claim:
        """Hold ``key`` for a new turn; 409 when a turn with it runs or ran.

        ``scope`` (the chat key) keeps one chat's keys apart from another's: unscoped, a user allowed
        only ``web:*`` could claim the key another user's client will send, making its turn a 409,
        and learn from a 409 which keys other chats used.
        """
        if not self.enabled or key is None:
            return Claim(None, None)
        sent = key
        key = f"{scope}\n{key}"  # a chat key holds no newline
        state = self._seen.peek(key)  # a refused retry does not keep the key longer
        if state == "running":
            raise ApiError(
                409,
                "idempotency_key_in_use",
                f"a turn with Idempotency-Key {sent!r} is still running; wait for it, then read the "
                "chat's transcript for its answer",
            )
        if state == "done":
            raise ApiError(
                409,
                "idempotency_key_reused",
                f"Idempotency-Key {sent!r} already ran a turn; its answer is in the chat's transcript. "
                "Send a new key for a new turn",
            )
        self._seen[key] = "running"
        return Claim(self, key)

    def finished(self, key: str) -> None:
        self._seen[key] = "done"

    def forget(self, key: str) -> None:
        self._seen.pop(key, None)
