"""The web page, in a real browser, when its chat is over budget: the refusal shows as the answer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from shipagent import ShipAgent
from shipagent.hosts.serve import create_app
from tests.support.web import StreamingScript, chunks, serve_in_thread


@pytest.fixture
def page(browser: Any) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1100, "height": 760})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    context.close()
    assert errors == [], f"the page threw: {errors}"


def test_a_chat_over_budget_says_which_budget_and_when_it_resets(page: Page, tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (root / "ship.json").write_text(
        json.dumps({"context": {"budgets": {"tokensPerDay": 5}}}), encoding="utf-8"
    )
    script = StreamingScript(lambda text, result: chunks(f"echo: {text}", 4), pause=0.01)
    agent = ShipAgent.from_project(root, model=script.model)
    agent.clock = lambda: datetime(2026, 3, 10, 21, 48, tzinfo=UTC)  # never a new day mid-test
    with serve_in_thread(create_app(agent)) as url:
        page.goto(url + "/")
        expect(page.locator(".empty")).to_be_visible()
        page.fill("#input", "first")  # crosses the 5-token budget, and completes
        page.press("#input", "Enter")
        expect(page.locator(".turn .bubble.md").first).to_have_text("echo: first")
        page.fill("#input", "second")
        page.press("#input", "Enter")
        refusal = page.locator(".turn .note.error").last
        expect(refusal).to_contain_text("context.budgets.tokensPerDay")
        expect(refusal).to_contain_text("resets at 00:00 UTC (in 2 h 12 min)")
    assert agent.history(page.input_value("#chat-key")) != []  # the first turn is kept
