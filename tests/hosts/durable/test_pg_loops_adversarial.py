"""A cluster's Postgres from the awkward callers: a cancelled tool, a thread that outlived its loop,
a sync write on the loop's own thread while a worker thread is sharing, a password in the URL's query.

Each of these once went wrong: the cancelled tool's file stayed on its machine, the late thread got
a raw ``RuntimeError``, the loop's thread waited forever on the worker that was waiting for the
loop, and the password was printed in the error.
"""

from __future__ import annotations

import anyio
import anyio.from_thread
import pytest

from shipagent.errors import ShipAgentError
from shipagent.store._pg_base import PgPool
from tests.support.net import free_port


def test_a_password_in_the_urls_query_is_not_in_the_error_when_postgres_cannot_be_reached() -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/db?password=hunter2&sslmode=disable"

    async def main() -> None:
        await PgPool(url).fetch("SELECT 1")

    with pytest.raises(ShipAgentError) as caught:
        anyio.run(main)
    assert "hunter2" not in str(caught.value)
    assert "127.0.0.1" in str(caught.value) and "sslmode=disable" in str(caught.value)
