"""Test-wide settings: no test may reach a real model provider."""

from __future__ import annotations

import pytest
from _durable_env import postgres_server  # noqa: F401 - one throwaway Postgres cluster per test session
from pydantic_ai import models

models.ALLOW_MODEL_REQUESTS = False


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
