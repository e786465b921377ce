"""``shipagent channels run`` as a real process: killed with SIGKILL mid-answer, it answers once after a
restart, in the message the killed process had begun streaming (no half-written answer stays)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from shipagent.chatkeys import ShipPaths
from tests.hosts.channels._support import ship_json
from tests.support.channel_process import (
    held_project,
    kill_while_streaming,
    start_channels,
    stop,
    user_lines,
)
from tests.support.telegram_server import FakeTelegram, telegram_server

pytestmark = pytest.mark.anyio


def _finished(fake: FakeTelegram) -> list[str]:
    return [m.text for m in fake.shown() if m.text.strip().endswith("and more")]


async def test_killed_mid_answer_the_message_is_answered_exactly_once_after_a_restart(tmp_path: Path) -> None:
    root, log = held_project(tmp_path)  # the answer stops after its first word until the restart
    async with telegram_server() as fake:
        fake.longest_poll = 1.0  # the wait for the restarted process's next polls is not 30 s each
        (root / "ship.json").write_text(json.dumps(ship_json(fake)), encoding="utf-8")
        process = start_channels(root, log)
        try:
            await fake.wait_for(lambda: fake.called("getUpdates"), within=60)
            fake.user_message("please")
            partial = await kill_while_streaming(process, root, "telegram", fake, lambda m: m.text)
            polls = len(fake.called("getUpdates"))

            process = start_channels(root, log)
            await fake.wait_for(lambda: _finished(fake), within=60)
            await fake.wait_for(lambda: len(fake.called("getUpdates")) > polls + 1, within=60)
            await anyio.sleep(0.5)
        finally:
            if process.poll() is None:
                await stop(process, signal.SIGTERM)
    assert len(_finished(fake)) == 1, log.read_text()
    (answer,) = fake.shown()  # one message in the chat: the half-written one became the answer
    assert answer.message_id == partial.message_id and answer.text.startswith("done: please")
    # the killed turn left nothing; the replayed one is the only one
    assert user_lines(ShipPaths(root).transcript("telegram:chat:42")) == 1
    seen = (root / ".ship" / "channels" / "telegram-seen.jsonl").read_text(encoding="utf-8")
    rows = [json.loads(line) for line in seen.splitlines()]  # accepted, its answer's message, answered
    assert [(row.get("reply"), row.get("done", False)) for row in rows] == [
        (None, False),
        ([str(partial.message_id)], False),
        (None, True),
    ]
