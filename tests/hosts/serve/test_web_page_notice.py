"""The web page's "older messages were summarised" line, and the SSE event that carries it.

Small watermarks (``inMemoryMaxMessages`` 4, keep 2) make the chat compact every few turns. The
real server under uvicorn, Debian's chromium through Playwright, a scripted model that streams.
The ground truth of which turn compacted is the chat's message log on disk.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent import ShipAgent
from shipagent.events import Compacted
from shipagent.hosts.serve import create_app
from tests.support.core import last_user_text, read_jsonl
from tests.support.web import serve_in_thread

CHAT = "web:notice"
TURNS = 4


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    text = f"noted: {last_user_text(messages)}"
    for start in range(0, len(text), 5):
        yield text[start : start + 5]
        await asyncio.sleep(0.01)


def _agent(root: Path, *, notice: bool) -> ShipAgent:
    root.mkdir(parents=True)
    history: dict[str, Any] = {"inMemoryMaxMessages": 4, "compactKeepLastMessages": 2, "notice": notice}
    (root / "ship.json").write_text(json.dumps({"context": {"chatHistory": history}}), encoding="utf-8")
    return ShipAgent.from_project(root, model=FunctionModel(stream_function=_stream, model_name="notes"))


def _compactions(agent: ShipAgent, chat: str) -> int:
    path = agent.paths.message_log(chat)
    return sum(1 for r in read_jsonl(path) if r.get("t") == "compaction") if path.exists() else 0


@pytest.fixture
def page(browser: Any) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert errors == [], f"the page threw: {errors}"


def _send(page: Page, text: str) -> Any:
    """Send ``text`` and wait for its turn to finish; returns that turn's element."""
    finished = page.locator(".turn.finished").count()
    page.fill("#input", text)
    page.press("#input", "Enter")
    page.wait_for_selector(f".turn.finished >> nth={finished}", state="attached")
    return page.locator(".turn").nth(finished)


@pytest.mark.parametrize("notice", [True, False])
def test_the_page_shows_one_muted_line_under_a_turn_that_compacted(
    page: Page, tmp_path: Path, notice: bool
) -> None:
    agent = _agent(tmp_path / "project", notice=notice)
    compacted_turns = []
    with serve_in_thread(create_app(agent)) as base:
        page.goto(base + "/#web%3Anotice")
        for n in range(TURNS):
            before = _compactions(agent, CHAT)
            turn = _send(page, f"fact {n}")
            expect(turn.locator(".bubble.md")).to_have_text(f"noted: fact {n}")
            line = turn.locator(".note.compacted")
            if _compactions(agent, CHAT) > before:
                compacted_turns.append(n)
                if notice:
                    expect(line).to_have_count(1)
                    expect(line).to_have_text(Compacted.NOTICE)
                    # the last thing of the turn: under the answer and its usage line
                    last = turn.locator(".turn-body > :not(.typing)").last
                    expect(last).to_have_class("note compacted")
                    color = line.evaluate("el => getComputedStyle(el).color")
                    answer = turn.locator(".bubble.md").evaluate("el => getComputedStyle(el).color")
                    assert color != answer  # muted, not the answer's colour
                    continue
            expect(turn.locator(".note")).to_have_count(0)  # no line of any kind
        page.screenshot(path=str(tmp_path / f"notice-{notice}.png"), full_page=True)
    assert compacted_turns and compacted_turns[0] > 0  # the marks made turns compact, not the first


def test_the_sse_compacted_event_carries_the_line_or_null(tmp_path: Path) -> None:
    for notice in (True, False):
        agent = _agent(tmp_path / f"p-{notice}", notice=notice)
        seen: list[dict[str, Any]] = []
        with serve_in_thread(create_app(agent)) as base, httpx.Client(base_url=base, timeout=30) as client:
            for n in range(TURNS):
                body = {"text": f"fact {n}", "stream": True}
                with client.stream("POST", f"/v1/chats/{CHAT}/messages", json=body) as response:
                    name = None
                    for line in response.iter_lines():
                        if line.startswith("event: "):
                            name = line.removeprefix("event: ")
                        elif line.startswith("data: ") and name == "compacted":
                            seen.append(json.loads(line.removeprefix("data: ")))
            compactions = _compactions(agent, CHAT)
        assert len(seen) == compactions >= 1, (notice, seen)
        for data in seen:
            assert data["notice"] == (Compacted.NOTICE if notice else None)
            assert data["removed"] > 0 and data["kept"] > 0
