"""A durable channel turn that compacted the chat: the worker sends the notice after the answer.

The receiving side is the channel host in this process (enqueue only); a ``shipagent worker``
subprocess runs each turn and replies through the local Telegram server. Small watermarks
(``inMemoryMaxMessages`` 4, keep 2) make turns compact; the chat's message log says which did.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shipagent import ShipAgent
from shipagent.events import Compacted
from tests.hosts.durable.test_durable_channels import channel_project, receiving, started, texts
from tests.support.durable import Worker, read_jsonl
from tests.support.telegram_server import telegram_server

pytestmark = pytest.mark.anyio

TURNS = 4


async def test_the_worker_says_the_chat_was_compacted_once_after_the_answer(tmp_path: Path) -> None:
    async with telegram_server() as fake:
        project = channel_project(tmp_path / "p", "sqlite", fake)
        ship = json.loads((project / "ship.json").read_text(encoding="utf-8"))
        ship["context"] = {"chatHistory": {"inMemoryMaxMessages": 4, "compactKeepLastMessages": 2}}
        (project / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
        worker = await started(Worker(project, "worker-notice"))
        try:
            async with receiving(project):
                for n in range(TURNS):
                    fake.user_message(f"note {n}", message_id=100 + n)
                    done = f"request=telegram:42:{100 + n} outcome=ok"  # logged after the reply step
                    await fake.wait_for(
                        lambda done=done: any(done in line for line in worker.lines), within=60
                    )
        finally:
            worker.stop()
        shown = texts(fake)
    log = ShipAgent.from_project(project).paths.message_log("telegram:chat:42")
    compactions = sum(1 for r in read_jsonl(log) if r.get("t") == "compaction")
    assert compactions >= 1  # the marks made turns compact
    answers = [f"echo: note {n}" for n in range(TURNS)]
    assert [t for t in shown if t != Compacted.NOTICE] == answers  # each answer once, in order
    assert shown.count(Compacted.NOTICE) == compactions
    for at, text in enumerate(shown):
        if text == Compacted.NOTICE:
            assert at > 0 and shown[at - 1] in answers  # right after an answer
