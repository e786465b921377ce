"""``Idempotency-Key`` belongs to one chat: another user's key neither blocks nor reveals anything.

A plain server remembers the keys it ran and answers a reuse with 409. Remembered for the whole
server, a key a ``web:*`` user sends on their own chat would collide with the key an admin's
client sent (or will send) on ``api:chat:bob``: the web user learns which keys ran elsewhere and
can make the admin's next turn a 409.
"""

from __future__ import annotations

import httpx
import pytest

from shipagent.hosts.serve._idempotency import IdempotencyKeys
from shipagent.hosts.serve._wire import ApiError

from .conftest import ADMIN_KEY, WEB_KEY, Hostile


def test_keys_are_remembered_per_chat() -> None:
    keys = IdempotencyKeys(enabled=True)
    with keys.claim("retry-1", scope="api:chat:bob"):
        pass
    with keys.claim("retry-1", scope="web:eve"):  # another chat: its own turn
        pass
    with pytest.raises(ApiError) as reused:
        keys.claim("retry-1", scope="api:chat:bob")
    assert reused.value.status == 409 and "'retry-1'" in str(reused.value)


def _post(hostile: Hostile, chat: str, key: str, idempotency: str) -> httpx.Response:
    return httpx.post(
        f"{hostile.url}/v1/chats/{chat}/messages",
        json={"text": "hello"},
        headers={"Authorization": f"Bearer {key}", "Idempotency-Key": idempotency},
        timeout=180,
    )


def test_another_chats_idempotency_key_is_not_shared(hostile: Hostile) -> None:
    assert _post(hostile, "api:chat:carol", ADMIN_KEY, "order-4711").status_code == 200
    answer = _post(hostile, "web:eve", WEB_KEY, "order-4711")
    assert answer.status_code == 200, answer.text


def test_the_least_recently_written_key_is_forgotten_beyond_the_bound() -> None:
    keys = IdempotencyKeys(enabled=True, remembered=2)
    with keys.claim("a", scope="web:eve"):
        pass
    with keys.claim("b", scope="web:eve"):
        pass
    with pytest.raises(ApiError):  # refused: the lookup does not make "a" recent
        keys.claim("a", scope="web:eve")
    with keys.claim("c", scope="web:eve"):  # a third key pushes out the oldest, "a"
        pass
    with keys.claim("a", scope="web:eve"):  # forgotten: runs again
        pass
    with pytest.raises(ApiError):
        keys.claim("c", scope="web:eve")
