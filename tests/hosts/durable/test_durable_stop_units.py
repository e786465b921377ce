"""``/stop``'s look-up and cancel on a real system database, and the platforms' worker sides.

No worker runs here: the agent's durable executor is a client (``serve --no-worker``'s role), so
the turns it enqueues stay queued and ``/stop`` finds and cancels them in the SQLite database.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from shipagent import ShipAgent
from shipagent.errors import ShipAgentError
from shipagent.hosts.channels import Capabilities, InboundMessage, SentMessage
from shipagent.hosts.channels._durable import (
    ChannelReply,
    ChannelTurnQueue,
    durable_queue,
    enqueue_turn,
    queued_state,
    stop_turn,
    worker_sender,
    worker_side,
    worker_where,
)
from tests.support.durable import durable_project, read_jsonl, wait_for

pytestmark = pytest.mark.anyio


class Recorder:
    """An :class:`Outbound` that keeps what was sent, and under which message."""

    capabilities = Capabilities()

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []  # (the message answered, the text)

    async def send(
        self, chat: InboundMessage, text: str, *, formatted: bool, buttons: Any = ()
    ) -> SentMessage:
        self.sent.append((chat.message_id, text))
        return SentMessage(str(len(self.sent)))


def message(
    message_id: int, *, chat: str = "42", topic: str | None = None, channel: str = "telegram"
) -> InboundMessage:
    key = f"{channel}:chat:{chat}" + (f":topic:{topic}" if topic else "")
    return InboundMessage(
        channel, key, chat, str(message_id), "7", "Ann", f"text {message_id}", thread_id=topic
    )


@asynccontextmanager
async def client_queue(root: Path) -> AsyncIterator[tuple[ShipAgent, ChannelTurnQueue]]:
    agent = ShipAgent.from_project(durable_project(root, "sqlite"))
    agent.turn_executor_options = {"worker": False}
    async with agent:
        queue = durable_queue(agent)
        assert queue is not None
        yield agent, queue


async def enqueue(queue: ChannelTurnQueue, inbound: InboundMessage) -> None:
    rid = f"{inbound.channel}:{inbound.chat_id}:{inbound.message_id}"
    reply = ChannelReply(inbound.channel, inbound, 4000).to_json()
    await queue.enqueue_channel_turn(inbound.chat_key, inbound.text, request_id=rid, reply=reply)


async def test_stop_cancels_the_chats_oldest_queued_turn_only_and_says_so_under_its_message(
    tmp_path: Path,
) -> None:
    async with client_queue(tmp_path / "p") as (_agent, queue):
        for inbound in (message(1), message(2), message(3, topic="9"), message(5, chat="4")):
            await enqueue(queue, inbound)
        out = Recorder()
        for _ in range(3):
            await stop_turn(queue, out, "telegram", message(100), 4000)
        await stop_turn(queue, out, "telegram", message(101, topic="9"), 4000)
        await stop_turn(queue, out, "telegram", message(102, chat="4"), 4000)
        await stop_turn(queue, out, "telegram", message(103, chat="4"), 4000)
    assert out.sent == [
        ("1", "⚠️ Stopped."),  # under the turn's own message, as the in-process reply
        ("2", "⚠️ Stopped."),  # a second /stop: the next one waiting
        ("100", "Nothing is running."),
        ("3", "⚠️ Stopped."),  # the topic is its own chat
        ("5", "⚠️ Stopped."),  # chat 4 is not chat 42's prefix
        ("103", "Nothing is running."),
    ]


async def test_the_same_request_id_stopped_is_not_queued_again(tmp_path: Path) -> None:
    """A redelivered message of a stopped turn (same request id) stays stopped: DBOS keeps the id."""
    async with client_queue(tmp_path / "p") as (_agent, queue):
        await enqueue(queue, message(1))
        out = Recorder()
        await stop_turn(queue, out, "telegram", message(100), 4000)
        await enqueue(queue, message(1))
        await stop_turn(queue, out, "telegram", message(101), 4000)
    assert out.sent == [("1", "⚠️ Stopped."), ("101", "Nothing is running.")]


async def test_a_qq_message_is_refused_where_it_arrives_and_never_queued(tmp_path: Path) -> None:
    async with client_queue(tmp_path / "p") as (agent, queue):
        out = Recorder()
        inbound = message(1, channel="qq")
        handled = await enqueue_turn(
            agent, out, "qq", [inbound], limit=4000, max_attachment_bytes=1, model_text=lambda m, _f: m.text
        )
        assert handled
        await stop_turn(queue, out, "qq", message(2, channel="qq"), 4000)
    assert len(out.sent) == 2
    assert out.sent[0][0] == "1" and "durable workers cannot answer qq" in out.sent[0][1]
    assert "passive replies" in out.sent[0][1]
    assert out.sent[1] == ("2", "Nothing is running.")


def test_each_platform_declares_its_worker_side(tmp_path: Path) -> None:
    agent = ShipAgent.from_project(durable_project(tmp_path / "p", "sqlite"))
    for name in ("telegram", "slack", "discord", "feishu"):
        side = worker_side(name)
        assert side.sender and side.channel and not side.refused
        found = worker_where(agent, name)
        limit = getattr(agent.config.channels, name).text_chunk_limit
        assert found is not None and found[0].__name__ == "_where_it_is" and f"{limit:,}" in found[1]
    qq = worker_side("qq")
    assert not qq.sender and "passive replies" in qq.refused
    assert worker_where(agent, "qq") is None
    with pytest.raises(ShipAgentError, match="a worker cannot answer it: QQ accepts only passive"):
        worker_sender(agent, "qq")
    with pytest.raises(ShipAgentError, match="no such channel"):
        worker_side("nosuch")
    with pytest.raises(ShipAgentError, match="not a channel name"):
        worker_side("telegram._sender")


def test_a_worker_builds_the_declared_sender_from_its_ship_json(tmp_path: Path) -> None:
    root = durable_project(tmp_path / "p", "sqlite")
    ship = json.loads((root / "ship.json").read_text(encoding="utf-8"))
    ship["channels"] = {"telegram": {"botToken": "123:abc"}}
    (root / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    agent = ShipAgent.from_project(root)
    from shipagent.hosts.channels.telegram._sender import TelegramSender

    sender = worker_sender(agent, "telegram")
    assert isinstance(sender, TelegramSender)


async def test_in_a_worker_stop_leaves_the_chats_other_turns_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This process is the worker (``DBOS`` itself looks up): a turn of the same chat that is not
    a channel's (``agent.run``, workflow ``shipagent.turn``) is not what ``/stop`` stops."""
    from tests.support.durable_worker import scripted_model

    project = durable_project(tmp_path / "p", "sqlite")
    signals = project / "signals"
    monkeypatch.setenv("SHIPAGENT_TEST_DIR", str(signals))
    agent = ShipAgent.from_project(project, model=scripted_model())
    out = Recorder()
    async with agent, anyio.create_task_group() as tasks:
        queue = durable_queue(agent)
        assert queue is not None
        inbound = message(1)
        tasks.start_soon(lambda: agent.run(inbound.chat_key, "block:w1", request_id="telegram:42:1"))
        await anyio.to_thread.run_sync(wait_for, signals / "running-w1")
        await stop_turn(queue, out, "telegram", message(2), 4000)
        (signals / "release-w1").touch()
    assert out.sent == [("2", "Nothing is running.")]
    assert [e["tag"] for e in read_jsonl(signals / "effects.jsonl")] == ["w1"]  # it ran to its end


