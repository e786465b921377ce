"""Fixtures of the server tests: a real browser (Debian's chromium through Playwright).

Servers are started per test file, each with the app options it checks (``tests.support.serve``
and ``tests.support.web`` run the real app under uvicorn on 127.0.0.1).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import sync_playwright

from tests.support.web import launch_chromium


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One chromium per test file: starting it costs more than most page tests."""
    with sync_playwright() as p:
        browser = launch_chromium(p)
        yield browser
        browser.close()
