"""``shipagent channels run`` on Feishu as a real process: killed with SIGKILL mid-answer, it
answers once after a restart (the event was acknowledged on the long connection, so Feishu will
not send it again: the dedupe record on disk brings it back), in the message the killed process
had begun streaming."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from shipagent.chatkeys import ShipPaths
from tests.hosts.channels.test_feishu import ship_json
from tests.support.channel_process import (
    held_project,
    kill_while_streaming,
    start_channels,
    stop,
    user_lines,
)
from tests.support.feishu_server import APP_SECRET, DM_CHAT, feishu_server

pytestmark = pytest.mark.anyio


async def test_killed_mid_answer_the_message_is_answered_exactly_once_after_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEISHU_APP_SECRET", APP_SECRET)
    root, log = held_project(tmp_path)  # the answer stops after its first word until the restart

    def finished() -> list[str]:
        return [m.text for m in fake.shown() if m.text.strip().endswith("and more")]

    async with feishu_server() as fake:
        (root / "ship.json").write_text(json.dumps(ship_json(fake)), encoding="utf-8")
        process = start_channels(root, log)
        try:
            await fake.wait_for(lambda: fake.connections == 1, within=60)
            fake.user_message("please")
            partial = await kill_while_streaming(process, root, "feishu", fake, lambda m: m.text)
            assert list(fake.acked.values()) == [200] and finished() == []

            process = start_channels(root, log)  # Feishu does not resend an acknowledged event…
            await fake.wait_for(finished, within=60)  # …the record on disk brings it back
            await anyio.sleep(0.5)
        finally:
            if process.poll() is None:
                await stop(process, signal.SIGTERM)
    assert len(finished()) == 1, log.read_text()
    (answer,) = fake.shown()  # one message in the chat: the half-written one became the answer
    assert answer.id == partial.id and answer.text.startswith("done: please")
    # the killed turn left nothing; the replayed one is the only one
    assert user_lines(ShipPaths(root).transcript(f"feishu:chat:{DM_CHAT}")) == 1
    assert fake.connections == 2 and len(fake.sent) == 1  # the event went out once
    assert APP_SECRET not in log.read_text()
