"""Regenerate ``docs/web-chat.png``, the picture of the web chat page in docs/guides/serve.md.

Run from the repository root: ``.venv/bin/python -m tests.docs.web_screenshot [OUT.png]``. It builds a
throwaway project with a few log files, serves it with a scripted model (the real server under
uvicorn, Debian's chromium through Playwright, as in ``tests/hosts/serve/test_web_page.py``), has a short
conversation in which the agent asks to run a shell command and the user approves it, and saves
the screenshot. The command really runs; the scripted answer is built from its output.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import expect, sync_playwright
from pydantic_ai.messages import ToolReturnPart

from shipagent import ShipAgent
from shipagent.hosts.serve import create_app
from tests.support.paths import ROOT
from tests.support.web import StreamingScript, chunks, launch_chromium, serve_in_thread, shell_call

COMMAND = "du -sh logs/* | sort -rh | head -3"
QUESTION = "What is taking the space in logs/?"


def reply(text: str, result: ToolReturnPart | None) -> Any:
    if result is not None:
        content = result.content if isinstance(result.content, dict) else {}
        rows = [line.split("\t") for line in str(content.get("stdout", "")).splitlines() if "\t" in line]
        listed = "\n".join(f"{n}. **{Path(p).name}** — {size}" for n, (size, p) in enumerate(rows, 1))
        biggest = Path(rows[0][1]).name if rows else "the first one"
        answer = (
            f"The three largest files in `logs/`:\n\n{listed}\n\n"
            f"`{biggest}` is most of it. To rotate it now and keep a compressed copy:\n\n"
            f"```bash\nmv logs/{biggest} logs/{biggest}.1 && gzip logs/{biggest}.1\n```\n\n"
            "Shall I run that? It needs your approval too."
        )
        return chunks(answer, 24)
    if text == QUESTION:
        return shell_call(COMMAND)
    return chunks(f"Noted: *{text}*. Nothing else to do here.", 24)


def make_project(root: Path) -> None:
    (root / "logs").mkdir(parents=True)
    for name, size in (
        ("api.log", 2_300_000),
        ("worker.log", 610_000),
        ("web.log", 140_000),
        ("cron.log", 9_000),
    ):
        (root / "logs" / name).write_bytes(b"x" * size)
    ship = {"name": "ops-assistant", "permissions": {"execShell": {"mode": "ask"}}}
    (root / "ship.json").write_text(json.dumps(ship), encoding="utf-8")


def seed(url: str, chat_key: str, text: str) -> None:
    """An earlier chat, so the list on the left is not empty."""
    with httpx.stream(
        "POST",
        f"{url}/v1/chats/{chat_key}/messages",
        json={"text": text},
        headers={"Accept": "text/event-stream"},
        timeout=30,
    ) as resp:
        resp.raise_for_status()
        for _ in resp.iter_lines():
            pass


def main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ops"
        make_project(root)
        agent = ShipAgent.from_project(root, model=StreamingScript(reply, pause=0.02).model)
        with serve_in_thread(create_app(agent)) as url, sync_playwright() as p:
            seed(url, "telegram:chat:42", "remind me to renew the TLS certificate")
            seed(url, "web:bob", "deploy went fine, thanks")
            browser = launch_chromium(p)
            page = browser.new_page(viewport={"width": 1060, "height": 700})
            page.goto(f"{url}/#web%3Aalice")
            page.fill("#input", QUESTION)
            page.press("#input", "Enter")
            page.locator(".approval button.approve").click()
            page.wait_for_selector(".turn.finished")
            expect(page.locator(".chat-item.active")).to_have_attribute("data-chat-key", "web:alice")
            page.locator(".tool summary").click()  # show what a tool step holds
            expect(page.locator(".tool .tool-result")).to_be_visible()
            page.locator("#input").blur()
            page.screenshot(path=str(out))
            browser.close()
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "web-chat.png")
