"""What every folder of tests shares.

- No test may reach a real model provider: ``ALLOW_MODEL_REQUESTS`` is off for the whole run.
- anyio runs async tests on asyncio.
- Postgres: one throwaway server per test session (``postgres_server``) and a fresh database on it
  per test (``pg_database``). They live here, not under ``hosts/durable``, because the core's
  store tests, the docs' runnable examples and the durable hosts all use them.

Helpers that are not fixtures (scripted models, servers, MCP server scripts) are in
``tests/support`` and imported by their absolute name (``from tests.support.core import …``):
``tests`` and each of its folders are packages, so pytest puts the repository root on ``sys.path``
and names every test module by its dotted path — two test files may share a basename.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from pydantic_ai import models

from tests.support.postgres import fresh_database, throwaway_postgres

models.ALLOW_MODEL_REQUESTS = False


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than the machine has CPUs (at most 4, ``--maxprocesses``).

    Much of the suite waits rather than computes — on worker processes, killed and restarted
    channels, sockets, Postgres — so on two CPUs a third worker cut the run from about 10 to about
    7.5 minutes, with the CPUs busy instead of idle during those waits.
    """
    return (os.cpu_count() or 1) + 1


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A server URL (database ``postgres``) for the whole session."""
    with throwaway_postgres() as url:
        yield url


@pytest.fixture
def pg_database(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database on the session's Postgres for one test."""
    with fresh_database(postgres_server) as url:
        yield url
