"""The approval desk: a press that arrives while the question is still being sent is not lost.

A user sees the question as soon as the platform has it, before the platform's answer to the send
reaches the bot, so a quick press can come first. The desk opens the question before sending it,
and a press waits for the send to return.
"""

from __future__ import annotations

import anyio
import pytest

from shipagent.hosts.channels._approvals import ApprovalDesk
from shipagent.hosts.channels._types import Button, ButtonPress, InboundMessage, SentMessage

pytestmark = pytest.mark.anyio

ADA = InboundMessage("t", "t:chat:1", "1", "m1", "7", "Ada", "#shell clean up", is_group=True)


class SlowWriter:
    """Sends a question that the platform answers only when ``release`` is set."""

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.sending = anyio.Event()
        self.settled: list[str] = []

    async def send_separate(self, text: str, buttons: tuple[Button, ...] = ()) -> SentMessage | None:
        self.sending.set()
        await self.release.wait()
        return SentMessage("q1")

    async def settle(self, message: SentMessage, text: str) -> None:
        self.settled.append(text)


class Agent:
    def __init__(self) -> None:
        self.resolved: list[tuple[str, bool]] = []

    def resolve_approval(self, approval_id: str, approved: bool) -> bool:
        self.resolved.append((approval_id, approved))
        return True


class Outbound:
    def __init__(self) -> None:
        self.acks: list[str] = []

    async def acknowledge(self, press: ButtonPress, text: str) -> None:
        self.acks.append(text)


def press(sender_id: str, name: str, choice: str = "y") -> ButtonPress:
    return ButtonPress("t", "t:chat:1", "1", f"p-{sender_id}", sender_id, name, f"ap:a1:{choice}")


async def test_a_press_during_the_send_waits_for_it_and_counts() -> None:
    agent, outbound, writer = Agent(), Outbound(), SlowWriter()
    desk = ApprovalDesk(agent, outbound)  # type: ignore[arg-type]
    async with anyio.create_task_group() as group:
        group.start_soon(desk.ask, writer, ADA, "a1", "echo ok")
        await writer.sending.wait()
        group.start_soon(desk.press, press("9", "Mallory"))  # not the asker: refused at once
        group.start_soon(desk.press, press("7", "Ada"))  # the asker: waits for the send
        await anyio.sleep(0.05)
        assert agent.resolved == [] and outbound.acks == ["Only Ada can answer this."]
        writer.release.set()
    assert agent.resolved == [("a1", True)]
    assert outbound.acks == ["Only Ada can answer this.", "✅ Approved"]
    assert writer.settled == ["✅ Approved by Ada:\n```\necho ok\n```"]


async def test_a_turn_that_ends_while_its_question_is_on_its_way_refuses_it_once_shown() -> None:
    agent, outbound, writer = Agent(), Outbound(), SlowWriter()
    desk = ApprovalDesk(agent, outbound)  # type: ignore[arg-type]
    async with anyio.create_task_group() as group:
        group.start_soon(desk.ask, writer, ADA, "a1", "echo ok")
        await writer.sending.wait()
        await desk.close(writer)  # type: ignore[arg-type]
        writer.release.set()
    assert writer.settled == ["⌛ No answer: refused.\n```\necho ok\n```"]
    await desk.press(press("7", "Ada"))
    assert agent.resolved == [] and outbound.acks == ["This question is closed."]
