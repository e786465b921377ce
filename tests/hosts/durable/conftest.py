"""Fixtures of the durable tests: the DBOS system database a test runs on.

Worker processes and durable projects are plain helpers in ``tests.support.durable`` (tests
start and kill workers at chosen moments, which a fixture's lifetime cannot express).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.postgres import fresh_database


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest) -> Iterator[str]:
    """ship.json ``durable.database`` for a test run on both: ``sqlite``, then a fresh Postgres one."""
    if request.param == "sqlite":
        yield "sqlite"
        return
    with fresh_database(request.getfixturevalue("postgres_server")) as url:
        yield url
