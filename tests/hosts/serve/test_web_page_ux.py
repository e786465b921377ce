"""The web page at 1280 and 390 px: cut answers marked, token usage shown, one error prefix.

The real server under uvicorn, Debian's chromium through Playwright, a scripted model that
streams. Each test saves screenshots in its tmp dir; what a user relies on is asserted on the
DOM: the marker under an answer the token limit (or the time limit) cut, the usage line under
every answer, a failed turn said once ("The run failed: …", never "The turn failed: The run
failed: …"), a chat whose only turn failed still listed, and an input placeholder that fits.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect
from pydantic_ai import RunContext
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import ModelRequestParameters, StreamedResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.settings import ModelSettings

from shipagent import ShipAgent
from shipagent.hosts.serve import create_app
from tests.support.core import last_user_text
from tests.support.web import serve_in_thread

WHOLE = "A whole answer, streamed in pieces."
CUT = "This answer stops where the token limit"
SLOW = "This answer was still being written when"
USAGE = re.compile(r"^tokens in \d+ · out \d+ · 1 request$")

# What fits the placeholder: its rendered width against the textarea's room for text.
PLACEHOLDER_FITS = """() => {
  const el = document.getElementById("input");
  const style = getComputedStyle(el);
  const ctx = document.createElement("canvas").getContext("2d");
  ctx.font = style.font;
  const room = el.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  return { text: el.placeholder, width: ctx.measureText(el.placeholder).width, room };
}"""


class _Script(FunctionModel):
    """Streams by the user's words: "cut" stops at the token limit, "slow" hangs, "fail" breaks."""

    def __init__(self) -> None:
        super().__init__(stream_function=self._stream, model_name="page-script")

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        said = last_user_text(messages)
        if "fail" in said:
            raise RuntimeError("the scripted model broke")
        text = CUT if "cut" in said else SLOW if "slow" in said else WHOLE
        for start in range(0, len(text), 6):
            yield text[start : start + 6]
            await asyncio.sleep(0.02)
        if "slow" in said:
            await asyncio.sleep(3600)  # until llm.timeoutSeconds cuts it

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        async with super().request_stream(
            messages, model_settings, model_request_parameters, run_context
        ) as response:
            if "cut" in last_user_text(messages):
                response.finish_reason = "length"  # as a provider's last chunk says it
            yield response


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "project"
    root.mkdir()
    (root / "ship.json").write_text(json.dumps({"llm": {"timeoutSeconds": 3}}), encoding="utf-8")
    agent = ShipAgent.from_project(root, model=_Script())
    with serve_in_thread(create_app(agent)) as base:
        yield base


def _page(browser: Any, width: int) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": width, "height": 860})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert errors == [], f"the page threw: {errors}"


@pytest.fixture
def wide(browser: Any) -> Iterator[Page]:
    yield from _page(browser, 1280)


@pytest.fixture
def narrow(browser: Any) -> Iterator[Page]:
    yield from _page(browser, 390)


def send(page: Page, text: str) -> Any:
    """Send ``text`` and wait for its turn to finish; returns that turn's element."""
    finished = page.locator(".turn.finished").count()
    page.fill("#input", text)
    page.press("#input", "Enter")
    page.wait_for_selector(f".turn.finished >> nth={finished}", state="attached")
    return page.locator(".turn").nth(finished)


def test_wide_page_marks_cut_answers_shows_usage_and_says_a_failure_once(
    wide: Page, url: str, tmp_path: Path
) -> None:
    page = wide
    page.goto(url + "/#web%3Aux")
    fits = page.evaluate(PLACEHOLDER_FITS)
    assert "Shift+Enter" in fits["text"] and fits["width"] <= fits["room"], fits

    whole = send(page, "hello")
    expect(whole.locator(".bubble.md")).to_have_text(WHOLE)
    expect(whole.locator(".usage")).to_have_text(USAGE)
    assert whole.locator(".note.cut").count() == 0  # a whole answer has no marker

    cut = send(page, "please cut it short")
    expect(cut.locator(".bubble.md")).to_have_text(CUT)
    marker = cut.locator(".note.cut")
    expect(marker).to_be_visible()
    expect(marker).to_have_attribute("data-finish-reason", "length")
    expect(marker).to_contain_text("token limit")
    expect(cut.locator(".usage")).to_have_text(USAGE)

    slow = send(page, "a slow one")
    expect(slow.locator(".bubble.md")).to_have_text(SLOW)  # what arrived stays on screen
    expect(slow.locator(".note.cut")).to_have_attribute("data-finish-reason", "timeout")
    expect(slow.locator(".note.cut")).to_contain_text("time limit")
    expect(slow.locator(".usage")).to_have_text(USAGE)

    failed = send(page, "now fail")
    error = failed.locator(".note.error")
    expect(error).to_be_visible()
    text = error.text_content() or ""
    assert text.startswith("The run failed: ") and text.count("failed") == 1, text
    assert failed.locator(".note.cut").count() == 0
    page.locator("#input").blur()
    page.screenshot(path=str(tmp_path / "ux-1280.png"), full_page=True)

    # the cut answers were kept (the timed-out one with the text that had arrived); the failed
    # turn left nothing
    page.reload()
    expect(page.locator("#messages .bubble")).to_have_count(6)
    assert page.locator("#messages .bubble").all_text_contents() == [
        "hello",
        WHOLE,
        "please cut it short",
        CUT,
        "a slow one",
        SLOW,
    ]


def test_a_chat_whose_only_turn_failed_stays_listed(wide: Page, url: str) -> None:
    page = wide
    page.goto(url + "/#web%3Aearlier")
    send(page, "hello")
    page.goto(url + "/#web%3Abroken")
    send(page, "fail right away")
    item = page.locator('.chat-item[data-chat-key="web:broken"]')
    expect(item).to_be_visible()
    expect(item).to_have_class(re.compile(r"\bactive\b"))
    expect(item.locator(".chat-item-when")).to_have_text("not saved")
    expect(page.locator('.chat-item[data-chat-key="web:earlier"]')).to_be_visible()
    page.click('.chat-item[data-chat-key="web:earlier"]')  # moving away keeps it listed
    expect(item).to_be_visible()


def test_narrow_page_fits_the_placeholder_and_shows_the_marker(
    narrow: Page, url: str, tmp_path: Path
) -> None:
    page = narrow
    page.goto(url + "/#web%3Aphone")
    fits = page.evaluate(PLACEHOLDER_FITS)
    assert fits["text"] and fits["width"] <= fits["room"], fits

    send(page, "hello")
    cut = send(page, "cut please")
    expect(cut.locator(".note.cut")).to_be_visible()
    expect(cut.locator(".usage")).to_have_text(USAGE)
    failed = send(page, "fail now")
    expect(failed.locator(".note.error")).to_contain_text("The run failed: ")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # nothing sticks out sideways
    box = cut.locator(".note.cut").bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
    page.locator("#input").blur()
    page.screenshot(path=str(tmp_path / "ux-390.png"), full_page=True)
