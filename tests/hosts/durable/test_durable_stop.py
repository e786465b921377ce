"""``/stop`` in durable mode: the receiving process cancels the chat's turn a worker process runs.

The receiving side is the Telegram channel host in this process with the durable executor in
client mode; the turn runs in a ``shipagent worker`` subprocess (the scripted model of
``tests.support.durable_worker``). ``inject:<tag>`` makes the turn's second model request wait
for ``release-<tag>``, so ``/stop`` arrives while the worker is inside the model call;
``block:<tag>`` makes its tool wait, so ``/stop`` arrives inside a tool with effects.
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


async def test_stop_cancels_the_turn_inside_the_model_call_or_a_tool_and_the_next_message_is_answered(
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
                in_tool = fake.user_message("block:s2")["message"]["message_id"]
                await anyio.to_thread.run_sync(wait_for, signals / "running-s2")  # inside the tool
                fake.user_message("/stop")
                await fake.wait_for(lambda: texts(fake).count("⚠️ Stopped.") == 2, within=60)
                await fake.wait_for(
                    lambda: any(
                        f"request=telegram:42:{in_tool} outcome=stopped" in line for line in worker.lines
                    ),
                    within=30,
                )
                (signals / "release-s2").touch()
                fake.user_message("last")
                await fake.wait_for(lambda: "echo: last" in texts(fake), within=60)
                fake.user_message("/stop")  # the chat is idle again
                await fake.wait_for(lambda: texts(fake)[-1] == "Nothing is running.", within=60)
        finally:
            worker.stop()
        assert texts(fake) == [
            "Nothing is running.",
            "⚠️ Stopped.",
            "echo: after",
            "echo: later",
            "⚠️ Stopped.",
            "echo: last",
            "Nothing is running.",
        ]
        assert not any(t.startswith("saw RULE") for t in texts(fake))  # the stopped answer never came
        requests = read_jsonl(signals / "requests.jsonl")
        by_text = {r["text"]: r for r in requests}
        said = ["inject:s1", "inject:s1", "after", "later", "block:s2", "last"]
        assert [r["text"] for r in requests] == said
        # nothing of the stopped turns was committed: the other turns see only each other
        assert by_text["after"]["said"] == ["user: after"]
        assert by_text["later"]["said"] == ["user: after", "assistant: echo: after", "user: later"]
        assert by_text["last"]["said"] == [
            "user: after",
            "assistant: echo: after",
            "user: later",
            "assistant: echo: later",
            "user: last",
        ]
        effects = read_jsonl(signals / "effects.jsonl")
        # the tool before s1's model call had run; s2's tool was stopped before its effect
        assert [e["tag"] for e in effects] == ["inject-s1"]
