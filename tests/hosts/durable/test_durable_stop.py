"""``/stop`` in durable mode: the receiving process cancels the chat's turn a worker process runs.

The receiving side is the Telegram channel host in this process with the durable executor in
client mode; the turn runs in a ``shipagent worker`` subprocess (the scripted model of
``tests.support.durable_worker``). ``inject:<tag>`` makes the turn's second model request wait
for ``release-<tag>``, so ``/stop`` arrives while the worker is inside the model call.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from tests.hosts.durable.test_durable_channels import (
    channel_project,
    done_count,
    receiving,
    started,
    texts,
)
from tests.support.durable import Worker, read_jsonl, wait_for
from tests.support.telegram_server import telegram_server

pytestmark = pytest.mark.anyio


async def test_stop_cancels_the_turn_inside_the_model_call_and_the_next_message_is_answered(
    tmp_path: Path,
) -> None:
    async with telegram_server() as fake:
        project = channel_project(tmp_path / "p", "sqlite", fake)
        signals = project / "signals"
        worker = await started(Worker(project, "worker-stop"))
        try:
            async with receiving(project):
                fake.user_message("/stop")  # nothing queued or running yet
                await fake.wait_for(lambda: texts(fake) == ["Nothing is running."], within=60)
                stopped = fake.user_message("inject:s1")["message"]["message_id"]
                await anyio.to_thread.run_sync(wait_for, signals / "running-s1")  # in the model call
                after = fake.user_message("after")["message"]["message_id"]  # queued behind it
                await fake.wait_for(lambda: done_count(project, after) == 1)  # on the queue now
                fake.user_message("/stop")
                await fake.wait_for(lambda: "⚠️ Stopped." in texts(fake), within=60)
                # the model call is cut short: the turn ends while the model is still "thinking"
                await fake.wait_for(
                    lambda: any(
                        f"request=telegram:42:{stopped} outcome=stopped" in line for line in worker.lines
                    ),
                    within=30,
                )
                assert not (signals / "release-s1").exists()
                (signals / "release-s1").touch()  # nothing waits for it any more
                await fake.wait_for(lambda: "echo: after" in texts(fake), within=60)
                fake.user_message("later")
                await fake.wait_for(lambda: "echo: later" in texts(fake), within=60)
                fake.user_message("/stop")  # the chat is idle again
                await fake.wait_for(lambda: texts(fake)[-1] == "Nothing is running.", within=60)
        finally:
            worker.stop()
        assert texts(fake) == [
            "Nothing is running.",
            "⚠️ Stopped.",
            "echo: after",
            "echo: later",
            "Nothing is running.",
        ]
        assert not any(t.startswith("saw RULE") for t in texts(fake))  # the stopped answer never came
        requests = read_jsonl(signals / "requests.jsonl")
        by_text = {r["text"]: r for r in requests}
        assert [r["text"] for r in requests] == ["inject:s1", "inject:s1", "after", "later"]
        # nothing of the stopped turn was committed: the next turns see only each other
        assert by_text["after"]["said"] == ["user: after"]
        assert by_text["later"]["said"] == ["user: after", "assistant: echo: after", "user: later"]
        effects = read_jsonl(signals / "effects.jsonl")
        assert [e["tag"] for e in effects] == ["inject-s1"]  # the tool before the model call had run
