"""Test-wide settings: no test may reach a real model provider."""

from __future__ import annotations

import pytest
from pydantic_ai import models

# one throwaway Postgres cluster per test session, and a fresh database on it per test
from tests.support.durable import database, pg_database, postgres_server  # noqa: F401

models.ALLOW_MODEL_REQUESTS = False


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