class Recorded:
    """The system database's view of one running channel turn, and the cancels asked of it."""

    def __init__(self, steps: list[str]) -> None:
        self.steps = steps
        self.cancelled: list[str] = []

    async def list_workflows_async(self, **filters: Any) -> list[Any]:
        from types import SimpleNamespace

        status = "CANCELLED" if self.cancelled else "PENDING"
        row = SimpleNamespace(
            workflow_id="telegram:42:1",
            status=status,
            queue_partition_key="telegram:chat:42",
            created_at=1,
            input={"args": ("telegram:chat:42", "hi", {"channel": "telegram"}), "kwargs": {}},
        )
        return [row]

    async def list_workflow_steps_async(self, workflow_id: str, **options: Any) -> list[dict[str, Any]]:
        return [{"function_name": name} for name in self.steps]

    async def cancel_workflow_async(self, workflow_id: str) -> None:
        self.cancelled.append(workflow_id)


async def test_a_turn_past_its_commit_is_left_to_send_its_answer() -> None:
    """Cancelling after the commit would only keep the answer from the user, while the chat's
    history holds it: ``/stop`` then says nothing is running and the answer arrives."""
    from shipagent.hosts.durable._stop import stop_channel_turn

    committed = Recorded(["shipagent.model.request", "shipagent.commit"])
    assert await stop_channel_turn(committed, "telegram:chat:42", "telegram:42:") is None
    assert committed.cancelled == []
    thinking = Recorded(["shipagent.tool.test_inject"])
    stopped = await stop_channel_turn(thinking, "telegram:chat:42", "telegram:42:")
    assert stopped is not None and (stopped.workflow_id, stopped.running) == ("telegram:42:1", True)
    assert stopped.reply == {"channel": "telegram"}
    assert thinking.cancelled == ["telegram:42:1"]


async def test_status_counts_the_chats_turns_waiting_for_a_worker(tmp_path: Path) -> None:
    async with client_queue(tmp_path / "p") as (_agent, queue):
        assert await queued_state(queue, "telegram", message(100)) == "Idle."
        for inbound in (message(1), message(2), message(3, topic="9"), message(5, chat="4")):
            await enqueue(queue, inbound)
        assert await queued_state(queue, "telegram", message(101)) == "Idle. 2 message(s) wait for a worker."
        topic = await queued_state(queue, "telegram", message(102, topic="9"))
        assert topic == "Idle. 1 message(s) wait for a worker."
        await stop_turn(queue, Recorder(), "telegram", message(103), 4000)
        assert await queued_state(queue, "telegram", message(104)) == "Idle. 1 message(s) wait for a worker."


async def test_status_says_a_worker_is_writing_the_chats_answer() -> None:
    from shipagent.hosts.durable._stop import channel_turns

    assert await channel_turns(Recorded([]), "telegram:chat:42", "telegram:42:") == (1, 0)
    assert await channel_turns(Recorded([]), "telegram:chat:43", "telegram:43:") == (0, 0)
