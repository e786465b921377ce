"""``shipagent channels run`` on Slack as a real process: killed with SIGKILL mid-answer, it
answers once after a restart (the envelope was acknowledged, so Slack will not send it again: the
dedupe record on disk brings it back), in the message the killed process had begun streaming."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from shipagent.chatkeys import ShipPaths
from tests.hosts.channels.test_slack import ship_json
from tests.support.channel_process import (
    held_project,
    kill_while_streaming,
    start_channels,
    stop,
    user_lines,
)
from tests.support.slack_server import APP_TOKEN, BOT_TOKEN, TEAM, slack_server

pytestmark = pytest.mark.anyio


async def test_killed_mid_answer_the_message_is_answered_exactly_once_after_a_restart(tmp_path: Path) -> None:
    root, log = held_project(tmp_path)  # the answer stops after its first word until the restart

    def finished() -> list[str]:
        return [m.text for m in fake.shown() if m.text.strip().endswith("and more")]

    async with slack_server() as fake:
        (root / "ship.json").write_text(json.dumps(ship_json(fake)), encoding="utf-8")
        process = start_channels(root, log)
        try:
            await fake.wait_for(lambda: fake.connections == 1, within=60)
            envelope = fake.user_message("please")
            partial = await kill_while_streaming(process, root, "slack", fake, lambda m: m.text)
            assert envelope.acked and finished() == []

            process = start_channels(root, log)  # Slack does not resend an acknowledged envelope…
            await fake.wait_for(finished, within=60)  # …the record on disk brings it back
            await anyio.sleep(0.5)
        finally:
            if process.poll() is None:
                await stop(process, signal.SIGTERM)
    assert len(finished()) == 1, log.read_text()
    (answer,) = fake.shown()  # one message in the chat: the half-written one became the answer
    assert answer.ts == partial.ts and answer.text.startswith("done: please")
    # the killed turn left nothing; the replayed one is the only one
    assert user_lines(ShipPaths(root).transcript(f"slack:{TEAM}:D0DM")) == 1
    assert BOT_TOKEN not in log.read_text() and APP_TOKEN not in log.read_text()
