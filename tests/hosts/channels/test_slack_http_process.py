"""``shipagent channels run`` on Slack in HTTP mode (the Events API) as a real process: killed with
SIGKILL mid-answer, it answers once after a restart, in the message the killed process had begun
streaming. The request was answered 200 before the kill, so Slack does not send it again: the
dedupe record on disk brings it back (and a retry of it, had Slack missed the 200, is no second turn)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import anyio
import httpx
import pytest

from shipagent.chatkeys import ShipPaths
from tests.hosts.channels.test_slack_http import SECRET, Poster, ship_json
from tests.support.channel_process import (
    held_project,
    kill_while_streaming,
    start_channels,
    stop,
    user_lines,
)
from tests.support.net import free_port
from tests.support.slack_server import BOT_TOKEN, TEAM, Envelope, slack_server

pytestmark = pytest.mark.anyio


async def _post(slack: Poster, envelope: Envelope, **headers: str) -> int:
    """POST the event, signed for now (the process checks signatures against its own clock), once
    the listener is up (a refused connection means nothing arrived, so it is tried again)."""
    with anyio.fail_after(60):
        while True:
            try:
                response = await slack.event(envelope, timestamp=int(time.time()), headers=headers)
            except httpx.ConnectError:
                await anyio.sleep(0.1)
                continue
            return response.status_code


async def test_killed_mid_answer_in_http_mode_the_event_is_answered_exactly_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SECRET)  # the process reads it from its environment
    root, log = held_project(tmp_path)  # the answer stops after its first word until the restart
    port = free_port()

    def finished() -> list[str]:
        return [m.text for m in fake.shown() if m.text.strip().endswith("and more")]

    async with slack_server() as fake, httpx.AsyncClient(timeout=10) as client:
        (root / "ship.json").write_text(json.dumps(ship_json(fake, port)), encoding="utf-8")
        slack = Poster(client, f"http://127.0.0.1:{port}/slack/events")
        process = start_channels(root, log)
        try:
            envelope = fake.user_message("please")
            assert await _post(slack, envelope) == 200
            partial = await kill_while_streaming(process, root, "slack", fake, lambda m: m.text)

            process = start_channels(root, log)
            assert await _post(slack, envelope, **{"X-Slack-Retry-Num": "1"}) == 200  # once is enough
            await fake.wait_for(finished, within=60)  # the record on disk brought it back
            await anyio.sleep(0.5)
        finally:
            if process.poll() is None:
                await stop(process, signal.SIGTERM)
    assert len(finished()) == 1, log.read_text()
    (answer,) = fake.shown()  # one message in the chat: the half-written one became the answer
    assert answer.ts == partial.ts and answer.text.startswith("done: please")
    # the killed turn left nothing; the replayed one is the only one
    assert user_lines(ShipPaths(root).transcript(f"slack:{TEAM}:D0DM")) == 1
    assert BOT_TOKEN not in log.read_text() and SECRET not in log.read_text()
