"""The web chat page at ``/``, driven in a real browser against the real server.

Debian's chromium (through Playwright) loads the page from ``shipagent.hosts.serve.create_app`` running
under uvicorn on 127.0.0.1; a scripted model streams its answers in pieces with pauses, so the
page is seen rendering partial text. What a user relies on is asserted: the answer appears while
it is written, the history is there after a reload, a shell command runs only after the user
clicks Approve, HTML in a model answer stays text, and a server with API keys asks for one.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect
from pydantic_ai.messages import ToolReturnPart

from shipagent import Sender, ShipAgent
from shipagent.chatkeys import ShipPaths
from shipagent.hosts.serve import create_app
from shipagent.store.logs import Transcript
from tests.support.web import StreamingScript, chunks, serve_in_thread, shell_call

STREAMED = "Hello from the scripted model. This answer arrives in small pieces, one after another."
LONG = "A long answer that is still being written when the user presses Stop. " * 6
HOSTILE = '<script>window.__pwned = 1</script> and <img src=x onerror="window.__pwned = 2"> stay **text**'

# Records every text the first streamed answer shows, from the first delta to the last.
RECORD_STATES = """() => {
  window.__states = [];
  new MutationObserver(() => {
    const el = document.querySelector("#messages .turn .bubble.md");
    if (el) window.__states.push(el.textContent);
  }).observe(document.getElementById("messages"), { subtree: true, childList: true, characterData: true });
}"""


def reply(text: str, result: ToolReturnPart | None) -> Any:
    if result is not None:  # the answer to a tool call: what the command printed, or the refusal
        content = result.content if isinstance(result.content, dict) else {}
        if content.get("success"):
            return ["The command printed: ", str(content.get("stdout", "")).strip(), "."]
        return ["The command did not run: ", str(content.get("error", content)), "."]
    if text.startswith("run "):
        return shell_call(text.removeprefix("run "))
    if "markup" in text:
        return chunks(HOSTILE, 16)
    if "long" in text:
        return chunks(LONG, 8)
    return chunks(STREAMED, 12)


@contextlib.contextmanager
def server(
    root: Path,
    ship: dict[str, Any] | None = None,
    *,
    history: dict[str, int] | None = None,
    **app_options: Any,
) -> Iterator[str]:
    """The real app for a project at ``root``; ``history`` writes that many earlier turns per chat."""
    root.mkdir(parents=True, exist_ok=True)
    if ship is not None:
        (root / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    script = StreamingScript(reply, pause=0.08)
    agent = ShipAgent.from_project(root, model=script.model)
    for chat_key, turns in (history or {}).items():
        for n in range(turns):
            agent.transcript.append_turn(chat_key, f"req-{n}", f"question {n}", f"answer {n}")
    with serve_in_thread(create_app(agent, **app_options)) as url:
        yield url


@pytest.fixture
def page(browser: Any) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1100, "height": 760})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    context.close()
    assert errors == [], f"the page threw: {errors}"


def send(page: Page, text: str) -> None:
    finished = page.locator(".turn.finished").count()
    page.fill("#input", text)
    page.press("#input", "Enter")
    expect(page.locator(".msg.user .bubble").last).to_have_text(text)
    page.wait_for_selector(f".turn.finished >> nth={finished}", state="attached")


def test_streams_the_answer_keeps_history_and_shows_html_as_text(page: Page, tmp_path: Path) -> None:
    with server(tmp_path / "project") as url:
        page.goto(url + "/")
        expect(page.locator(".empty")).to_be_visible()  # a new chat, ready to type in
        chat_key = page.input_value("#chat-key")
        assert chat_key.startswith("web:")
        page.evaluate(RECORD_STATES)

        send(page, "hello there")
        answer = page.locator(".turn .bubble.md").first
        expect(answer).to_have_text(STREAMED)
        states = page.evaluate("window.__states")
        partial = list(dict.fromkeys(s for s in states if s and s != STREAMED))
        assert len(partial) >= 2, f"the answer did not appear in pieces: {states}"
        assert all(STREAMED.startswith(s) for s in partial), partial
        assert [len(s) for s in partial] == sorted(len(s) for s in partial)  # it only ever grows

        send(page, "show me <b>markup</b>")  # the user's own HTML is text too
        hostile = page.locator(".turn .bubble.md").last
        expect(hostile).to_contain_text(
            '<script>window.__pwned = 1</script> and <img src=x onerror="window.__pwned = 2">'
        )
        expect(hostile.locator("strong")).to_have_text("text")  # Markdown still renders
        assert page.locator("#messages script, #messages img, #messages b").count() == 0
        assert page.evaluate("window.__pwned") is None

        # the chat list has this chat, newest first
        expect(page.locator(".chat-item").first).to_have_attribute("data-chat-key", chat_key)
        page.screenshot(path=str(tmp_path / "web-chat.png"))

        page.reload()
        bubbles = page.locator("#messages .bubble")
        expect(bubbles).to_have_count(4)
        assert bubbles.all_text_contents() == [
            "hello there",
            STREAMED,
            "show me <b>markup</b>",
            HOSTILE.replace("**text**", "text"),
        ]
        assert page.input_value("#chat-key") == chat_key
        assert page.locator("#messages script, #messages img, #messages b").count() == 0
        assert page.evaluate("window.__pwned") is None

        # a new chat starts empty; the old one is one click away
        page.click("#new-chat")
        expect(page.locator(".empty")).to_be_visible()
        assert page.input_value("#chat-key") != chat_key
        page.click(f'.chat-item[data-chat-key="{chat_key}"]')
        expect(bubbles).to_have_count(4)
    assert (tmp_path / "web-chat.png").stat().st_size > 10_000


def test_a_long_history_pages_back(page: Page, tmp_path: Path) -> None:
    with server(tmp_path / "project", history={"web:long": 130}) as url:
        page.goto(url + "/#web%3Along")
        bubbles = page.locator("#messages .bubble")
        expect(bubbles).to_have_count(200)  # the newest 200 entries: questions 30..129
        assert bubbles.first.text_content() == "question 30"
        assert bubbles.last.text_content() == "answer 129"
        page.click("button.earlier")
        expect(bubbles).to_have_count(260)
        assert bubbles.first.text_content() == "question 0"
        texts = bubbles.all_text_contents()
        assert texts == [f"{kind} {n}" for n in range(130) for kind in ("question", "answer")]
        assert page.locator("button.earlier").count() == 0


def test_a_group_transcript_names_each_speaker_and_marks_an_undelivered_answer(
    page: Page, tmp_path: Path
) -> None:
    root = tmp_path / "project"
    said = Transcript(ShipPaths(root))  # as a Telegram group's turns wrote it
    said.append_turn("telegram:chat:-5", "r1", "hi all", "hello", sender=Sender("7", "Ada"))
    said.append_turn("telegram:chat:-5", "r2", "and me", "hi Bob", sender=Sender("8", "Bob"))
    said.append_undelivered("telegram:chat:-5", "r2", "the answer was not delivered: blocked")
    with server(root) as url:
        page.goto(url + "/#telegram%3Achat%3A-5")
        expect(page.locator("#messages .bubble")).to_have_count(4)
        expect(page.locator("#messages .msg.user .who")).to_have_text(["Ada (id 7)", "Bob (id 8)"])
        expect(page.locator("#messages .msg.user .bubble")).to_have_text(["hi all", "and me"])
        expect(page.locator("#messages .note.error")).to_have_text(
            "Not delivered: the answer was not delivered: blocked"
        )


def test_a_shell_command_runs_only_after_approve(page: Page, tmp_path: Path) -> None:
    root = tmp_path / "project"
    with server(root, {"permissions": {"execShell": {"mode": "ask"}}}) as url:
        page.goto(url + "/")
        page.fill("#input", "run echo approved-$((6*7)) > approved.txt; cat approved.txt")
        page.press("#input", "Enter")
        card = page.locator(".approval")
        expect(card.locator(".approval-command")).to_have_text(
            "echo approved-$((6*7)) > approved.txt; cat approved.txt"
        )
        expect(page.locator(".tool.running .tool-name")).to_have_text("exec_shell")
        assert not (root / "approved.txt").exists()  # nothing runs while the question is open
        card.locator("button.approve").click()
        expect(card.locator(".approval-outcome")).to_have_text("✓ Approved")
        page.wait_for_selector(".turn.finished")
        expect(page.locator(".turn .bubble.md").last).to_have_text("The command printed: approved-42.")
        expect(page.locator(".tool.ok .tool-name")).to_have_text("exec_shell")
        assert (root / "approved.txt").read_text() == "approved-42\n"

        page.fill("#input", "run touch refused.txt")
        page.press("#input", "Enter")
        second = page.locator(".approval").nth(1)
        expect(second.locator(".approval-command")).to_have_text("touch refused.txt")
        second.locator("button.deny").click()
        page.wait_for_selector(".turn.finished >> nth=1", state="attached")
        expect(second.locator(".approval-outcome")).to_have_text("✕ Denied")
        expect(page.locator(".turn .bubble.md").last).to_contain_text(
            "The command did not run: exec_shell denied"
        )
        expect(page.locator(".tool.failed .tool-name")).to_have_text("exec_shell")
        assert not (root / "refused.txt").exists()
        page.screenshot(path=str(tmp_path / "web-chat-approval.png"))


def test_stop_cancels_the_turn_and_the_chat_goes_on(page: Page, tmp_path: Path) -> None:
    with server(tmp_path / "project") as url:
        page.goto(url + "/")
        page.fill("#input", "a long one, please")
        page.press("#input", "Enter")
        expect(page.locator(".turn .bubble.md")).to_contain_text("A long answer")  # it is streaming
        expect(page.locator("#send")).to_have_text("Stop")
        page.click("#send")
        expect(page.locator(".turn .note.error")).to_contain_text("Stopped")
        partial = page.locator(".turn .bubble.md").first.text_content() or ""
        assert partial.startswith("A long answer") and len(partial) < len(LONG)
        expect(page.locator("#send")).to_have_text("Send")

        send(page, "hello again")  # the cancelled turn released the chat
        expect(page.locator(".turn .bubble.md").last).to_have_text(STREAMED)
        page.reload()  # nothing of the stopped turn was kept
        expect(page.locator("#messages .bubble")).to_have_count(2)
        assert page.locator("#messages .bubble").all_text_contents() == ["hello again", STREAMED]


def test_asks_for_the_api_key_and_keeps_it_for_the_tab(page: Page, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("WEB_KEY", "k-" + "7" * 30)
    ship = {"serve": {"apiKeys": [{"key": "${WEB_KEY}", "chatKeys": ["web:*"]}]}}
    with server(tmp_path / "project", ship) as url:
        page.goto(url + "/")
        dialog = page.locator("#key-dialog")
        expect(dialog).to_be_visible()
        page.fill("#key-input", "wrong-key")
        page.click("#key-save")
        expect(page.locator("#key-reason")).to_contain_text("did not accept")
        page.fill("#key-input", "k-" + "7" * 30)
        page.click("#key-save")
        expect(dialog).to_be_hidden()
        assert page.evaluate("sessionStorage.getItem('shipagent.apiKey')") == "k-" + "7" * 30
        assert page.evaluate("localStorage.length") == 0  # never kept beyond the tab

        send(page, "hello with a key")
        expect(page.locator(".turn .bubble.md").last).to_have_text(STREAMED)

        page.reload()  # same tab: the key is still there, no question asked
        expect(page.locator("#messages .bubble")).to_have_count(2)
        expect(dialog).to_be_hidden()
        expect(page.locator("#key-state")).to_have_text("API key set")

        page.goto(url + "/#ops%3Ainternal")  # a chat outside the key's web:* patterns
        expect(page.locator("#messages .note.error")).to_have_text(
            "This API key may not read chat ops:internal."
        )
        assert page.locator(".chat-item.active").get_attribute("data-chat-key") == "ops:internal"


def test_a_turn_that_ends_while_the_transcript_loads_stays_on_screen(page: Page, tmp_path: Path) -> None:
    held: list[tuple[Any, Any]] = []

    def hold_first_read(route: Any) -> None:
        if not held:  # read now (before the turn), answered only after the turn has finished
            held.append((route, route.fetch()))
        else:
            route.continue_()

    with server(tmp_path / "project") as url:
        page.route("**/transcript?*", hold_first_read)
        page.goto(url + "/")
        page.wait_for_function("document.querySelector('#chat-key').value.startsWith('web:')")
        page.fill("#input", "sent while the page loads")
        page.press("#input", "Enter")
        page.wait_for_selector(".turn.finished", state="attached")
        assert len(held) == 1
        with page.expect_response("**/transcript?*"):
            route, stale = held[0]
            route.fulfill(response=stale)  # the read without this turn arrives last
        page.wait_for_timeout(300)  # let the page handle it before looking
        expect(page.locator(".msg.user .bubble")).to_have_text(["sent while the page loads"])
        expect(page.locator(".msg.assistant .bubble").last).to_have_text(STREAMED)
